// RecordSink: where a sweep's records go (its trials and its best configs), and what a run
// already holds, so that a sweep started again resumes instead of measuring twice.
//
// The tuner's RunSweep is the one caller: it reads the run's recorded trials once at its
// start, then records every trial as it completes and each problem's best config once it is
// selected. Implementations: the SQLite Store (the `fusetune sweep` command) and the worker
// daemon's spool-backed sink (its trials go to the server through the spool and uploader).
//
// Thread-safety: as the implementation says; the tuner calls a sink from one thread.
#ifndef FUSETUNE_RECORDS_SINK_H_
#define FUSETUNE_RECORDS_SINK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"

namespace fusetune {

// A stream of trials alone: what a sweep's sink passes its trials on to (the worker's
// launch-failure streak and uploader are TrialSinks behind its RecordSink).
class TrialSink {
 public:
  virtual ~TrialSink() = default;

  // Durably records one trial; idempotent by trial_id (a second write of the same id is OK
  // and changes nothing). An error means the trial was not recorded.
  virtual absl::Status RecordTrial(const Trial& trial) = 0;
};

// Every record of a sweep: its trials (TrialSink), each problem's best config, and what the
// run holds already.
class RecordSink : public TrialSink {
 public:

  // Records a problem's best config, selected from the trials this sink was given; it
  // replaces the one held for the same (device class, problem key). Idempotent: writing the
  // same config again is OK and changes nothing. An error means it was not recorded (the
  // trials it came from stay recorded).
  virtual absl::Status RecordBestConfig(const BestConfig& best) = 0;

  // The trials of `run_id` that are recorded already, in any order (empty for a fresh run).
  // An error means they could not be read; the sweep then does not start.
  virtual absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t run_id) = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_SINK_H_
