// SqlStore: the Store over one SQL database connection, SQLite or PostgreSQL (sql.h): one
// implementation of every method, in SQL both dialects accept (fusetune/db/store.h says what
// each method means; db/README.md the schema, durability and errors). Store::Open() makes
// one: sqlite_open.cc over a file, postgres_open.cc over a postgresql:// URL.
//
// Its methods are split by table: sql_store.cc (transactions, schema version, runs, commits),
// sql_trials.cc, sql_results.cc (best configs, regressions, audits), sql_bench.cc (bench
// cells), sql_change_points.cc and sql_jobs.cc (workers, jobs); sql_rows.h holds what they
// share, sql.h the connection and statements.
//
// Internal to db/: nothing outside this directory includes it.
//
// Thread-safety: thread-safe; one connection guarded by one mutex (every method holds `mu_`
// while it uses `conn_`).
#ifndef FUSETUNE_DB_SRC_SQL_STORE_H_
#define FUSETUNE_DB_SRC_SQL_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/db/store.h"
#include "sql.h"
#include "sql_rows.h"
#include "status_macros.h"

namespace fusetune::db_internal {

class SqlStore final : public Store {
 public:
  // The Store over `conn`, already opened and migrated (or checked, for kReadOnly) by its
  // opener.
  static std::unique_ptr<SqlStore> Create(std::unique_ptr<Connection> conn, StoreAccess access) {
    return std::unique_ptr<SqlStore>(new SqlStore(std::move(conn), access));
  }
  // Brings the schema to LatestSchemaVersion() in one write transaction (an opener's last
  // step): see ApplyMigrations (schema.h).
  absl::Status Migrate();

  absl::StatusOr<int> SchemaVersion() override;

  // runs
  absl::StatusOr<int64_t> BeginRun(const RunInfo& info) override;
  absl::Status FinishRun(int64_t run_id) override;
  absl::StatusOr<RunInfo> GetRun(int64_t run_id) override;
  absl::StatusOr<RunInfo> FindUnfinishedRun(std::string_view commit, std::string_view device_class,
                                            std::string_view label) override;
  // commits
  absl::StatusOr<std::vector<std::string>> CommitsStartingWith(std::string_view prefix, int limit) override;
  // trials
  absl::StatusOr<int> RecordTrialsCountingNew(const std::vector<Trial>& trials) override;
  absl::StatusOr<int64_t> CountTrials(int64_t run_id) override;
  absl::StatusOr<std::vector<Trial>> ListTrials(int64_t run_id, std::string_view problem_key) override;
  absl::StatusOr<std::vector<Trial>> ListTrialsForProblem(std::string_view device_class, std::string_view problem_key,
                                                          int limit) override;
  absl::StatusOr<bool> HasTrial(std::string_view trial_id) override;
  // best configs
  absl::Status UpsertBestConfig(const BestConfig& best) override;
  absl::StatusOr<BestConfig> GetBestConfig(std::string_view device_class, std::string_view problem_key) override;
  absl::StatusOr<std::vector<BestConfig>> ListBestConfigs(std::string_view device_class) override;
  // audits
  absl::StatusOr<int64_t> RecordAudit(const AuditSummary& audit) override;
  absl::StatusOr<std::vector<AuditSummary>> ListAudits(std::string_view device_class, std::string_view problem_key,
                                                       int limit) override;
  // regressions
  absl::StatusOr<int64_t> RecordRegression(const Regression& r) override;
  absl::StatusOr<int> RecordRegressions(const std::vector<Regression>& rows) override;
  absl::StatusOr<std::vector<Regression>> ListRegressions(std::string_view commit, int limit) override;
  // bench cells
  absl::Status RecordBenchCells(int64_t run_id, const std::vector<BenchCell>& cells) override;
  absl::StatusOr<std::vector<BenchCell>> ListBenchCells(int64_t run_id) override;
  absl::StatusOr<std::vector<RunInfo>> ListBenchRuns(std::string_view suite, std::string_view device_class,
                                                     int limit) override;
  absl::StatusOr<std::vector<std::string>> ListBenchSuites() override;
  absl::StatusOr<RunInfo> FindBenchRun(std::string_view suite, std::string_view device_class,
                                       std::string_view commit) override;
  // change points
  absl::Status ReplaceChangePoints(std::string_view device_class, std::string_view suite,
                                   std::string_view problem_key, std::string_view config_key,
                                   const std::vector<ChangePointRow>& rows) override;
  absl::StatusOr<std::vector<ChangePointRow>> ListChangePoints(const ChangePointFilter& filter, int limit) override;
  // workers
  absl::Status UpsertWorker(const WorkerRecord& w) override;
  absl::Status TouchWorker(std::string_view worker_id, int64_t now_unix_ms) override;
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers() override;
  // jobs
  absl::StatusOr<int64_t> EnqueueJob(const Job& job) override;
  absl::StatusOr<Job> GetJob(int64_t job_id) override;
  absl::StatusOr<std::vector<Job>> ListJobs(std::optional<JobState> state, int limit) override;
  absl::StatusOr<Job> LeaseJob(std::string_view worker_id, std::string_view device_class, int64_t now_unix_ms,
                               int64_t lease_ms) override;
  absl::Status RenewLease(int64_t job_id, std::string_view worker_id, int64_t lease_token, int64_t now_unix_ms,
                          int64_t lease_ms) override;
  absl::Status SetJobRun(int64_t job_id, int64_t run_id) override;
  absl::Status CompleteJob(int64_t job_id, std::string_view worker_id, int64_t lease_token, bool success,
                           std::string_view error, int64_t now_unix_ms) override;
  absl::Status ReleaseJob(int64_t job_id, std::string_view worker_id, int64_t lease_token) override;
  absl::StatusOr<int> ExpireLeases(int64_t now_unix_ms) override;
  absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> CountJobsByState() override;
  absl::StatusOr<SharedStateStamp> ReadSharedStateStamp() override;

 private:
  SqlStore(std::unique_ptr<db_internal::Connection> conn, StoreAccess access)
      : access_(access), conn_(std::move(conn)) {}

  // Runs `body` inside Connection::BeginWrite() ... COMMIT (on SQLite, BEGIN IMMEDIATE takes
  // the write lock up front, waiting up to the busy timeout, so two processes never deadlock
  // by both upgrading a read transaction). Any error rolls the whole transaction back. PermissionDenied, before
  // any SQL, on a read-only Store.
  absl::Status WriteTransaction(const std::function<absl::Status(db_internal::Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A read transaction: several SELECTs see one consistent snapshot (WAL readers never
  // block writers or other readers).
  absl::Status ReadTransaction(const std::function<absl::Status(db_internal::Connection&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Runs one SELECT (`sql`, with `args` bound to ?1, ?2, ...) under the lock and reads every
  // row with `read` (ReadRows): what each List* method does, written once.
  template <typename Row, typename Reader, typename... Args>
  absl::StatusOr<std::vector<Row>> SelectRows(const std::string& sql, Reader read, const Args&... args) {
    absl::MutexLock lock(&mu_);
    FT_DB_ASSIGN_OR_RETURN(Statement s, conn_->Prepare(sql));
    s.BindAll(args...);
    return ReadRows<Row>(s, read);
  }

  const StoreAccess access_;
  absl::Mutex mu_;
  std::unique_ptr<db_internal::Connection> conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fusetune::db_internal

#endif  // FUSETUNE_DB_SRC_SQL_STORE_H_
