#include "fusetune/db/store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/base/time.h"
#include "nlohmann/json.hpp"
#include "schema.h"
#include "sqlite.h"

// Returns early with the error of a StatusOr expression, else assigns its value.
#define FT_DB_CONCAT_INNER(a, b) a##b
#define FT_DB_CONCAT(a, b) FT_DB_CONCAT_INNER(a, b)
#define FT_DB_ASSIGN_OR_RETURN(lhs, expr) \
  FT_DB_ASSIGN_OR_RETURN_IMPL(FT_DB_CONCAT(_statusor_, __LINE__), lhs, expr)
#define FT_DB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)
#define FT_DB_RETURN_IF_ERROR(expr) \
  do {                              \
    absl::Status _st = (expr);      \
    if (!_st.ok()) return _st;      \
  } while (0)

namespace fusetune {

using db_internal::Connection;
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

// Upper bound on any list a caller can ask for: keeps one call's memory bounded.
constexpr int kMaxListLimit = 100000;

// A state read back from the database: one it does not name is corruption.
absl::StatusOr<JobState> StoredJobState(std::string_view name) {
  if (std::optional<JobState> state = ParseJobState(name)) return *state;
  return absl::DataLossError(
      absl::StrCat("unknown job state '", std::string(name), "' in the database"));
}

// nlohmann::json throws; every use is wrapped so that nothing escapes the store.
std::string DeviceToJson(const DeviceInfo& d) {
  nlohmann::json j = {{"backend", d.backend},   {"name", d.name},
                      {"arch", d.arch},         {"device_index", d.device_index},
                      {"sm_count", d.sm_count}, {"shared_mem_per_block", d.shared_mem_per_block},
                      {"l2_bytes", d.l2_bytes}, {"memory_bytes", d.memory_bytes},
                      {"driver", d.driver},     {"max_clock_mhz", d.max_clock_mhz}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<DeviceInfo> DeviceFromJson(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    DeviceInfo d;
    d.backend = j.value("backend", "");
    d.name = j.value("name", "");
    d.arch = j.value("arch", "");
    d.device_index = j.value("device_index", 0);
    d.sm_count = j.value("sm_count", 0);
    d.shared_mem_per_block = j.value("shared_mem_per_block", int64_t{0});
    d.l2_bytes = j.value("l2_bytes", int64_t{0});
    d.memory_bytes = j.value("memory_bytes", int64_t{0});
    d.driver = j.value("driver", "");
    d.max_clock_mhz = j.value("max_clock_mhz", 0);
    return d;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed device JSON in the database: ", e.what()));
  }
}

// NaN samples are written as null (JSON has no NaN) and read back as NaN.
std::string SamplesToJson(const std::vector<double>& samples) {
  nlohmann::json j = nlohmann::json::array();
  for (double v : samples) {
    if (std::isfinite(v)) {
      j.push_back(v);
    } else {
      j.push_back(nullptr);
    }
  }
  return j.dump();
}

absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_array()) return absl::DataLossError("samples_json is not an array");
    std::vector<double> out;
    out.reserve(j.size());
    for (const auto& v : j) {
      out.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
    }
    return out;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed samples JSON in the database: ", e.what()));
  }
}

// A trial's timing blocks, compactly (db/README.md lists the keys): {"n": samples,
// "us": median_us, "b": before, "a": after, "u": unsteady}, a device state as {"mhz":
// sm_clock_mhz, "mw": power_mw, "thr": throttle_reasons}. An unknown state is left out
// (its fields mean nothing) and reads back as DeviceState{}.
nlohmann::json DeviceStateToJson(const DeviceState& d) {
  return {{"mhz", d.sm_clock_mhz}, {"mw", d.power_mw}, {"thr", d.throttle_reasons}};
}

DeviceState DeviceStateFromJson(const nlohmann::json& j) {
  DeviceState d;
  d.known = true;
  d.sm_clock_mhz = j.at("mhz").get<int>();
  d.power_mw = j.at("mw").get<int>();
  d.throttle_reasons = j.at("thr").get<uint64_t>();
  return d;
}

std::string BlocksToJson(const std::vector<SampleBlock>& blocks) {
  nlohmann::json j = nlohmann::json::array();
  for (const SampleBlock& b : blocks) {
    nlohmann::json block = {{"n", b.samples}, {"us", b.median_us}, {"u", b.unsteady}};
    if (b.before.known) block["b"] = DeviceStateToJson(b.before);
    if (b.after.known) block["a"] = DeviceStateToJson(b.after);
    j.push_back(std::move(block));
  }
  return j.dump();
}

absl::StatusOr<std::vector<SampleBlock>> BlocksFromJson(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_array()) return absl::DataLossError("blocks_json is not an array");
    std::vector<SampleBlock> out;
    out.reserve(j.size());
    for (const auto& block : j) {
      SampleBlock b;
      b.samples = block.at("n").get<int>();
      b.median_us = block.at("us").get<double>();
      b.unsteady = block.at("u").get<bool>();
      if (block.contains("b")) b.before = DeviceStateFromJson(block.at("b"));
      if (block.contains("a")) b.after = DeviceStateFromJson(block.at("a"));
      out.push_back(b);
    }
    return out;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed blocks JSON in the database: ", e.what()));
  }
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

// ---- validation (bad input -> InvalidArgument before any SQL runs)

absl::Status RequireNonEmpty(std::string_view value, std::string_view what) {
  if (value.empty())
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " must not be empty"));
  return absl::OkStatus();
}

absl::Status RequirePositiveId(int64_t id, std::string_view what) {
  if (id <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " must be positive, got ", id));
  return absl::OkStatus();
}

absl::Status RequireLimit(int limit) {
  if (limit <= 0 || limit > kMaxListLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be in [1, ", kMaxListLimit, "], got ", limit));
  }
  return absl::OkStatus();
}

absl::Status ValidateTrial(const Trial& t) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.trial_id, "trial_id"));
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(t.run_id, "trial run_id"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.problem_key, "trial problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(t.config_key, "trial config_key"));
  if (t.attempt < 0) return absl::InvalidArgumentError("trial attempt must be >= 0");
  if (t.checked_elements < 0) return absl::InvalidArgumentError("checked_elements must be >= 0");
  if (t.sm_clock_mhz < 0) return absl::InvalidArgumentError("sm_clock_mhz must be >= 0");
  if (t.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  if (TrialOutcomeName(t.outcome) == "?")
    return absl::InvalidArgumentError("unknown trial outcome");
  if (TrialStageName(t.stage) == "?") return absl::InvalidArgumentError("unknown trial stage");
  if (!std::isfinite(t.wall_seconds) || t.wall_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("trial wall_seconds must be finite and >= 0, got ", t.wall_seconds));
  }
  for (size_t i = 0; i < t.blocks.size(); ++i) {
    const SampleBlock& b = t.blocks[i];
    const bool states_ok = b.before.sm_clock_mhz >= 0 && b.before.power_mw >= 0 &&
                           b.after.sm_clock_mhz >= 0 && b.after.power_mw >= 0;
    if (b.samples < 0 || !std::isfinite(b.median_us) || b.median_us < 0 || !states_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trial block ", i, ": samples, median_us, sm_clock_mhz and power_mw must be finite and >= 0"));
    }
  }
  // The id is derived from the fields, so that a retried upload is recognised and two stages
  // of one config never share a row (a final trial under its screen trial's id would be
  // dropped as a duplicate).
  const std::string expected_id = TrialId(t.run_id, t.problem_key, t.config_key, t.attempt, t.stage);
  if (t.trial_id != expected_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trial_id '", t.trial_id, "' is not TrialId(run_id, problem_key, config_key, attempt, stage) = '",
        expected_id, "'"));
  }
  return absl::OkStatus();
}

// ---- row readers (column order = the *_COLUMNS lists below)

constexpr char kRunColumns[] =
    "run_id, commit_hash, host, device_json, tool_version, environment, label, "
    "started_unix_ms, finished_unix_ms";

absl::StatusOr<RunInfo> ReadRun(const Statement& s) {
  RunInfo r;
  r.run_id = s.Int64(0);
  r.commit = s.Text(1);
  r.host = s.Text(2);
  FT_DB_ASSIGN_OR_RETURN(r.device, DeviceFromJson(s.Text(3)));
  r.tool_version = s.Text(4);
  r.environment = s.Text(5);
  r.label = s.Text(6);
  r.started_unix_ms = s.Int64(7);
  r.finished_unix_ms = s.Int64(8);
  return r;
}

constexpr char kTrialColumns[] =
    "t.trial_id, t.run_id, t.problem_key, t.config_key, t.attempt, t.outcome, t.message, "
    "t.samples_json, t.median_us, t.p10_us, t.p90_us, t.max_abs_error, t.max_rel_error, "
    "t.checked_elements, t.sm_clock_mhz, t.flops, t.created_unix_ms, t.stage, t.blocks_json, "
    "t.wall_seconds";

absl::StatusOr<Trial> ReadTrial(const Statement& s) {
  Trial t;
  t.trial_id = s.Text(0);
  t.run_id = s.Int64(1);
  t.problem_key = s.Text(2);
  t.config_key = s.Text(3);
  t.attempt = static_cast<int>(s.Int64(4));
  absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(s.Text(5));
  if (!outcome.ok()) return absl::DataLossError(outcome.status().message());
  t.outcome = *outcome;
  t.message = s.Text(6);
  FT_DB_ASSIGN_OR_RETURN(t.samples_us, SamplesFromJson(s.Text(7)));
  t.median_us = s.Double(8);
  t.p10_us = s.Double(9);
  t.p90_us = s.Double(10);
  t.max_abs_error = s.Double(11);
  t.max_rel_error = s.Double(12);
  t.checked_elements = s.Int64(13);
  t.sm_clock_mhz = static_cast<int>(s.Int64(14));
  t.flops = s.Double(15);
  t.created_unix_ms = s.Int64(16);
  absl::StatusOr<TrialStage> stage = ParseTrialStage(s.Text(17));
  if (!stage.ok()) return absl::DataLossError(stage.status().message());
  t.stage = *stage;
  FT_DB_ASSIGN_OR_RETURN(t.blocks, BlocksFromJson(s.Text(18)));
  t.wall_seconds = s.Double(19);
  return t;
}

constexpr char kAuditColumns[] =
    "audit_id, run_id, device_class, problem_key, recorded_config_key, best_config_key, "
    "recorded_us, best_us, regret, regret_low, regret_high, rounds, configs_measured, "
    "configs_failed, commit_hash, created_unix_ms";

AuditSummary ReadAudit(const Statement& s) {
  AuditSummary a;
  a.audit_id = s.Int64(0);
  a.run_id = s.IsNull(1) ? 0 : s.Int64(1);
  a.device_class = s.Text(2);
  a.problem_key = s.Text(3);
  a.recorded_config_key = s.Text(4);
  a.best_config_key = s.Text(5);
  a.recorded_us = s.Double(6);
  a.best_us = s.Double(7);
  a.regret = s.Double(8);
  a.regret_low = s.Double(9);
  a.regret_high = s.Double(10);
  a.rounds = static_cast<int>(s.Int64(11));
  a.configs_measured = static_cast<int>(s.Int64(12));
  a.configs_failed = static_cast<int>(s.Int64(13));
  a.commit = s.Text(14);
  a.created_unix_ms = s.Int64(15);
  return a;
}

constexpr char kBestColumns[] =
    "device_class, problem_key, config_key, median_us, p10_us, p90_us, max_abs_error, "
    "max_rel_error, speedup_vs_materialized, speedup_vs_partial, best_materialized_us, "
    "best_partial_us, run_id, commit_hash, updated_unix_ms";

BestConfig ReadBest(const Statement& s) {
  BestConfig b;
  b.device_class = s.Text(0);
  b.problem_key = s.Text(1);
  b.config_key = s.Text(2);
  b.median_us = s.Double(3);
  b.p10_us = s.Double(4);
  b.p90_us = s.Double(5);
  b.max_abs_error = s.Double(6);
  b.max_rel_error = s.Double(7);
  b.speedup_vs_materialized = s.Double(8);
  b.speedup_vs_partial = s.Double(9);
  b.best_materialized_us = s.Double(10);
  b.best_partial_us = s.Double(11);
  b.run_id = s.IsNull(12) ? 0 : s.Int64(12);
  b.commit = s.Text(13);
  b.updated_unix_ms = s.Int64(14);
  return b;
}

constexpr char kRegressionColumns[] =
    "regression_id, commit_hash, baseline_commit, device_class, problem_key, config_key, metric, "
    "ratio, p_value, verdict, created_unix_ms";

Regression ReadRegression(const Statement& s) {
  Regression r;
  r.id = s.Int64(0);
  r.commit = s.Text(1);
  r.baseline_commit = s.Text(2);
  r.device_class = s.Text(3);
  r.problem_key = s.Text(4);
  r.config_key = s.Text(5);
  r.metric = s.Text(6);
  r.ratio = s.Double(7);
  r.p_value = s.Double(8);
  r.verdict = s.Text(9);
  r.created_unix_ms = s.Int64(10);
  return r;
}

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

}  // namespace

// ---------------------------------------------------------------------------------------

class Store::Impl {
 public:
  Impl(std::unique_ptr<Connection> c, StoreAccess a) : access(a), conn(std::move(c)) {}

  const StoreAccess access;
  absl::Mutex mu;
  std::unique_ptr<Connection> conn ABSL_GUARDED_BY(mu);

  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT. IMMEDIATE takes the write lock up front
  // (waiting up to the busy timeout), so two processes never deadlock by both upgrading a
  // read transaction. Any error rolls the whole transaction back.
  absl::Status WriteTransaction(const std::function<absl::Status(Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (access == StoreAccess::kReadOnly) {
      return absl::PermissionDeniedError(absl::StrCat(
          "database ", conn->path(), " was opened read-only; writing needs a Store opened with StoreAccess::kReadWrite"));
    }
    FT_DB_RETURN_IF_ERROR(conn->Exec("BEGIN IMMEDIATE"));
    absl::Status st = body(*conn);
    if (st.ok()) st = conn->Exec("COMMIT");
    if (!st.ok() && conn->InTransaction()) {
      (void)conn->Exec("ROLLBACK");  // the body's error is the one worth reporting
    }
    return st;
  }

  // A read transaction: several SELECTs see one consistent snapshot (WAL readers never
  // block writers or other readers).
  absl::Status ReadTransaction(const std::function<absl::Status(Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    FT_DB_RETURN_IF_ERROR(conn->Exec("BEGIN DEFERRED"));
    absl::Status st = body(*conn);
    if (conn->InTransaction()) {
      absl::Status end = conn->Exec(st.ok() ? "COMMIT" : "ROLLBACK");
      if (st.ok()) st = end;
    }
    return st;
  }
};

namespace {

absl::Status CheckRunExists(Connection& c, int64_t run_id) {
  FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT 1 FROM runs WHERE run_id = ?1"));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::OkStatus();
}

absl::StatusOr<Job> LoadJob(Connection& c, int64_t job_id) {
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, c.Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?1")));
  s.Bind(1, job_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  return ReadJob(s);
}

// Switching a file to WAL needs an exclusive lock, and SQLite returns SQLITE_BUSY for it
// without calling the busy handler (seen when several processes create one file at once),
// so this retries with backoff up to the busy timeout. A file already in WAL mode answers
// at once: the mode is persistent.
absl::StatusOr<std::string> SwitchToWal(Connection& c, int busy_timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  int sleep_ms = 1;
  while (true) {
    absl::StatusOr<std::string> mode = c.QueryText("PRAGMA journal_mode=WAL");
    if (mode.ok() || !absl::IsUnavailable(mode.status()) ||
        std::chrono::steady_clock::now() >= deadline) {
      return mode;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    sleep_ms = std::min(sleep_ms * 2, 50);
  }
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

// Inserts trials (already validated) inside the caller's transaction; counts new rows.
absl::StatusOr<int> InsertTrials(Connection& c, const std::vector<Trial>& trials) {
  std::set<int64_t> known_runs;
  int inserted = 0;
  const int64_t now = NowUnixMs();
  for (const Trial& t : trials) {
    if (known_runs.insert(t.run_id).second) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, t.run_id));
    // ON CONFLICT DO NOTHING (not INSERT OR IGNORE): only a duplicate trial_id is ignored;
    // a CHECK or NOT NULL violation still fails loudly.
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO trials (trial_id, run_id, problem_key, config_key, attempt, "
                  "outcome, message, samples_json, median_us, p10_us, p90_us, max_abs_error, "
                  "max_rel_error, checked_elements, sm_clock_mhz, flops, created_unix_ms, "
                  "stage, blocks_json, wall_seconds) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16, ?17, ?18, ?19, ?20) ON CONFLICT (trial_id) DO NOTHING"));
    s.Bind(1, t.trial_id)
        .Bind(2, t.run_id)
        .Bind(3, t.problem_key)
        .Bind(4, t.config_key)
        .Bind(5, t.attempt)
        .Bind(6, TrialOutcomeName(t.outcome))
        .Bind(7, t.message)
        .Bind(8, SamplesToJson(t.samples_us))
        .Bind(9, t.median_us)
        .Bind(10, t.p10_us)
        .Bind(11, t.p90_us)
        .Bind(12, t.max_abs_error)
        .Bind(13, t.max_rel_error)
        .Bind(14, t.checked_elements)
        .Bind(15, t.sm_clock_mhz)
        .Bind(16, t.flops)
        .Bind(17, t.created_unix_ms != 0 ? t.created_unix_ms : now)
        .Bind(18, TrialStageName(t.stage))
        .Bind(19, BlocksToJson(t.blocks))
        .Bind(20, t.wall_seconds);
    FT_DB_RETURN_IF_ERROR(s.Run());
    inserted += static_cast<int>(c.Changes());
  }
  return inserted;
}

}  // namespace

// ---- open / schema

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

int Store::LatestSchemaVersion() { return db_internal::Migrations().back().version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  return Open(path, StoreOptions{});
}

namespace {

// What a file holds before Open touches it: its schema version and whether it has any
// table at all (a file at version 0 with tables belongs to something else).
struct FileSchema {
  int version = 0;
  bool has_tables = false;
};

absl::StatusOr<FileSchema> ReadFileSchema(Connection& c) {
  // One statement, so both come from one snapshot: read apart, a concurrent creator's
  // migration could commit in between (version 0, then tables) and look like a foreign file.
  FT_DB_ASSIGN_OR_RETURN(std::string text,
                         c.QueryText("SELECT (SELECT user_version FROM pragma_user_version) || ' ' || "
                                     "(SELECT COUNT(*) FROM sqlite_master)"));
  FileSchema schema;
  int tables = 0;
  if (std::sscanf(text.c_str(), "%d %d", &schema.version, &tables) != 2) {
    return absl::InternalError(absl::StrCat("unexpected schema probe result '", text, "'"));
  }
  schema.has_tables = tables > 0;
  return schema;
}

absl::Status ForeignDatabase(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      path, " is not a fusetune database (an SQLite file with other tables and no fusetune schema version); check "
            "the database path"));
}

// A reader in a directory it cannot write: SQLite needs <db>-shm (the WAL index) to read
// <db>-wal, and cannot create it. Only pending WAL content makes that a real problem.
absl::Status PendingWalUnreadable(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      "database ", path, " has changes in ", path, "-wal that are not yet in the file, and this process cannot ",
      "create ", path, "-shm to read them (the directory is read-only for it); ask the owner to fold them in with ",
      "sqlite3 ", path, " 'PRAGMA wal_checkpoint(TRUNCATE)' (or to stop the process writing it), or copy ", path,
      " and ", path, "-wal to a writable directory and read the copy"));
}

// Opens an existing file for reading only: never creates, migrates or changes it.
absl::StatusOr<std::unique_ptr<Connection>> OpenForReading(const std::string& path, int busy_timeout_ms) {
  std::error_code ec;
  if (path != ":memory:" && !std::filesystem::exists(path, ec) && !ec) {
    return absl::NotFoundError(absl::StrCat("no database at ", path));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(path, busy_timeout_ms, db_internal::OpenMode::kReadOnly));
  absl::StatusOr<FileSchema> schema = ReadFileSchema(*conn);
  const int rc = conn->ErrorCode() & 0xff;
  if (!schema.ok() && path != ":memory:" && (rc == SQLITE_CANTOPEN || rc == SQLITE_READONLY)) {
    // Where <db>-shm cannot be created, a file with no pending WAL content can be read as it
    // is (immutable: no locks, no -shm). With pending content that would silently miss
    // committed data, so that is refused instead.
    std::error_code size_ec;
    const uintmax_t wal_bytes = std::filesystem::file_size(path + "-wal", size_ec);
    if (!size_ec && wal_bytes > 0) return PendingWalUnreadable(path);
    conn.reset();
    FT_DB_ASSIGN_OR_RETURN(conn, Connection::Open(path, busy_timeout_ms, db_internal::OpenMode::kImmutable));
    schema = ReadFileSchema(*conn);
  }
  if (!schema.ok()) return schema.status();
  const int latest = Store::LatestSchemaVersion();
  if (schema->version > latest) return db_internal::SchemaNewerThanBinary(path, schema->version, latest);
  if (schema->version == 0) {
    if (schema->has_tables) return ForeignDatabase(path);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a fusetune database (it has no tables); check the database path"));
  }
  if (schema->version < latest) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, " has schema version ", schema->version, ", older than this binary's ",
                     latest, "; a writing command (e.g. fusetune sweep) upgrades it, reading commands never change "
                     "the file"));
  }
  return conn;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   const StoreOptions& options) {
  if (path.empty()) return absl::InvalidArgumentError("database path must not be empty");
  if (options.busy_timeout_ms < 0)
    return absl::InvalidArgumentError("busy_timeout_ms must be >= 0");
  if (options.access == StoreAccess::kReadOnly) {
    FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, OpenForReading(path, options.busy_timeout_ms));
    return std::unique_ptr<Store>(new Store(std::make_unique<Impl>(std::move(conn), StoreAccess::kReadOnly)));
  }
  FT_DB_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(path, options.busy_timeout_ms));

  // Refuse a newer schema, or another program's database, before changing anything (not
  // even the journal mode).
  FT_DB_ASSIGN_OR_RETURN(FileSchema schema, ReadFileSchema(*conn));
  const int latest = LatestSchemaVersion();
  if (schema.version > latest) return db_internal::SchemaNewerThanBinary(path, schema.version, latest);
  if (schema.version == 0 && schema.has_tables) return ForeignDatabase(path);

  // WAL: readers never block the writer and a commit is one append to the -wal file.
  FT_DB_ASSIGN_OR_RETURN(std::string mode, SwitchToWal(*conn, options.busy_timeout_ms));
  if (mode != "wal" && mode != "memory") {
    return absl::FailedPreconditionError(
        absl::StrCat("could not switch database ", path, " to WAL mode (journal_mode=", mode, ")"));
  }
  FT_DB_RETURN_IF_ERROR(conn->Exec("PRAGMA foreign_keys=ON"));
  FT_DB_RETURN_IF_ERROR(conn->Exec(options.durability == Durability::kPowerLoss
                                       ? "PRAGMA synchronous=FULL"
                                       : "PRAGMA synchronous=NORMAL"));

  auto impl = std::make_unique<Impl>(std::move(conn), StoreAccess::kReadWrite);
  {
    absl::MutexLock lock(&impl->mu);
    // Read the version again under the write lock: another process may have migrated (or
    // upgraded the file) between our first look and now.
    absl::Status st = impl->WriteTransaction([&](Connection& c) {
      return db_internal::ApplyMigrations(c, db_internal::Migrations(), path);
    });
    if (!st.ok()) return st;
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

absl::StatusOr<int> Store::SchemaVersion() {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(std::string text, impl_->conn->QueryText("PRAGMA user_version"));
  return std::atoi(text.c_str());
}

// ---- runs

absl::StatusOr<int64_t> Store::BeginRun(const RunInfo& info) {
  if (info.started_unix_ms < 0 || info.finished_unix_ms < 0) {
    return absl::InvalidArgumentError("run timestamps must be >= 0");
  }
  absl::MutexLock lock(&impl_->mu);
  int64_t run_id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO runs (commit_hash, host, device_class, device_json, backend, "
                  "tool_version, environment, label, started_unix_ms, finished_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    s.Bind(1, info.commit)
        .Bind(2, info.host)
        .Bind(3, info.device.DeviceClass())
        .Bind(4, DeviceToJson(info.device))
        .Bind(5, info.device.backend)
        .Bind(6, info.tool_version)
        .Bind(7, info.environment)
        .Bind(8, info.label)
        .Bind(9, info.started_unix_ms != 0 ? info.started_unix_ms : NowUnixMs())
        .Bind(10, info.finished_unix_ms);
    FT_DB_RETURN_IF_ERROR(s.Run());
    run_id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return run_id;
}

absl::Status Store::FinishRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    // Finishing twice keeps the first finish time.
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("UPDATE runs SET finished_unix_ms = ?2 "
                                                  "WHERE run_id = ?1 AND finished_unix_ms = 0"));
    s.Bind(1, run_id).Bind(2, NowUnixMs());
    return s.Run();
  });
}

absl::StatusOr<RunInfo> Store::GetRun(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kRunColumns, " FROM runs WHERE run_id = ?1")));
  s.Bind(1, run_id);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return ReadRun(s);
}

absl::StatusOr<RunInfo> Store::FindUnfinishedRun(std::string_view commit,
                                                 std::string_view device_class,
                                                 std::string_view label) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, impl_->conn->Prepare(absl::StrCat(
                       "SELECT ", kRunColumns,
                       " FROM runs WHERE commit_hash = ?1 AND device_class = ?2 AND label = ?3 "
                       "AND finished_unix_ms = 0 ORDER BY run_id DESC LIMIT 1")));
  s.Bind(1, commit).Bind(2, device_class).Bind(3, label);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no unfinished run for commit '", std::string(commit),
                                            "', device class '", std::string(device_class),
                                            "', label '", std::string(label), "'"));
  }
  return ReadRun(s);
}

// ---- trials

absl::Status Store::RecordTrial(const Trial& trial) {
  return RecordTrialsCountingNew({trial}).status();
}

absl::Status Store::RecordTrials(const std::vector<Trial>& trials) {
  return RecordTrialsCountingNew(trials).status();
}

absl::StatusOr<int> Store::RecordTrialsCountingNew(const std::vector<Trial>& trials) {
  for (const Trial& t : trials) FT_DB_RETURN_IF_ERROR(ValidateTrial(t));
  if (trials.empty()) return 0;
  absl::MutexLock lock(&impl_->mu);
  int inserted = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(inserted, InsertTrials(c, trials));
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<int64_t> Store::CountTrials(int64_t run_id) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  int64_t count = 0;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    FT_DB_ASSIGN_OR_RETURN(Statement s, c.Prepare("SELECT COUNT(*) FROM trials WHERE run_id = ?1"));
    s.Bind(1, run_id);
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    count = row ? s.Int64(0) : 0;
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<Trial>> Store::ListTrials(int64_t run_id, std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequirePositiveId(run_id, "run_id"));
  absl::MutexLock lock(&impl_->mu);
  std::vector<Trial> out;
  FT_DB_RETURN_IF_ERROR(impl_->ReadTransaction([&](Connection& c) -> absl::Status {
    FT_DB_RETURN_IF_ERROR(CheckRunExists(c, run_id));
    // rowid order is insertion order (rows are never deleted).
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare(absl::StrCat("SELECT ", kTrialColumns,
                               " FROM trials t WHERE t.run_id = ?1 "
                               "AND (?2 = '' OR t.problem_key = ?2) ORDER BY t.rowid")));
    s.Bind(1, run_id).Bind(2, problem_key);
    while (true) {
      FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      FT_DB_ASSIGN_OR_RETURN(Trial t, ReadTrial(s));
      out.push_back(std::move(t));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<Trial>> Store::RecordedTrials(int64_t run_id) { return ListTrials(run_id); }

absl::StatusOr<std::vector<Trial>> Store::ListTrialsForProblem(std::string_view device_class,
                                                               std::string_view problem_key,
                                                               int limit) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s,
      impl_->conn->Prepare(absl::StrCat("SELECT ", kTrialColumns,
                                        " FROM trials t JOIN runs r ON r.run_id = t.run_id "
                                        "WHERE t.problem_key = ?1 AND r.device_class = ?2 "
                                        "ORDER BY t.created_unix_ms DESC, t.rowid DESC LIMIT ?3")));
  s.Bind(1, problem_key).Bind(2, device_class).Bind(3, limit);
  std::vector<Trial> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    FT_DB_ASSIGN_OR_RETURN(Trial t, ReadTrial(s));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<bool> Store::HasTrial(std::string_view trial_id) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(trial_id, "trial_id"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare("SELECT 1 FROM trials WHERE trial_id = ?1"));
  s.Bind(1, trial_id);
  return s.Step();
}

// ---- best configs

absl::Status Store::UpsertBestConfig(const BestConfig& b) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(b.config_key, "config_key"));
  if (b.run_id < 0) return absl::InvalidArgumentError("best config run_id must be >= 0");
  if (b.updated_unix_ms < 0) return absl::InvalidArgumentError("updated_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  return impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    if (b.run_id != 0) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, b.run_id));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO best_configs (device_class, problem_key, config_key, median_us, "
                  "p10_us, p90_us, max_abs_error, max_rel_error, speedup_vs_materialized, "
                  "speedup_vs_partial, best_materialized_us, best_partial_us, run_id, "
                  "commit_hash, updated_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) "
                  "ON CONFLICT (device_class, problem_key) DO UPDATE SET "
                  "config_key = excluded.config_key, median_us = excluded.median_us, "
                  "p10_us = excluded.p10_us, p90_us = excluded.p90_us, "
                  "max_abs_error = excluded.max_abs_error, "
                  "max_rel_error = excluded.max_rel_error, "
                  "speedup_vs_materialized = excluded.speedup_vs_materialized, "
                  "speedup_vs_partial = excluded.speedup_vs_partial, "
                  "best_materialized_us = excluded.best_materialized_us, "
                  "best_partial_us = excluded.best_partial_us, run_id = excluded.run_id, "
                  "commit_hash = excluded.commit_hash, "
                  "updated_unix_ms = excluded.updated_unix_ms"));
    s.Bind(1, b.device_class)
        .Bind(2, b.problem_key)
        .Bind(3, b.config_key)
        .Bind(4, b.median_us)
        .Bind(5, b.p10_us)
        .Bind(6, b.p90_us)
        .Bind(7, b.max_abs_error)
        .Bind(8, b.max_rel_error)
        .Bind(9, b.speedup_vs_materialized)
        .Bind(10, b.speedup_vs_partial)
        .Bind(11, b.best_materialized_us)
        .Bind(12, b.best_partial_us)
        .BindIdOrNull(13, b.run_id)
        .Bind(14, b.commit)
        .Bind(15, b.updated_unix_ms != 0 ? b.updated_unix_ms : NowUnixMs());
    return s.Run();
  });
}

absl::Status Store::RecordBestConfig(const BestConfig& best) { return UpsertBestConfig(best); }

absl::StatusOr<BestConfig> Store::GetBestConfig(std::string_view device_class,
                                                std::string_view problem_key) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(problem_key, "problem_key"));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s,
                         impl_->conn->Prepare(absl::StrCat(
                             "SELECT ", kBestColumns,
                             " FROM best_configs WHERE device_class = ?1 AND problem_key = ?2")));
  s.Bind(1, device_class).Bind(2, problem_key);
  FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat("no best config for '", std::string(problem_key),
                                            "' on '", std::string(device_class), "'"));
  }
  return ReadBest(s);
}

absl::StatusOr<std::vector<BestConfig>> Store::ListBestConfigs(std::string_view device_class) {
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kBestColumns,
                                          " FROM best_configs WHERE (?1 = '' OR device_class = ?1) "
                                          "ORDER BY problem_key, device_class")));
  s.Bind(1, device_class);
  std::vector<BestConfig> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadBest(s));
  }
  return out;
}

// ---- regressions

absl::StatusOr<int64_t> Store::RecordRegression(const Regression& r) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.commit, "commit"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.baseline_commit, "baseline_commit"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.device_class, "device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.problem_key, "problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.config_key, "config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(r.metric, "metric"));
  if (r.verdict != "regressed" && r.verdict != "same" && r.verdict != "improved" &&
      r.verdict != "unknown") {
    return absl::InvalidArgumentError(absl::StrCat(
        "verdict must be regressed, same, improved or unknown, got '", r.verdict, "'"));
  }
  if (r.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO regressions (commit_hash, baseline_commit, device_class, "
                  "problem_key, config_key, metric, ratio, p_value, verdict, created_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
    s.Bind(1, r.commit)
        .Bind(2, r.baseline_commit)
        .Bind(3, r.device_class)
        .Bind(4, r.problem_key)
        .Bind(5, r.config_key)
        .Bind(6, r.metric)
        .Bind(7, r.ratio)
        .Bind(8, r.p_value)
        .Bind(9, r.verdict)
        .Bind(10, r.created_unix_ms != 0 ? r.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<Regression>> Store::ListRegressions(std::string_view commit, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(Statement s, impl_->conn->Prepare(absl::StrCat(
                                          "SELECT ", kRegressionColumns,
                                          " FROM regressions WHERE (?1 = '' OR commit_hash = ?1) "
                                          "ORDER BY regression_id DESC LIMIT ?2")));
  s.Bind(1, commit).Bind(2, limit);
  std::vector<Regression> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRegression(s));
  }
  return out;
}

// ---- audits

absl::StatusOr<int64_t> Store::RecordAudit(const AuditSummary& a) {
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.device_class, "audit device_class"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.problem_key, "audit problem_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.recorded_config_key, "audit recorded_config_key"));
  FT_DB_RETURN_IF_ERROR(RequireNonEmpty(a.best_config_key, "audit best_config_key"));
  if (a.run_id < 0) return absl::InvalidArgumentError("audit run_id must be >= 0");
  if (a.rounds < 0 || a.configs_measured < 0 || a.configs_failed < 0) {
    return absl::InvalidArgumentError("audit rounds, configs_measured and configs_failed must be >= 0");
  }
  if (a.recorded_us < 0 || a.best_us < 0) {
    return absl::InvalidArgumentError("audit recorded_us and best_us must not be negative");
  }
  if (a.created_unix_ms < 0) return absl::InvalidArgumentError("created_unix_ms must be >= 0");
  absl::MutexLock lock(&impl_->mu);
  int64_t id = 0;
  FT_DB_RETURN_IF_ERROR(impl_->WriteTransaction([&](Connection& c) -> absl::Status {
    if (a.run_id != 0) FT_DB_RETURN_IF_ERROR(CheckRunExists(c, a.run_id));
    FT_DB_ASSIGN_OR_RETURN(
        Statement s,
        c.Prepare("INSERT INTO audits (run_id, device_class, problem_key, recorded_config_key, "
                  "best_config_key, recorded_us, best_us, regret, regret_low, regret_high, rounds, "
                  "configs_measured, configs_failed, commit_hash, created_unix_ms) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"));
    s.BindIdOrNull(1, a.run_id)
        .Bind(2, a.device_class)
        .Bind(3, a.problem_key)
        .Bind(4, a.recorded_config_key)
        .Bind(5, a.best_config_key)
        .Bind(6, a.recorded_us)
        .Bind(7, a.best_us)
        .Bind(8, a.regret)
        .Bind(9, a.regret_low)
        .Bind(10, a.regret_high)
        .Bind(11, a.rounds)
        .Bind(12, a.configs_measured)
        .Bind(13, a.configs_failed)
        .Bind(14, a.commit)
        .Bind(15, a.created_unix_ms != 0 ? a.created_unix_ms : NowUnixMs());
    FT_DB_RETURN_IF_ERROR(s.Run());
    id = c.LastInsertRowId();
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<std::vector<AuditSummary>> Store::ListAudits(std::string_view device_class,
                                                            std::string_view problem_key, int limit) {
  FT_DB_RETURN_IF_ERROR(RequireLimit(limit));
  absl::MutexLock lock(&impl_->mu);
  FT_DB_ASSIGN_OR_RETURN(
      Statement s, impl_->conn->Prepare(absl::StrCat(
                       "SELECT ", kAuditColumns,
                       " FROM audits WHERE (?1 = '' OR device_class = ?1) AND (?2 = '' OR problem_key = ?2) "
                       "ORDER BY created_unix_ms DESC, audit_id DESC LIMIT ?3")));
  s.Bind(1, device_class).Bind(2, problem_key).Bind(3, limit);
  std::vector<AuditSummary> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadAudit(s));
  }
  return out;
}

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
  std::vector<WorkerRecord> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadWorker(s));
  }
  return out;
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
  std::vector<Job> out;
  while (true) {
    FT_DB_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    FT_DB_ASSIGN_OR_RETURN(Job j, ReadJob(s));
    out.push_back(std::move(j));
  }
  return out;
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
