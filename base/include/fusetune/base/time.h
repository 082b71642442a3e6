// Wall-clock time as every record stores it.
//
// Thread-safety: thread-safe.
#ifndef FUSETUNE_BASE_TIME_H_
#define FUSETUNE_BASE_TIME_H_

#include <cstdint>
#include <string>

namespace fusetune {

// Milliseconds since the Unix epoch (UTC): the unit of every *_unix_ms field.
int64_t NowUnixMs();

// `unix_ms` as UTC in a strftime(3) format, e.g. "%Y-%m-%dT%H:%M:%SZ" (RFC 3339, what JSON
// carries) or "%Y-%m-%d %H:%M" (tables). Sub-second digits are dropped; an empty string when the
// time cannot be represented.
std::string FormatUtc(int64_t unix_ms, const char* strftime_format);

// The RFC 3339 form: FormatUtc(unix_ms, "%Y-%m-%dT%H:%M:%SZ").
std::string Rfc3339Utc(int64_t unix_ms);

}  // namespace fusetune

#endif  // FUSETUNE_BASE_TIME_H_
