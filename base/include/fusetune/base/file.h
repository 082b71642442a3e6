// Reading a whole file: suites, comparisons, TLS certificates and keys, the worker's spool.
//
// Thread-safety: thread-safe (no shared state; the error text comes from a thread-safe strerror).
#ifndef FUSETUNE_BASE_FILE_H_
#define FUSETUNE_BASE_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace fusetune {

// The bytes of the file at `path`, exactly as stored (NUL bytes and all; no newline
// translation); an empty string for an empty file. On failure the message is
// "cannot read '<path>': <the OS reason>" and the code follows errno: NotFound when the file
// does not exist, PermissionDenied when it may not be opened, FailedPrecondition for a
// directory, and so on. Callers prefix what the file is for.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace fusetune

#endif  // FUSETUNE_BASE_FILE_H_
