#include "fusetune/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

// absl::ErrnoToStatus maps errno to a status code (ENOENT to NotFound) and appends the OS
// reason through a thread-safe strerror.
absl::Status ReadError(int error_number, const std::string& path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat("cannot read '", path, "'"));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  // POSIX rather than std::ifstream: a stream's failure carries no reason, and errno after it
  // is not guaranteed to be the one that made it fail.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ReadError(errno, path);
  std::string data;
  struct stat info;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    data.reserve(static_cast<size_t>(info.st_size));  // a hint only: /proc files report 0
  }
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      data.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int error_number = errno;  // before close() may change it
      ::close(fd);
      return ReadError(error_number, path);  // e.g. EISDIR: a directory opens but does not read
    }
  }
  ::close(fd);
  return data;
}

}  // namespace fusetune
