// The re-measurement of recorded best configs (`fusetune audit`): which problems to audit and
// against which recorded config, each audit run (tuner/audit.h) and recorded whole, its trials
// then its summary.
//
// Thread-safety: the functions keep no state; they are as safe as the Store and Backend given.
#ifndef FUSETUNE_REGRESS_AUDIT_TARGETS_H_
#define FUSETUNE_REGRESS_AUDIT_TARGETS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/tuner/audit.h"
#include "fusetune/tuner/config_space.h"

namespace fusetune::regress {

// A problem to audit and its recorded best config.
struct AuditTarget {
  AttentionProblem problem;
  KernelConfig recorded;
};

// What to audit. A problem without a recorded best config, or whose record names no problem
// that can be rebuilt, is skipped with a note; one whose record cannot be audited gets a note
// and is counted in `failures`.
struct AuditTargets {
  std::vector<AuditTarget> list;
  int failures = 0;
  std::vector<std::string> notes;  // one per skipped or failed problem, "PROBLEM_KEY: why"
};

// Every best config recorded on `device_class` whose problem can be rebuilt from its key and
// whose space `backend` can build with `space_options`. NotFound when none is recorded; the
// store's errors.
absl::StatusOr<AuditTargets> TargetsOfAllRecords(Store& store, const std::string& device_class,
                                                 const Backend& backend, const ConfigSpaceOptions& space_options);

// The best config recorded on `device_class` for each of `problems`. The store's errors.
absl::StatusOr<AuditTargets> TargetsOfProblems(Store& store, const std::string& device_class,
                                               const std::vector<AttentionProblem>& problems);

// Where the audits go and what each summary carries besides its measurements.
struct AuditRecording {
  Store& store;
  int64_t run_id;
  std::string device_class;
  std::string commit;
};

// Records an audit whole: its trials, then its summary. Returns the summary with its audit id;
// an error's message says which record failed.
absl::StatusOr<AuditSummary> RecordTrialsAndSummary(const AuditRecording& to, const AuditResult& result);

// The audits done, as recorded.
struct AuditedTargets {
  std::vector<AuditSummary> summaries;
  int failures = 0;        // targets whose audit failed
  bool cancelled = false;  // stopped by `cancel`
};

// Told, when set, of each audit as it is recorded, and of each target whose audit failed.
struct AuditEvents {
  std::function<void(const AuditSummary& summary, const AuditResult& result)> on_audited;
  std::function<void(const AuditTarget& target, const absl::Status& error)> on_failed;
};

// Audits each target in turn on `backend`, recording each audit once it is done. `cancel` (may
// be null) stops the audits between measurements; audits already finished stay recorded. A
// failed audit is counted and the next one starts; a failure to record ends the audits with
// that error.
absl::StatusOr<AuditedTargets> AuditEach(const std::vector<AuditTarget>& targets, Backend& backend,
                                         const AuditOptions& options, const AuditRecording& to,
                                         const std::atomic<bool>* cancel, const AuditEvents& events = {});

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_AUDIT_TARGETS_H_
