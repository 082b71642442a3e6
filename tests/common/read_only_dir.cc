#include "common/read_only_dir.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace fusetune::testing {
namespace {

// The real test of "read-only for this process": creating a file must fail.
bool CanCreateFileIn(const std::string& dir) {
  const std::string probe = dir + "/.write-probe";
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

// Sets or clears the immutable attribute of a directory (chattr +i / -i); errno on failure.
bool SetImmutable(const std::string& dir, bool on) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

ReadOnlyView::ReadOnlyView(const std::string& dir) : dir_(dir) {
  if (::geteuid() == 0) {
    // Root writes through permission bits, so only a read-only file system or the immutable
    // attribute stops it.
    std::string point = dir + ".ro-XXXXXX";
    if (::mkdtemp(point.data()) == nullptr) {
      reason_ = Errno("mkdtemp");
      return;
    }
    if (::mount(dir.c_str(), point.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      reason_ = Errno("read-only bind mount (needs CAP_SYS_ADMIN)");
      ::rmdir(point.c_str());
    } else if (::mount(nullptr, point.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0 ||
               CanCreateFileIn(point)) {
      reason_ = Errno("remounting the bind mount read-only");
      ::umount2(point.c_str(), MNT_DETACH);
      ::rmdir(point.c_str());
    } else {
      mount_point_ = point;
      path_ = point;
      mechanism_ = "read-only bind mount";
      undo_ = Undo::kUnmount;
      return;
    }
    if (SetImmutable(dir, true)) {
      if (!CanCreateFileIn(dir)) {
        path_ = dir;
        mechanism_ = "immutable directory";
        undo_ = Undo::kClearImmutable;
        return;
      }
      SetImmutable(dir, false);
    }
    reason_ += "; " + Errno("immutable attribute (needs CAP_LINUX_IMMUTABLE and ext4 or similar)");
    reason_ = "running as root, and no way to make a directory read-only works here: " + reason_;
    return;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    reason_ = Errno("stat");
    return;
  }
  original_mode_ = st.st_mode & 07777;
  if (::chmod(dir.c_str(), 0555) != 0) {
    reason_ = Errno("chmod 0555");
    return;
  }
  undo_ = Undo::kRestoreMode;
  if (CanCreateFileIn(dir)) {
    reason_ = "mode 0555 does not stop this process from creating files (a capability?)";
    return;
  }
  path_ = dir;
  mechanism_ = "mode 0555";
}

ReadOnlyView::~ReadOnlyView() {
  switch (undo_) {
    case Undo::kUnmount:
      ::umount2(mount_point_.c_str(), MNT_DETACH);
      ::rmdir(mount_point_.c_str());
      break;
    case Undo::kClearImmutable:
      SetImmutable(dir_, false);
      break;
    case Undo::kRestoreMode:
      ::chmod(dir_.c_str(), original_mode_);
      break;
    case Undo::kNone:
      break;
  }
}

}  // namespace fusetune::testing
