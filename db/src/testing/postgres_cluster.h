// A throw-away PostgreSQL server for the store's tests (test support, not part of the
// library): one cluster per test binary, a fresh database per test.
//
// The cluster is made with Debian's server binaries (/usr/lib/postgresql/15/bin, or the
// folder $FUSETUNE_PG_BIN names): initdb into a temporary directory, then pg_ctl start with
// the Unix socket in that directory and no TCP (listen_addresses=''), fsync off (a test
// database need not survive a power loss). initdb refuses to run as root, and CI runs as
// root: then every server command runs as the `postgres` user (runuser), which owns the
// directory. Logins are trusted, except the role kPasswordRole, which must give
// kPasswordRolePassword (for the tests of a refused login). The cluster is stopped and its
// directory removed when the test binary exits.
//
// Each test gets its own schema (namespace) in one shared database, named by the URL's
// search_path: creating a schema takes well under a millisecond where CREATE DATABASE takes a
// few hundred, and a store's tables, sequences and version table all live in the first schema
// of the search_path.
//
// Thread-safety: Shared() and CreateDatabase() may be called from any thread.
#ifndef FUSETUNE_DB_SRC_TESTING_POSTGRES_CLUSTER_H_
#define FUSETUNE_DB_SRC_TESTING_POSTGRES_CLUSTER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fusetune::db_test {

class PostgresTestCluster {
 public:
  // A role that logs in with a password (scram-sha-256) only.
  static constexpr char kPasswordRole[] = "fusetune_pw";
  static constexpr char kPasswordRolePassword[] = "s3cret-Pa55";

  // The binary's cluster, started on the first call. Unavailable, saying why (no server
  // binaries, no postgres user, this build without PostgreSQL support, the server would not
  // start), when there is none: the PostgreSQL tests skip with that reason.
  static absl::StatusOr<PostgresTestCluster*> Shared();

  // The database every test's schema is made in.
  static constexpr char kDatabase[] = "fusetune_test";

  // Creates an empty schema in kDatabase and returns its name.
  absl::StatusOr<std::string> CreateSchema();
  // Creates an empty schema and returns the URL of a store in it
  // (postgresql://postgres@/fusetune_test?host=SOCKET_DIR&options=-csearch_path%3DSCHEMA).
  absl::StatusOr<std::string> CreateDatabase();
  // Runs `sql` as the superuser in database `database` (role and grant set-up for tests).
  absl::Status RunSql(const std::string& database, const std::string& sql);
  // The URL of `database` logged in as `user`, with `password` in the URL when not empty,
  // and its search_path `schema` when not empty.
  std::string Url(const std::string& database, const std::string& user = "postgres",
                  const std::string& password = "", const std::string& schema = "") const;
  // Stops the server as a crash would (pg_ctl stop -m immediate: every connection cut, no
  // checkpoint), for tests of a database that goes away mid-run.
  absl::Status StopServer();
  // Starts the stopped server again on the same socket, with the same settings.
  absl::Status StartServer();

  // The socket directory: a URL's host.
  const std::string& socket_dir() const { return dir_; }

  ~PostgresTestCluster();  // pg_ctl stop, then the directory removed

 private:
  explicit PostgresTestCluster(std::string dir) : dir_(std::move(dir)) {}
  static absl::StatusOr<PostgresTestCluster*> Start();

  const std::string dir_;  // holds data/, the socket and server.log
  absl::Mutex mu_;
  int schemas_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fusetune::db_test

#endif  // FUSETUNE_DB_SRC_TESTING_POSTGRES_CLUSTER_H_
