#include "schema.h"

#include <cstdlib>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "fusetune/records/commit.h"

namespace fusetune::db_internal {
namespace {

// Version 1: the tables of docs/architecture.md ("The store") but audits. Times are Unix
// milliseconds (INTEGER), latencies microseconds (REAL), keys the canonical strings of
// problem.h / config.h / DeviceInfo.
// "commit" is an SQL keyword, hence commit_hash. A NULL REAL means NaN (SQLite stores NaN
// as NULL); a NULL run_id in best_configs/jobs means "no run".
constexpr char kMigration1[] = R"sql(
CREATE TABLE runs (
  run_id            INTEGER PRIMARY KEY AUTOINCREMENT,
  commit_hash       TEXT    NOT NULL,
  host              TEXT    NOT NULL,
  device_class      TEXT    NOT NULL,
  device_json       TEXT    NOT NULL,
  backend           TEXT    NOT NULL,
  tool_version      TEXT    NOT NULL,
  environment       TEXT    NOT NULL,
  label             TEXT    NOT NULL,
  started_unix_ms   INTEGER NOT NULL,
  finished_unix_ms  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_resume_key ON runs (commit_hash, device_class, label, finished_unix_ms);
CREATE INDEX runs_by_device_class ON runs (device_class);

CREATE TABLE trials (
  trial_id          TEXT    PRIMARY KEY NOT NULL,
  run_id            INTEGER NOT NULL REFERENCES runs (run_id),
  problem_key       TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  attempt           INTEGER NOT NULL,
  outcome           TEXT    NOT NULL CHECK (outcome IN
                      ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out')),
  message           TEXT    NOT NULL,
  samples_json      TEXT    NOT NULL,
  median_us         REAL,
  p10_us            REAL,
  p90_us            REAL,
  max_abs_error     REAL,
  max_rel_error     REAL,
  checked_elements  INTEGER NOT NULL,
  sm_clock_mhz      INTEGER NOT NULL,
  flops             REAL,
  created_unix_ms   INTEGER NOT NULL
);
CREATE INDEX trials_by_run_problem ON trials (run_id, problem_key);
CREATE INDEX trials_by_problem_created ON trials (problem_key, created_unix_ms);

CREATE TABLE best_configs (
  device_class             TEXT    NOT NULL,
  problem_key              TEXT    NOT NULL,
  config_key               TEXT    NOT NULL,
  median_us                REAL,
  p10_us                   REAL,
  p90_us                   REAL,
  max_abs_error            REAL,
  max_rel_error            REAL,
  speedup_vs_materialized  REAL,
  speedup_vs_partial       REAL,
  best_materialized_us     REAL,
  best_partial_us          REAL,
  run_id                   INTEGER REFERENCES runs (run_id),
  commit_hash              TEXT    NOT NULL,
  updated_unix_ms          INTEGER NOT NULL,
  PRIMARY KEY (device_class, problem_key)
);

CREATE TABLE regressions (
  regression_id     INTEGER PRIMARY KEY AUTOINCREMENT,
  commit_hash       TEXT    NOT NULL,
  baseline_commit   TEXT    NOT NULL,
  device_class      TEXT    NOT NULL,
  problem_key       TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  metric            TEXT    NOT NULL,
  ratio             REAL,
  p_value           REAL,
  verdict           TEXT    NOT NULL CHECK (verdict IN ('regressed', 'same', 'improved', 'unknown')),
  created_unix_ms   INTEGER NOT NULL
);
CREATE INDEX regressions_by_commit ON regressions (commit_hash, regression_id);

CREATE TABLE workers (
  worker_id               TEXT    PRIMARY KEY NOT NULL,
  host                    TEXT    NOT NULL,
  backend                 TEXT    NOT NULL,
  device_class            TEXT    NOT NULL,
  device_json             TEXT    NOT NULL,
  registered_unix_ms      INTEGER NOT NULL,
  last_heartbeat_unix_ms  INTEGER NOT NULL
);

CREATE TABLE jobs (
  job_id                INTEGER PRIMARY KEY AUTOINCREMENT,
  state                 TEXT    NOT NULL CHECK (state IN ('queued', 'leased', 'done', 'failed')),
  device_class          TEXT    NOT NULL,
  commit_hash           TEXT    NOT NULL,
  problem_keys_json     TEXT    NOT NULL,
  spec_json             TEXT    NOT NULL,
  max_trials            INTEGER NOT NULL,
  max_seconds           REAL    NOT NULL,
  leased_by             TEXT    NOT NULL DEFAULT '',
  lease_expiry_unix_ms  INTEGER NOT NULL DEFAULT 0,
  attempts              INTEGER NOT NULL DEFAULT 0,
  run_id                INTEGER REFERENCES runs (run_id),
  error                 TEXT    NOT NULL DEFAULT '',
  created_unix_ms       INTEGER NOT NULL,
  finished_unix_ms      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_queue ON jobs (state, device_class, job_id);
CREATE INDEX jobs_by_lease_expiry ON jobs (state, lease_expiry_unix_ms);
)sql";

// Version 2: what a trial's measurement was (stage), its timing blocks with the device state
// read around each (blocks_json, see db/README.md for the keys) and its wall time; and the
// audits table (AuditSummary). Rows of version 1 read back as screen trials without blocks
// and with wall time 0. A NULL run_id in audits means "no run".
constexpr char kMigration2[] = R"sql(
ALTER TABLE trials ADD COLUMN stage TEXT NOT NULL DEFAULT 'screen'
  CHECK (stage IN ('screen', 'halving', 'final', 'audit'));
ALTER TABLE trials ADD COLUMN blocks_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE trials ADD COLUMN wall_seconds REAL NOT NULL DEFAULT 0;

CREATE TABLE audits (
  audit_id             INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id               INTEGER REFERENCES runs (run_id),
  device_class         TEXT    NOT NULL,
  problem_key          TEXT    NOT NULL,
  recorded_config_key  TEXT    NOT NULL,
  best_config_key      TEXT    NOT NULL,
  recorded_us          REAL,
  best_us              REAL,
  regret               REAL,
  regret_low           REAL,
  regret_high          REAL,
  rounds               INTEGER NOT NULL,
  configs_measured     INTEGER NOT NULL,
  configs_failed       INTEGER NOT NULL,
  commit_hash          TEXT    NOT NULL,
  created_unix_ms      INTEGER NOT NULL
);
CREATE INDEX audits_by_device_problem ON audits (device_class, problem_key, created_unix_ms, audit_id);
)sql";


// Version 3: bench_cells, the measured (problem, config) cells of bench runs (BenchCell). A
// cell is keyed by (run, problem, config, role): a re-measured cell replaces its row.
// problem_json is the full problem (incl. length lists), opaque to the store; samples_us_json
// holds the block medians in order and blocks_json the blocks as trials.blocks_json does.
constexpr char kMigration3[] = R"sql(
CREATE TABLE bench_cells (
  bench_cell_id     INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id            INTEGER NOT NULL REFERENCES runs (run_id),
  suite             TEXT    NOT NULL,
  problem_key       TEXT    NOT NULL,
  problem_json      TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  role              TEXT    NOT NULL,
  outcome           TEXT    NOT NULL CHECK (outcome IN
                      ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out')),
  message           TEXT    NOT NULL DEFAULT '',
  max_abs_error     REAL,
  max_rel_error     REAL,
  tolerance         REAL,
  samples_us_json   TEXT,
  blocks_json       TEXT,
  created_unix_ms   INTEGER NOT NULL,
  UNIQUE (run_id, problem_key, config_key, role)
);
CREATE INDEX bench_cells_by_suite_run ON bench_cells (suite, run_id);
)sql";

// Version 4: change_points, the change points found in a cell's per-commit history
// (ChangePointRow). A detection replaces all rows of its cell (device class, suite, problem,
// config); position is the index in that history of the first point at the new level.
constexpr char kMigration4[] = R"sql(
CREATE TABLE change_points (
  change_point_id   INTEGER PRIMARY KEY AUTOINCREMENT,
  device_class      TEXT    NOT NULL,
  suite             TEXT    NOT NULL,
  problem_key       TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  commit_hash       TEXT    NOT NULL,
  position          INTEGER NOT NULL CHECK (position >= 0),
  mean_before_us    REAL    NOT NULL,
  mean_after_us     REAL    NOT NULL,
  ratio             REAL    NOT NULL,
  p_value           REAL    NOT NULL CHECK (p_value >= 0 AND p_value <= 1),
  direction         TEXT    NOT NULL CHECK (direction IN ('slower', 'faster')),
  detected_unix_ms  INTEGER NOT NULL,
  UNIQUE (device_class, suite, problem_key, config_key, position)
);
CREATE INDEX change_points_by_commit ON change_points (commit_hash);
)sql";


// Version 5: the trial outcomes "interrupted" (a signal or the time budget stopped the trial)
// and "resource_exhausted" (out of host or device memory). SQLite cannot alter a CHECK, so
// trials and bench_cells are rebuilt with the new list (same columns, same order, same rows
// and ids) and their indexes made again.
constexpr char kMigration5[] = R"sql(
CREATE TABLE trials_rebuilt (
  trial_id          TEXT    PRIMARY KEY NOT NULL,
  run_id            INTEGER NOT NULL REFERENCES runs (run_id),
  problem_key       TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  attempt           INTEGER NOT NULL,
  outcome           TEXT    NOT NULL CHECK (outcome IN
                      ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out',
                       'interrupted', 'resource_exhausted')),
  message           TEXT    NOT NULL,
  samples_json      TEXT    NOT NULL,
  median_us         REAL,
  p10_us            REAL,
  p90_us            REAL,
  max_abs_error     REAL,
  max_rel_error     REAL,
  checked_elements  INTEGER NOT NULL,
  sm_clock_mhz      INTEGER NOT NULL,
  flops             REAL,
  created_unix_ms   INTEGER NOT NULL,
  stage             TEXT    NOT NULL DEFAULT 'screen'
                      CHECK (stage IN ('screen', 'halving', 'final', 'audit')),
  blocks_json       TEXT    NOT NULL DEFAULT '[]',
  wall_seconds      REAL    NOT NULL DEFAULT 0
);
INSERT INTO trials_rebuilt SELECT * FROM trials;
DROP TABLE trials;
ALTER TABLE trials_rebuilt RENAME TO trials;
CREATE INDEX trials_by_run_problem ON trials (run_id, problem_key);
CREATE INDEX trials_by_problem_created ON trials (problem_key, created_unix_ms);

CREATE TABLE bench_cells_rebuilt (
  bench_cell_id     INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id            INTEGER NOT NULL REFERENCES runs (run_id),
  suite             TEXT    NOT NULL,
  problem_key       TEXT    NOT NULL,
  problem_json      TEXT    NOT NULL,
  config_key        TEXT    NOT NULL,
  role              TEXT    NOT NULL,
  outcome           TEXT    NOT NULL CHECK (outcome IN
                      ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out',
                       'interrupted', 'resource_exhausted')),
  message           TEXT    NOT NULL DEFAULT '',
  max_abs_error     REAL,
  max_rel_error     REAL,
  tolerance         REAL,
  samples_us_json   TEXT,
  blocks_json       TEXT,
  created_unix_ms   INTEGER NOT NULL,
  UNIQUE (run_id, problem_key, config_key, role)
);
INSERT INTO bench_cells_rebuilt SELECT * FROM bench_cells;
DROP TABLE bench_cells;
ALTER TABLE bench_cells_rebuilt RENAME TO bench_cells;
CREATE INDEX bench_cells_by_suite_run ON bench_cells (suite, run_id);
)sql";

// Version 5 on PostgreSQL, which can replace a CHECK in place (the constraints are named
// <table>_<column>_check by PostgreSQL's rule for a column's CHECK).
constexpr char kMigration5Postgres[] = R"sql(
ALTER TABLE trials DROP CONSTRAINT trials_outcome_check;
ALTER TABLE trials ADD CONSTRAINT trials_outcome_check CHECK (outcome IN
  ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out', 'interrupted', 'resource_exhausted'));
ALTER TABLE bench_cells DROP CONSTRAINT bench_cells_outcome_check;
ALTER TABLE bench_cells ADD CONSTRAINT bench_cells_outcome_check CHECK (outcome IN
  ('ok', 'unsupported', 'launch_failed', 'verify_failed', 'timed_out', 'interrupted', 'resource_exhausted'));
)sql";

// Version 6: every stored commit in its canonical form (fusetune/records/commit.h), in which
// commits are compared by equality. Rows of older binaries may hold a longer or upper-case
// hash (sent by a client, given as a flag) or an abbreviation (regress stored its --baseline
// as typed): a hash becomes its canonical form, an abbreviation the one canonical hash in the
// file that starts with it. An abbreviation that no row resolves, and labels, stay as they
// are. The columns are those of version 4: this migration never changes.
constexpr CommitColumn kVersion4CommitColumns[] = {
    {"runs", "commit_hash"},          {"best_configs", "commit_hash"}, {"regressions", "commit_hash"},
    {"regressions", "baseline_commit"}, {"jobs", "commit_hash"},       {"audits", "commit_hash"},
    {"change_points", "commit_hash"}};

absl::Status CanonicalizeCommits(Connection& c) {
  std::set<std::string> stored;
  for (const CommitColumn& col : kVersion4CommitColumns) {
    absl::StatusOr<Statement> s = c.Prepare(absl::StrCat("SELECT DISTINCT ", col.column, " FROM ", col.table));
    if (!s.ok()) return s.status();
    while (true) {
      absl::StatusOr<bool> row = s->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      stored.insert(s->Text(0));
    }
  }
  std::vector<std::string> hashes;
  for (const std::string& name : stored) {
    absl::StatusOr<CommitName> parsed = ParseCommitName(name);
    if (parsed.ok() && parsed->kind == CommitNameKind::kHash) hashes.push_back(parsed->text);
  }
  for (const std::string& name : stored) {
    absl::StatusOr<std::string> canonical = ResolveCommitName(name, hashes, "the database");
    if (!canonical.ok() || *canonical == name) continue;
    for (const CommitColumn& col : kVersion4CommitColumns) {
      absl::StatusOr<Statement> s = c.Prepare(
          absl::StrCat("UPDATE ", col.table, " SET ", col.column, " = ?1 WHERE ", col.column, " = ?2"));
      if (!s.ok()) return s.status();
      s->Bind(1, *canonical).Bind(2, name);
      if (absl::Status run = s->Run(); !run.ok()) return run;
    }
  }
  return absl::OkStatus();
}

// Version 7: jobs.lease_token, the fencing token of a job's lease (JobStore::LeaseJob gives
// each lease a larger one; a holder's renewal, uploads and completion must carry the current
// one), 0 before the first lease. On PostgreSQL also trials.rowid: SQLite gives every row an
// implicit rowid in insertion order, which the trial readers order by; PostgreSQL has none,
// so the column of that name gives it (rows already stored are numbered in table order).
constexpr char kMigration7[] = R"sql(
ALTER TABLE jobs ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;
)sql";
constexpr char kMigration7Postgres[] = R"sql(
ALTER TABLE jobs ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
)sql";

// Version 8: trials.unquantised_rel_error, for problems whose K/V are stored as e4m3 the error
// of the trial's output against the fp64 reference of the K/V before quantisation (the
// max_rel_error metric); 0 for every other problem and for rows stored before.
constexpr char kMigration8[] = R"sql(
ALTER TABLE trials ADD COLUMN unquantised_rel_error REAL NOT NULL DEFAULT 0;
)sql";

}  // namespace

std::string PostgresSql(const Migration& m) {
  if (m.postgres_sql != nullptr) return m.postgres_sql;
  // SQLite's types as PostgreSQL spells them: ids the database assigns, 64-bit integers
  // (times are Unix milliseconds), doubles.
  std::string sql = std::regex_replace(m.sql, std::regex(R"(\bINTEGER PRIMARY KEY AUTOINCREMENT\b)"),
                                       "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
  sql = std::regex_replace(sql, std::regex(R"(\bINTEGER\b)"), "BIGINT");
  return std::regex_replace(sql, std::regex(R"(\bREAL\b)"), "DOUBLE PRECISION");
}

const std::vector<CommitColumn>& CommitColumns() {
  // Version 4's; a later table that names a commit is appended here.
  static const std::vector<CommitColumn>* const kColumns =
      new std::vector<CommitColumn>(std::begin(kVersion4CommitColumns), std::end(kVersion4CommitColumns));
  return *kColumns;
}

const std::vector<Migration>& Migrations() {
  // Append new migrations at the end; never edit a released one.
  static const std::vector<Migration>* const kMigrations = new std::vector<Migration>{
      {1, "runs, trials, best_configs, regressions, workers, jobs", kMigration1},
      {2, "trials.stage, trials.blocks_json, trials.wall_seconds; audits", kMigration2},
      {3, "bench_cells", kMigration3},
      {4, "change_points", kMigration4},
      {5, "trial outcomes interrupted and resource_exhausted", kMigration5, nullptr, kMigration5Postgres},
      {6, "every stored commit in canonical form", "", CanonicalizeCommits},
      {7, "jobs.lease_token; trials.rowid on PostgreSQL", kMigration7, nullptr, kMigration7Postgres},
      {8, "trials.unquantised_rel_error", kMigration8},
  };
  return *kMigrations;
}

absl::Status SchemaNewerThanBinary(std::string_view path, int version, int latest) {
  return absl::FailedPreconditionError(absl::StrCat("database ", std::string(path), " has schema version ", version,
                                                    ", newer than this binary's ", latest,
                                                    "; use the newer fusetune that wrote it"));
}

absl::Status ApplyMigrations(Connection& c, const std::vector<Migration>& migrations,
                             std::string_view path) {
  if (migrations.empty()) return absl::InternalError("no migrations");
  if (absl::Status locked = c.LockSchema(); !locked.ok()) return locked;
  absl::StatusOr<int> current = c.ReadSchemaVersion();
  if (!current.ok()) return current.status();
  const int latest = migrations.back().version;
  if (*current > latest) return SchemaNewerThanBinary(path, *current, latest);
  for (const Migration& m : migrations) {
    if (m.version <= *current) continue;
    absl::Status applied = c.Exec(c.dialect() == SqlDialect::kPostgres ? PostgresSql(m) : std::string(m.sql));
    if (applied.ok() && m.rewrite != nullptr) applied = m.rewrite(c);
    if (applied.ok()) applied = c.WriteSchemaVersion(m.version);
    if (!applied.ok()) {
      return absl::InternalError(absl::StrCat("migration ", m.version, " (", m.description,
                                              ") failed: ", applied.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fusetune::db_internal
