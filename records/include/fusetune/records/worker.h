// Worker records: a registered worker daemon as the server keeps it.
//
// Thread-safety: plain value type.
#ifndef FUSETUNE_RECORDS_WORKER_H_
#define FUSETUNE_RECORDS_WORKER_H_

#include <cstdint>
#include <string>

namespace fusetune {

// One worker (one device of one host) as registered, with its last heartbeat.
struct WorkerRecord {
  std::string worker_id;
  std::string host;
  std::string backend;
  std::string device_class;
  std::string device_json;   // DeviceInfo as JSON
  int64_t registered_unix_ms = 0;        // Unix milliseconds
  int64_t last_heartbeat_unix_ms = 0;    // Unix milliseconds
};

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_WORKER_H_
