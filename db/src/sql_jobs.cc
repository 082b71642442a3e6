#include "fusetune/db/store.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "nlohmann/json.hpp"
#include "sql.h"
#include "sql_rows.h"
#include "sql_store.h"

// The workers table and the job queue: the lease state machine (queued -> leased -> done |
// failed; leased -> queued on expiry or release), each transition one write transaction.

namespace fusetune::db_internal {

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
  s.ReadColumns(0, &w.worker_id, &w.host, &w.backend, &w.device_class, &w.device_json, &w.registered_unix_ms,
                &w.last_heartbeat_unix_ms);
  return w;
}

constexpr char kJobColumns[] =
    "job_id, state, device_class, commit_hash, problem_keys_json, spec_json, max_trials, "
    "max_seconds, leased_by, lease_expiry_unix_ms, attempts, run_id, error, created_unix_ms, "
    "finished_unix_ms, lease_token";

absl::StatusOr<Job> ReadJob(const Statement& s) {
  Job j;
  j.job_id = s.Int64(0);
  FT_DB_ASSIGN_OR_RETURN(j.state, StoredJobState(s.Text(1)));
  j.device_class = s.Text(2);
  j.commit = s.Text(3);
  FT_DB_ASSIGN_OR_RETURN(j.problem_keys, StringsFromJson(s.Text(4)));
  s.ReadColumns(5, &j.spec_json, &j.max_trials, &j.max_seconds, &j.leased_by, &j.lease_expiry_unix_ms, &j.attempts);
  j.run_id = s.IsNull(11) ? 0 : s.Int64(11);
  s.ReadColumns(12, &j.error, &j.created_unix_ms, &j.finished_unix_ms, &j.lease_token);
  return j;
}

// `for_update`: the caller's write transaction changes the job next, so the row is locked
// until it commits (two servers completing one job see each other's change).
absl::StatusOr<Job> LoadJob(Connection& c, int64_t job_id, bool for_update = true) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?1",
                                                             for_update ? c.ForUpdate() : "")));
  s.Bind(1, job_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  return ReadJob(s);
}

// The time a lease method works with: the caller's, or the database's for kDatabaseClock.
absl::StatusOr<int64_t> ResolveNow(Connection& c, int64_t now_unix_ms) {
  if (now_unix_ms != kDatabaseClock) return now_unix_ms;
  FT_DB_ASSIGN_OR_RETURN(const std::string text, c.QueryText(absl::StrCat("SELECT ", c.NowMillisSql())));
  return std::strtoll(text.c_str(), nullptr, 10);
}

// FailedPrecondition unless `worker_id` holds the job's lease under `lease_token` (any token
// when kNoLeaseToken). `action` says what was refused ("renewed", "completed", ...).
absl::Status CheckHolder(const Job& job, std::string_view worker_id, int64_t lease_token, std::string_view action) {
  if (job.state == JobState::kLeased && job.leased_by == worker_id &&
      (lease_token == kNoLeaseToken || lease_token == job.lease_token)) {
    return absl::OkStatus();
  }
  if (lease_token != kNoLeaseToken && lease_token != job.lease_token) {
    // Fencing: the lease this caller holds ended (expired or released) and the job was leased
    // again; whatever it did since must not count.
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.job_id, " cannot be ", std::string(action), " by '", std::string(worker_id), "' under lease token ",
        lease_token, ": that lease is stale (the job was leased again, token ", job.lease_token, ", state ",
        std::string(JobStateName(job.state)),
        job.leased_by.empty() ? "" : absl::StrCat(", held by '", job.leased_by, "'"), ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", job.job_id, " cannot be ", std::string(action), " by '", std::string(worker_id), "': not leased by it (state ",
      std::string(JobStateName(job.state)),
      job.leased_by.empty() ? "" : absl::StrCat(", held by '", job.leased_by, "'"), ")"));
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

absl::Status SqlStore::UpsertWorker(const WorkerRecord& w) {
  FT_DB_RETURN_IF_ERROR(ValidateWorker(w));
  const int64_t registered = w.registered_unix_ms != 0 ? w.registered_unix_ms : NowUnixMs();
  const int64_t heartbeat = w.last_heartbeat_unix_ms != 0 ? w.last_heartbeat_unix_ms : registered;
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
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
    s.BindAll(w.worker_id, w.host, w.backend, w.device_class, w.device_json, registered, heartbeat);
    return s.Run();
  });
}

absl::Status SqlStore::TouchWorker(std::string_view worker_id, int64_t now_unix_ms) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    // The later of the two: a delayed heartbeat never moves the time backwards.
    FT_DB_ASSIGN_OR_RETURN(Statement s,
                           c.Prepare("UPDATE workers SET last_heartbeat_unix_ms = "
                                     "CASE WHEN last_heartbeat_unix_ms > ?2 THEN last_heartbeat_unix_ms ELSE ?2 END "
                                     "WHERE worker_id = ?1"));
    s.Bind(1, worker_id).Bind(2, now_unix_ms);
    FT_DB_RETURN_IF_ERROR(s.Run());
    if (c.Changes() == 0) {
      return absl::NotFoundError(
          absl::StrCat("worker '", std::string(worker_id), "' is not registered"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<WorkerRecord>> SqlStore::ListWorkers() {
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         conn_->Prepare(absl::StrCat("SELECT ", kWorkerColumns,
                                                           " FROM workers ORDER BY worker_id")));
  return ReadRows<WorkerRecord>(s, ReadWorker);
}

// ---- jobs

absl::StatusOr<int64_t> SqlStore::EnqueueJob(const Job& job) {
  FT_DB_RETURN_IF_ERROR(ValidateNewJob(job));
  FT_DB_ASSIGN_OR_RETURN(const std::string problem_keys_json, StringsToJson(job.problem_keys));
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    // Whatever state the caller filled in, a new job starts queued and unleased.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO jobs (state, device_class, commit_hash, problem_keys_json, "
                  "spec_json, max_trials, max_seconds, created_unix_ms) "
                  "VALUES ('queued', ?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    s.BindAll(job.device_class, job.commit, problem_keys_json, job.spec_json, job.max_trials, job.max_seconds,
              job.created_unix_ms != 0 ? job.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    FT_DB_ASSIGN_OR_RETURN(id, c.LastInsertRowId());
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<Job> SqlStore::GetJob(int64_t job_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  absl::MutexLock lock(&mu_);
  return LoadJob(*conn_, job_id, /*for_update=*/false);
}

absl::StatusOr<std::vector<Job>> SqlStore::ListJobs(std::optional<JobState> state, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  return SelectRows<Job>(absl::StrCat("SELECT ", kJobColumns,
                                      " FROM jobs WHERE (?1 = '' OR state = ?1) ORDER BY job_id DESC LIMIT ?2"),
                         ReadJob, state.has_value() ? JobStateName(*state) : std::string_view(), limit);
}

absl::StatusOr<Job> SqlStore::LeaseJob(std::string_view worker_id, std::string_view device_class,
                                    int64_t now_unix_ms, int64_t lease_ms) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  absl::MutexLock lock(&mu_);
  std::optional<Job> leased;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(const int64_t now, ResolveNow(c, now_unix_ms));
    FT_DB_RETURN_IF_ERROR(ExpireLeasesLocked(c, now).status());
    int64_t job_id = 0;
    {
      FT_DB_ASSIGN_OR_RETURN(Statement s,
                             c.Prepare(absl::StrCat("SELECT job_id FROM jobs WHERE state = 'queued' AND "
                                                    "device_class = ?1 ORDER BY job_id LIMIT 1",
                                                    c.ForUpdateSkipLocked())));
      s.Bind(1, device_class);
      FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
      // Nothing to lease: still commit, so the expiries above are not rolled back.
      if (!row) return absl::OkStatus();
      job_id = s.Int64(0);
    }
    {
      FT_DB_ASSIGN_OR_RETURN(Statement s,
                             c.Prepare("UPDATE jobs SET state = 'leased', leased_by = ?2, "
                                       "lease_expiry_unix_ms = ?3, attempts = attempts + 1, "
                                       "lease_token = lease_token + 1 "
                                       "WHERE job_id = ?1 AND state = 'queued'"));
      s.BindAll(job_id, worker_id, now + lease_ms);
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

absl::Status SqlStore::RenewLease(int64_t job_id, std::string_view worker_id, int64_t lease_token,
                                  int64_t now_unix_ms, int64_t lease_ms) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (lease_token < 0) return absl::InvalidArgumentError("lease_token must be >= 0");
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    // A lease past its expiry that nobody has reclaimed yet is still this worker's: renewing
    // it is the cheapest correct outcome (the work is not lost).
    FT_DB_RETURN_IF_ERROR(CheckHolder(job, worker_id, lease_token, "renewed"));
    FT_DB_ASSIGN_OR_RETURN(const int64_t now, ResolveNow(c, now_unix_ms));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s, c.Prepare("UPDATE jobs SET lease_expiry_unix_ms = ?2 WHERE job_id = ?1"));
    s.Bind(1, job_id).Bind(2, now + lease_ms);
    return s.Run();
  });
}

absl::Status SqlStore::SetJobRun(int64_t job_id, int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(LoadJob(c, job_id).status());
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("UPDATE jobs SET run_id = ?2 WHERE job_id = ?1"));
    s.Bind(1, job_id).Bind(2, run_id);
    return s.Run();
  });
}

absl::Status SqlStore::CompleteJob(int64_t job_id, std::string_view worker_id, int64_t lease_token, bool success,
                                   std::string_view error, int64_t now_unix_ms) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (lease_token < 0) return absl::InvalidArgumentError("lease_token must be >= 0");
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    const bool terminal = job.state == JobState::kDone || job.state == JobState::kFailed;
    if (terminal && job.leased_by == worker_id &&
        (lease_token == kNoLeaseToken || lease_token == job.lease_token)) {
      return absl::OkStatus();  // a retried completion
    }
    FT_DB_RETURN_IF_ERROR(CheckHolder(job, worker_id, lease_token, "completed"));
    FT_DB_ASSIGN_OR_RETURN(const int64_t now, ResolveNow(c, now_unix_ms));
    // leased_by and lease_token are kept after completion: they name the lease that completed
    // the job, which is what makes a retried CompleteJob recognisable.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s, c.Prepare("UPDATE jobs SET state = ?2, error = ?3, finished_unix_ms = ?4, "
                               "lease_expiry_unix_ms = 0 WHERE job_id = ?1"));
    s.BindAll(job_id, success ? "done" : "failed", success ? std::string_view() : error, now);
    return s.Run();
  });
}

absl::Status SqlStore::ReleaseJob(int64_t job_id, std::string_view worker_id, int64_t lease_token) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(job_id, "job_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(worker_id, "worker_id"));
  if (lease_token < 0) return absl::InvalidArgumentError("lease_token must be >= 0");
  absl::MutexLock lock(&mu_);
  return WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(Job job, LoadJob(c, job_id));
    FT_DB_RETURN_IF_ERROR(CheckHolder(job, worker_id, lease_token, "released"));
    FT_DB_ASSIGN_OR_RETURN(Statement s,
                           c.Prepare("UPDATE jobs SET state = 'queued', leased_by = '', "
                                     "lease_expiry_unix_ms = 0 WHERE job_id = ?1"));
    s.Bind(1, job_id);
    return s.Run();
  });
}

absl::StatusOr<int> SqlStore::ExpireLeases(int64_t now_unix_ms) {
  if (now_unix_ms < 0) return absl::InvalidArgumentError("now_unix_ms must be >= 0");
  absl::MutexLock lock(&mu_);
  int expired = 0;
  FT_DB_RETURN_IF_ERROR(WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(const int64_t now, ResolveNow(c, now_unix_ms));
    FT_DB_ASSIGN_OR_RETURN(expired, ExpireLeasesLocked(c, now));
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> SqlStore::CountJobsByState() {
  absl::MutexLock lock(&mu_);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         conn_->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
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

absl::StatusOr<SharedStateStamp> SqlStore::ReadSharedStateStamp() {
  absl::MutexLock lock(&mu_);
  // CAST: PostgreSQL's SUM of a BIGINT is NUMERIC; both read back as integers this way.
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      conn_->Prepare("SELECT (SELECT COUNT(*) FROM best_configs),"
                     " (SELECT CAST(COALESCE(SUM(updated_unix_ms), 0) AS BIGINT) FROM best_configs),"
                     " (SELECT COALESCE(MAX(job_id), 0) FROM jobs WHERE state IN ('queued', 'leased')),"
                     " (SELECT COUNT(*) FROM jobs WHERE state = 'queued'),"
                     " (SELECT CAST(COALESCE(SUM(lease_token), 0) AS BIGINT) FROM jobs"
                     " WHERE state IN ('queued', 'leased'))"));
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  SharedStateStamp stamp;
  if (!row) return stamp;
  stamp.best_configs = s.Int64(0);
  stamp.best_configs_updated = s.Int64(1);
  stamp.newest_open_job = s.Int64(2);
  stamp.queued_jobs = s.Int64(3);
  stamp.open_lease_tokens = s.Int64(4);
  return stamp;
}

}  // namespace fusetune::db_internal
