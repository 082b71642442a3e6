// Store: fusetune's database of runs, trials, best configs, audits, regressions, bench cells,
// change points, workers and jobs, as an interface: the union of ResultStore
// (fusetune/db/result_store.h), JobStore (fusetune/db/job_store.h) and BenchHistoryStore
// (fusetune/db/bench_history_store.h). Callers hold a Store (or the part they need); Open()
// returns the SQLite implementation (db/src/sqlite_store.h). A second backend implements
// these three interfaces and reuses the backend-independent checks of
// db/src/store_validation.h, so that it refuses exactly what SQLite refuses (db/README.md).
//
// The SQLite Store is the only place in the project that speaks SQL: WAL mode, foreign keys
// on, busy timeout set, schema version in PRAGMA user_version with forward-only migrations
// applied by Open(). Every write method runs in one transaction: it either fully happens or
// not at all, so a process killed at any instant leaves the last committed state.
//
// Thread-safety: a Store is thread-safe (the SQLite one: one connection guarded by a mutex).
// Several processes may open the same file; SQLite's locking (WAL) serialises their writers.
#ifndef FUSETUNE_DB_STORE_H_
#define FUSETUNE_DB_STORE_H_

#include <memory>
#include <string>

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

struct StoreOptions {
  StoreAccess access = StoreAccess::kReadWrite;
  Durability durability = Durability::kPowerLoss;  // kReadWrite only
  // How long a write waits for another connection's (process's) write lock before
  // failing with Unavailable.
  int busy_timeout_ms = 10000;
};

// A Store is the RecordSink of local sweeps (`fusetune sweep`): trials, best configs and
// the trials of a resumed run all come from and go to this database.
class Store : public ResultStore, public JobStore, public BenchHistoryStore {
 public:
  // Opens the database at `path` (a file name; ":memory:" works for kReadWrite).
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

  // Schema version this binary migrates to (the SQLite schema; db/README.md).
  static int LatestSchemaVersion();
  // The schema version of the open database. An error when it cannot be read.
  virtual absl::StatusOr<int> SchemaVersion() = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_DB_STORE_H_
