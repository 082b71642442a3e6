// A directory this process can read but not write, for testing readers of a database on a
// read-only mount or in another user's directory. Test support only.
//
// The files are prepared in a writable directory first; ReadOnlyView then shows that
// directory read-only. It tries, in order, what really makes a directory unwritable for the
// current process (each one checked by trying to create a file):
//   1. as root: a read-only bind mount of the directory at a new path (needs CAP_SYS_ADMIN);
//      the original path stays writable, so a writer can keep using it;
//   2. as root: the immutable attribute on the directory itself (needs CAP_LINUX_IMMUTABLE
//      and a file system that has it, e.g. ext4): no entry can be created in it;
//   3. not root: mode 0555 on the directory itself.
// Existing files in the directory stay writable in cases 2 and 3 (as for another user's
// directory holding world-writable files); no new file can be created in any case.
//
// A test killed while a view exists leaves it behind (umount the *.ro-* directory, or
// chattr -i the directory, by hand).
//
// Thread-safety: none; create and destroy it on the test's thread.
#ifndef FUSETUNE_TESTS_COMMON_READ_ONLY_DIR_H_
#define FUSETUNE_TESTS_COMMON_READ_ONLY_DIR_H_

#include <string>

namespace fusetune::testing {

class ReadOnlyView {
 public:
  // Makes `dir` (an existing directory) read-only for this process; see ok(). A bind mount's
  // point is created next to `dir`, so pass a subdirectory of a temporary directory.
  explicit ReadOnlyView(const std::string& dir);
  // Undoes it (unmounts, clears the attribute or restores the mode) so `dir` can be removed.
  ~ReadOnlyView();
  ReadOnlyView(const ReadOnlyView&) = delete;
  ReadOnlyView& operator=(const ReadOnlyView&) = delete;

  // false when no mechanism works here; unavailable_reason() then says why (for GTEST_SKIP).
  bool ok() const { return !path_.empty(); }
  const std::string& unavailable_reason() const { return reason_; }
  // The read-only view of `dir` (dir itself for mechanisms 2 and 3).
  const std::string& path() const { return path_; }
  // Which mechanism is in use: "read-only bind mount", "immutable directory" or "mode 0555".
  const std::string& mechanism() const { return mechanism_; }

 private:
  enum class Undo { kNone, kUnmount, kClearImmutable, kRestoreMode };
  std::string dir_, path_, reason_, mechanism_, mount_point_;
  Undo undo_ = Undo::kNone;
  unsigned original_mode_ = 0;
};

}  // namespace fusetune::testing

#endif  // FUSETUNE_TESTS_COMMON_READ_ONLY_DIR_H_
