// TrialSink: where measured trials go (the SQLite store, the worker's spool and uploader).
//
// Thread-safety: as the implementation says; the tuner calls a sink from one thread.
#ifndef FUSETUNE_RECORDS_SINK_H_
#define FUSETUNE_RECORDS_SINK_H_

#include "absl/status/status.h"
#include "fusetune/records/trial.h"

namespace fusetune {

// Receives trials as they complete (the SQLite store, the worker's spool/uploader, ...).
class TrialSink {
 public:
  virtual ~TrialSink() = default;
  // Durably records one trial; idempotent by trial_id (a second write of the same id is OK
  // and changes nothing). An error means the trial was not recorded.
  virtual absl::Status RecordTrial(const Trial& trial) = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_SINK_H_
