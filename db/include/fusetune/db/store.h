// Store: fusetune's database of runs, trials, best configs, audits, regressions, bench cells,
// change points, workers and jobs, as an interface: the union of ResultStore
// (fusetune/db/result_store.h), JobStore (fusetune/db/job_store.h) and BenchHistoryStore
// (fusetune/db/bench_history_store.h). Callers hold a Store (or the part they need); Open()
// returns the implementation for its argument: an SQLite file, or a PostgreSQL database named
// by a postgresql:// URL. Both are one implementation over an SQL connection
// (db/src/sql_store.h), with the backend-independent checks of db/src/store_validation.h, so
// that both refuse exactly the same input (db/README.md).
//
// The Store is the only place in the project that speaks SQL. SQLite: WAL mode, foreign keys
// on, busy timeout set, schema version in PRAGMA user_version. PostgreSQL: the version in
// the table fusetune_schema, lock waits bounded by the busy timeout. Both apply the
// forward-only migrations in Open(). Every write method runs in one transaction: it either
// fully happens or not at all, so a process killed at any instant leaves the last committed
// state.
//
// Thread-safety: a Store is thread-safe (one connection guarded by a mutex). Several
// processes may open the same database; SQLite's locking (WAL) or PostgreSQL's row locks
// serialise their writers.
#ifndef FUSETUNE_DB_STORE_H_
#define FUSETUNE_DB_STORE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/bench_history_store.h"
#include "fusetune/db/job_store.h"
#include "fusetune/db/result_store.h"
#include "fusetune/records/bench_cell.h"
#include "fusetune/records/change_point.h"
#include "fusetune/records/job.h"
#include "fusetune/records/regression.h"
#include "fusetune/records/run.h"
#include "fusetune/records/sink.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/worker.h"

namespace fusetune {

// How a committed write survives failures (see db/README.md).
enum class Durability {
  // synchronous=FULL: each commit fsyncs the WAL, so a committed write survives a process
  // kill AND a power loss / OS crash. The default: the service acknowledges uploads that
  // workers then drop from their spools.
  kPowerLoss,
  // synchronous=NORMAL: a committed write is in the WAL file (the OS page cache) before the
  // commit returns, so it survives SIGKILL of the process; a power loss may roll back the
  // last commits (never corrupts). Faster; fine for throwaway local sweeps.
  kProcessCrash,
};

// What a Store may do to its file (see db/README.md, "Reading a shared database").
enum class StoreAccess {
  // Creates the file if absent, switches it to WAL and applies missing migrations. Needs
  // write access to the file and to its directory (SQLite keeps <db>-wal and <db>-shm there).
  kReadWrite,
  // For commands that only read (report, best): never creates, migrates or changes the file,
  // and works where this process cannot write, e.g. a read-only mount or another user's
  // directory. Write methods fail with PermissionDenied.
  kReadOnly,
};

// Whether `location` (a --db argument) names a PostgreSQL database: it starts with
// postgresql:// or postgres:// (any case). Anything else is an SQLite file name.
bool IsPostgresUrl(std::string_view location);
// `location` as messages and logs may show it: a PostgreSQL URL's password (user:PASSWORD@
// or a password= parameter) replaced by ***; a file name unchanged.
std::string RedactDatabaseUrl(std::string_view location);

struct StoreOptions {
  StoreAccess access = StoreAccess::kReadWrite;
  Durability durability = Durability::kPowerLoss;  // kReadWrite only
  // How long a write waits for another connection's (process's) write lock before
  // failing with Unavailable.
  int busy_timeout_ms = 10000;
};

// A Store is the RecordSink of local sweeps (`fusetune sweep`): trials, best configs and
// the trials of a resumed run all come from and go to this database.
// What the service replicas sharing one database keep in memory or wait on, summed up so
// that a poll can tell that another replica changed it (service/server/README.md, "Several
// replicas"): two stamps that differ mean something changed. Equal stamps mean, for the best
// configs, that no row was added, removed or rewritten with another update time; for the
// queue, that no job was submitted, leased, released, expired or finished (each of those
// changes one of the three job sums). Cheap: two aggregate reads, no row is returned.
struct SharedStateStamp {
  int64_t best_configs = 0;          // rows of best_configs
  int64_t best_configs_updated = 0;  // the sum of their updated_unix_ms
  int64_t newest_open_job = 0;       // the largest job_id of a queued or leased job
  int64_t queued_jobs = 0;
  int64_t open_lease_tokens = 0;     // the sum of lease_token over queued and leased jobs

  bool SameBestConfigs(const SharedStateStamp& o) const {
    return best_configs == o.best_configs && best_configs_updated == o.best_configs_updated;
  }
  bool SameQueue(const SharedStateStamp& o) const {
    return newest_open_job == o.newest_open_job && queued_jobs == o.queued_jobs &&
           open_lease_tokens == o.open_lease_tokens;
  }
};

class Store : public ResultStore, public JobStore, public BenchHistoryStore {
 public:
  // Opens the database at `path`: a file name (":memory:" works for kReadWrite), or a
  // postgresql:// URL (IsPostgresUrl; libpq's URL form, PGPASSFILE and PGSSLMODE honoured).
  //
  // PostgreSQL: Unavailable when the server cannot be reached, PermissionDenied when it
  // refuses the login (the message never holds the password), NotFound when the database
  // does not exist; Unimplemented when this build has no PostgreSQL support. kReadWrite
  // creates the tables in an empty database and migrates an older schema; kReadOnly refuses
  // a database without this binary's exact schema, as for a file. The rest of this comment
  // is about files.
  //
  // kReadWrite: creates the file if absent and migrates it to LatestSchemaVersion().
  // kReadOnly: NotFound ("no database at PATH") when the file does not exist; reads through
  // a WAL that another process is writing. Where SQLite cannot create <db>-shm (the directory
  // is read-only for this process) and no <db>-wal content is pending, the file is opened
  // immutable (SQLite then takes no locks; a writer must not start while this Store is open).
  // FailedPrecondition when pending <db>-wal content cannot be read without write access
  // (the message says how to fold it into the file), or when the schema is not this
  // binary's: older (a writing open upgrades it) or absent (not a fusetune database).
  //
  // Both: InvalidArgument for an empty path; FailedPrecondition if the schema is newer than
  // this binary knows (nothing is changed); DataLoss for a file that is not an SQLite
  // database or is damaged; other SQLite failures as mapped in db/README.md. Every message
  // names the file and says what to do.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     const StoreOptions& options);
  ~Store() override = default;

  // Schema version this binary migrates to, the same for SQLite and PostgreSQL (db/README.md).
  static int LatestSchemaVersion();
  // The schema version of the open database. An error when it cannot be read.
  virtual absl::StatusOr<int> SchemaVersion() = 0;
  // The stamp of what replicas share (SharedStateStamp); the database's error when it
  // cannot be read (e.g. Unavailable while PostgreSQL is away).
  virtual absl::StatusOr<SharedStateStamp> ReadSharedStateStamp() = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_STORE_H_
