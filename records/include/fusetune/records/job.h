// Job records: a tuning job of the server's queue and its state (queued -> leased -> done |
// failed; leased -> queued on expiry or release).
//
// Thread-safety: plain value types and pure functions.
#ifndef FUSETUNE_RECORDS_JOB_H_
#define FUSETUNE_RECORDS_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fusetune {

enum class JobState { kQueued, kLeased, kDone, kFailed };
std::string_view JobStateName(JobState s);  // "queued", "leased", "done", "failed"
// The state JobStateName names; nullopt for any other name.
std::optional<JobState> ParseJobState(std::string_view name);

// A tuning job: a list of problems to sweep on one device class at one commit.
struct Job {
  int64_t job_id = 0;
  JobState state = JobState::kQueued;
  std::string device_class;        // which workers may lease it
  std::string commit;
  std::vector<std::string> problem_keys;
  std::string spec_json;           // full request (problems incl. length lists, budget)
  int max_trials = 0;              // per problem; 0 = exhaustive
  double max_seconds = 0;          // per problem; 0 = unbounded
  std::string leased_by;           // worker_id while leased
  int64_t lease_expiry_unix_ms = 0;
  int attempts = 0;                // how many times it was leased
  // The fencing token of the current (or last) lease: each lease gets a larger one than every
  // earlier lease of the job, 0 before the first. A holder's renewal, uploads and completion
  // carry it, so a holder whose lease expired and was given to another is refused.
  int64_t lease_token = 0;
  int64_t run_id = 0;              // the run its trials go to (set on first lease)
  std::string error;               // when failed
  int64_t created_unix_ms = 0;
  int64_t finished_unix_ms = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_JOB_H_
