#include "fusetune/db/store.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "nlohmann/json.hpp"
#include "sqlite.h"
#include "store_internal.h"

// The workers table and the job queue: the lease state machine (queued -> leased -> done |
// failed; leased -> queued on expiry or release), each transition one write transaction.

namespace fusetune {

using db_internal::CheckRunExists;
using db_internal::Connection;
using db_internal::ReadRows;
using db_internal::RequireLimit;
using db_internal::RequireNonEmpty;
using db_internal::RequirePositiveId;
using db_internal::Statement;

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kLeased:
      return "leased";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
  }
  return "?";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

namespace {

// A state read back from the database: one it does not name is corruption.
absl::StatusOr<JobState> StoredJobState(std::string_view name) {
  if (std::optional<JobState> state = ParseJobState(name)) return *state;
  return absl::DataLossError(
      absl::StrCat("unknown job state '", std::string(name), "' in the database"));
}

// Strict: a key that is not valid UTF-8 is refused rather than silently altered.
absl::StatusOr<std::string> StringsToJson(const std::vector<std::string>& v) {
  try {
    return nlohmann::json(v).dump();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("problem keys must be valid UTF-8: ", e.what()));
  }
}

absl::StatusOr<std::vector<std::string>> StringsFromJson(const std::string& text) {
  try {
    return nlohmann::json::parse(text).get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed JSON list in the database: ", e.what()));
  }
}

// Row readers: column order = the *Columns lists.

constexpr char kWorkerColumns[] =
    "worker_id, host, backend, device_class, device_json, registered_unix_ms, "
    "last_heartbeat_unix_ms";

WorkerRecord ReadWorker(const Statement& s) {
  WorkerRecord w;
  w.worker_id = s.Text(0);
  w.host = s.Text(1);
  w.backend = s.Text(2);
  w.device_class = s.Text(3);
  w.device_json = s.Text(4);
  w.registered_unix_ms = s.Int64(5);
  w.last_heartbeat_unix_ms = s.Int64(6);
  return w;
}

constexpr char kJobColumns[] =
    "job_id, state, device_class, commit_hash, problem_keys_json, spec_json, max_trials, "
    "max_seconds, leased_by, lease_expiry_unix_ms, attempts, run_id, error, created_unix_ms, "
    "finished_unix_ms";

absl::StatusOr<Job> ReadJob(const Statement& s) {
  Job j;
  j.job_id = s.Int64(0);
  FT_DB_ASSIGN_OR_RETURN(j.state, StoredJobState(s.Text(1)));
  j.device_class = s.Text(2);
  j.commit = s.Text(3);
  FT_DB_ASSIGN_OR_RETURN(j.problem_keys, StringsFromJson(s.Text(4)));
  j.spec_json = s.Text(5);
  j.max_trials = static_cast<int>(s.Int64(6));
  j.max_seconds = s.Double(7);
  j.leased_by = s.Text(8);
  j.lease_expiry_unix_ms = s.Int64(9);
  j.attempts = static_cast<int>(s.Int64(10));
  j.run_id = s.IsNull(11) ? 0 : s.Int64(11);
  j.error = s.Text(12);
  j.created_unix_ms = s.Int64(13);
  j.finished_unix_ms = s.Int64(14);
  return j;
}

absl::StatusOr<Job> LoadJob(Connection& c, int64_t job_id) {
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, c.Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?1")));
  s.Bind(1, job_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  return ReadJob(s);
}

absl::StatusOr<int> ExpireLeasesLocked(Connection& c, int64_t now_unix_ms) {
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      c.Prepare("UPDATE jobs SET state = 'queued', leased_by = '', lease_expiry_unix_ms = 0 "
                "WHERE state = 'leased' AND lease_expiry_unix_ms <= ?1"));
  s.Bind(1, now_unix_ms);
  FT_DB_RETURN_IF_ERROR(s.Run());
  return static_cast<int>(c.Changes());
}

}  // namespace

// ---- workers

absl::Status Store::UpsertWorker(const WorkerRecord& w) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(w.worker_id, "worker_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(w.device_class, "worker device_class"));
  if (w.registered_unix_ms < 0 || w.last_heartbeat_unix_ms < 0) {
    return absl::InvalidArgumentError("worker timestamps must be >= 0");
  }
  const int64_t registered = w.registered_unix_ms != 0 ? w.registered_unix_ms : NowUnixMs();
  const int64_t heartbeat = w.last_heartbeat_unix_ms != 0 ? w.last_heartbeat_unix_ms : registered;
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    // Re-registering (a restarted daemon) replaces everything, including registered time.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO workers (worker_id, host, backend, device_class, device_json, "
                  "registered_unix_ms, last_heartbeat_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                  "ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, "
                  "backend = excluded.backend, device_class = excluded.device_class, "
                  "device_json = excluded.device_json, "
                  "registered_unix_ms = excluded.registered_unix_ms, "
                  "last_heartbeat_unix_ms = excluded.last_heartbeat_unix_ms"));
    s.Bind(1, w.worker_id)
        .Bind(2, w.host)
        .Bind(3, w.backend)
        .Bind(4, w.device_class)
        .Bind(5, w.device_json)
        .Bind(6, registered)
        .Bind(7, heartbeat);
    return s.Run();
  });
}

absl::Status Store::TouchWorker(std::string_view worker_id, int64_t now_unix_ms) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    // MAX: a delayed heartbeat never moves the time backwards.
    FT_DB_ASSIGN_OR_RETURN(Statement s,
                           c.Prepare("UPDATE workers SET last_heartbeat_unix_ms = "
                                     "MAX(last_heartbeat_unix_ms, ?2) WHERE worker_id = ?1"));
    s.Bind(1, worker_id).Bind(2, now_unix_ms);
    FT_DB_RETURN_IF_ERROR(s.Run());
    if (c.Changes() == 0) {
      return absl::NotFoundError(
          absl::StrCat("worker '", std::string(worker_id), "' is not registered"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<WorkerRecord>> Store::ListWorkers() {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare(absl::StrCat("SELECT ", kWorkerColumns,
                                                           " FROM workers ORDER BY worker_id")));
  return ReadRows<WorkerRecord>(s, ReadWorker);
}

// ---- jobs

absl::StatusOr<int64_t> Store::EnqueueJob(const Job& job) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(job.device_class, "job device_class"));
  if (job.problem_keys.empty())
    return absl::InvalidArgumentError("a job needs at least one problem");
  for (const std::string& k : job.problem_keys)
    FT_DB_RETURN_IF_ERROR(RequireNonEmpty(k, "problem key"));
  if (job.max_trials < 0) return absl::InvalidArgumentError("max_trials must be >= 0");
  if (!(job.max_seconds >= 0) || std::isinf(job.max_seconds)) {
    return absl::InvalidArgumentError("max_seconds must be finite and >= 0");
  }
  if (job.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  FT_DB_ASSIGN_OR_RETURN(const std::string problem_keys_json, StringsToJson(job.problem_keys));
  absl::MutexLock lock(&impl_->mu);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    // Whatever state the caller filled in, a new job starts queued and unleased.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO jobs (state, device_class, commit_hash, problem_keys_json, "
                  "spec_json, max_trials, max_seconds, created_unix_ms) "
                  "VALUES ('queued', ?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    s.Bind(1, job.device_class)
        .Bind(2, job.commit)
        .Bind(3, problem_keys_json)
        .Bind(4, job.spec_json)
        .Bind(5, job.max_trials)
        .Bind(6, job.max_seconds)
        .Bind(7, job.created_unix_ms != 0 ? job.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<Job> Store::GetJob(int64_t job_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  absl::MutexLock lock(&impl_->mu);
  return LoadJob(*impl_->conn, job_id);
}

absl::StatusOr<std::vector<Job>> Store::ListJobs(std::optional<JobState> state, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, impl_->conn->Prepare(absl::StrCat(
                       "SELECT ", kJobColumns,
                       " FROM jobs WHERE (?1 = '' OR state = ?1) ORDER BY job_id DESC LIMIT ?2")));
  s.Bind(1, state.has_value() ? JobStateName(*state) : std::string_view()).Bind(2, limit);
  return ReadRows<Job>(s, ReadJob);
}

absl::StatusOr<Job> Store::LeaseJob(std::string_view worker_id, std::string_view device_class,
                                    int64_t now_unix_ms, int64_t lease_ms) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  absl::MutexLock lock(&impl_->mu);
  std::optional<Job> leased;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(ExpireLeasesLocked(c, now_unix_ms).status());
    int64_t job_id = 0;
    {
      FT_DB_ASSIGN_OR_RETURN(Statement s,
                             c.Prepare("SELECT job_id FROM jobs WHERE state = 'queued' AND "
                                       "device_class = ?1 ORDER BY job_id LIMIT 1"));
      s.Bind(1, device_class);
      FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
      // Nothing to lease: still commit, so the expiries above are not rolled back.
      if (!row) return absl::OkStatus();
      job_id = s.Int64(0);
    }
    {
      FT_DB_ASSIGN_OR_RETURN(Statement s,
                             c.Prepare("UPDATE jobs SET state = 'leased', leased_by = ?2, "
                                       "lease_expiry_unix_ms = ?3, attempts = attempts + 1 "
                                       "WHERE job_id = ?1 AND state = 'queued'"));
      s.Bind(1, job_id).Bind(2, worker_id).Bind(3, now_unix_ms + lease_ms);
      FT_DB_RETURN_IF_ERROR(s.Run());
    }
    FT_DB_ASSIGN_OR_RETURN(leased, LoadJob(c, job_id));
    return absl::OkStatus();
  }));
  if (!leased.has_value()) {
    return absl::NotFoundError(absl::StrCat("no queued job for '", std::string(device_class), "'"));
  }
  return *std::move(leased);
}

absl::Status Store::RenewLease(int64_t job_id, std::string_view worker_id, int64_t now_unix_ms,
                               int64_t lease_ms) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    // A lease past its expiry that nobody has reclaimed yet is still this worker's: renewing
    // it is the cheapest correct outcome (the work is not lost).
    if (job.state != JobState::kLeased || job.leased_by != worker_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " is not leased by '", std::string(worker_id), "' (state ",
          std::string(JobStateName(job.state)),
          job.leased_by.empty() ? "" : absl::StrCat(", held by '", job.leased_by, "'"), ")"));
    }
    FT_DB_ASSIGN_OR_RETURN(
        Statement s, c.Prepare("UPDATE jobs SET lease_expiry_unix_ms = ?2 WHERE job_id = ?1"));
    s.Bind(1, job_id).Bind(2, now_unix_ms + lease_ms);
    return s.Run();
  });
}

absl::Status Store::SetJobRun(int64_t job_id, int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(LoadJob(c, job_id).status());
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("UPDATE jobs SET run_id = ?2 WHERE job_id = ?1"));
    s.Bind(1, job_id).Bind(2, run_id);
    return s.Run();
  });
}

absl::Status Store::CompleteJob(int64_t job_id, std::string_view worker_id, bool success,
                                std::string_view error, int64_t now_unix_ms) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    const bool terminal = job.state == JobState::kDone || job.state == JobState::kFailed;
    if (terminal && job.leased_by == worker_id) return absl::OkStatus();  // a retried completion
    if (job.state != JobState::kLeased || job.leased_by != worker_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " cannot be completed by '", std::string(worker_id), "' (state ",
          std::string(JobStateName(job.state)),
          job.leased_by.empty() ? "" : absl::StrCat(", held by '", job.leased_by, "'"), ")"));
    }
    // leased_by is kept after completion: it names the worker that completed the job, which
    // is what makes a retried CompleteJob recognisable.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s, c.Prepare("UPDATE jobs SET state = ?2, error = ?3, finished_unix_ms = ?4, "
                               "lease_expiry_unix_ms = 0 WHERE job_id = ?1"));
    s.Bind(1, job_id)
        .Bind(2, success ? "done" : "failed")
        .Bind(3, success ? std::string_view() : error)
        .Bind(4, now_unix_ms);
    return s.Run();
  });
}

absl::Status Store::ReleaseJob(int64_t job_id, std::string_view worker_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    if (job.state != JobState::kLeased || job.leased_by != worker_id) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not leased by '",
                                                        std::string(worker_id), "' (state ",
                                                        std::string(JobStateName(job.state)), ")"));
    }
    FT_DB_ASSIGN_OR_RETURN(Statement s,
                           c.Prepare("UPDATE jobs SET state = 'queued', leased_by = '', "
                                     "lease_expiry_unix_ms = 0 WHERE job_id = ?1"));
    s.Bind(1, job_id);
    return s.Run();
  });
}

absl::StatusOr<int> Store::ExpireLeases(int64_t now_unix_ms) {
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  int expired = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(expired, ExpireLeasesLocked(c, now_unix_ms));
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> Store::CountJobsByState() {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
  // Every state is listed, zeros included, so a metrics gauge drops to 0 instead of vanishing.
  std::vector<std::pair<JobState, int64_t>> out = {
      {JobState::kQueued, 0}, {JobState::kLeased, 0}, {JobState::kDone, 0}, {JobState::kFailed, 0}};
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    FT_DB_ASSIGN_OR_RETURN(JobState st, StoredJobState(s.Text(0)));
    for (auto& [state, count] : out) {
      if (state == st) count = s.Int64(1);
    }
  }
  return out;
}

}  // namespace fusetune
