// Wall-clock time as every record stores it.
//
// Thread-safety: thread-safe.
#ifndef FUSETUNE_BASE_TIME_H_
#define FUSETUNE_BASE_TIME_H_

#include <cstdint>

namespace fusetune {

// Milliseconds since the Unix epoch (UTC): the unit of every *_unix_ms field.
int64_t NowUnixMs();

}  // namespace fusetune

#endif  // FUSETUNE_BASE_TIME_H_
