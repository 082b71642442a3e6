// Change point records: where a cell's per-commit history changed level.
//
// Thread-safety: plain value types.
#ifndef FUSETUNE_RECORDS_CHANGE_POINT_H_
#define FUSETUNE_RECORDS_CHANGE_POINT_H_

#include <cstdint>
#include <string>

namespace fusetune {

// One change point of a cell's per-commit history (what `fusetune history --record` stores).
// A cell's history is identified by (device_class, suite, problem_key, config_key).
struct ChangePointRow {
  std::string device_class;
  std::string suite;
  std::string problem_key;
  std::string config_key;
  std::string commit;          // the first commit measured at the new level
  int64_t position = 0;        // its index in the history (0 = oldest point)
  double mean_before_us = 0;   // mean of the segment before, microseconds
  double mean_after_us = 0;    // mean of the segment after
  double ratio = 1;            // mean_after_us / mean_before_us (> 1: slower)
  double p_value = 1;          // the significance test's p-value
  std::string direction;       // "slower" or "faster"
  int64_t detected_unix_ms = 0;  // Unix milliseconds; 0 on write = now
};

// Which change points a store lists: empty fields match all.
struct ChangePointFilter {
  std::string device_class;
  std::string suite;
  std::string problem_key;
  std::string config_key;
  std::string commit;
};

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_CHANGE_POINT_H_
