#include "postgres_cluster.h"

#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"

#ifdef FUSETUNE_WITH_POSTGRES
#include <libpq-fe.h>
#endif

namespace fusetune::db_test {
namespace {

std::string ServerBinDir() {
  const char* env = std::getenv("FUSETUNE_PG_BIN");
  return env != nullptr && *env != '\0' ? env : "/usr/lib/postgresql/15/bin";
}

// argv run as the server's owner: through runuser as the postgres user when this process is
// root (initdb and postgres refuse root), else as is.
std::vector<std::string> AsServerOwner(std::vector<std::string> argv) {
  if (geteuid() != 0) return argv;
  // A full path: RunCommand does not search PATH.
  const std::string runuser = access("/usr/sbin/runuser", X_OK) == 0 ? "/usr/sbin/runuser" : "/sbin/runuser";
  std::vector<std::string> wrapped = {runuser, "-u", "postgres", "--"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

absl::Status Run(const std::vector<std::string>& argv, const std::string& what) {
  const testing::CommandResult r = testing::RunCommand(AsServerOwner(argv), 120);
  if (r.exit_code == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, " failed (exit ", r.exit_code, "): ", r.err, r.out));
}

// The cluster lives as long as the process; its destructor stops it at exit.
std::unique_ptr<PostgresTestCluster>& Instance() {
  static auto* const instance = new std::unique_ptr<PostgresTestCluster>();
  return *instance;
}

void StopAtExit() { Instance().reset(); }

}  // namespace

absl::StatusOr<PostgresTestCluster*> PostgresTestCluster::Shared() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::Status* failure = nullptr;
  absl::MutexLock lock(&mu);
  if (Instance() != nullptr) return Instance().get();
  if (failure != nullptr) return *failure;
  absl::StatusOr<PostgresTestCluster*> started = Start();
  if (!started.ok()) {
    failure = new absl::Status(started.status());
    return *failure;
  }
  return *started;
}

absl::StatusOr<PostgresTestCluster*> PostgresTestCluster::Start() {
#ifndef FUSETUNE_WITH_POSTGRES
  return absl::UnavailableError("this build has no PostgreSQL support (CMake found no libpq)");
#else
  const std::string bin = ServerBinDir();
  if (access((bin + "/initdb").c_str(), X_OK) != 0 || access((bin + "/pg_ctl").c_str(), X_OK) != 0) {
    return absl::UnavailableError(absl::StrCat("no PostgreSQL server binaries (initdb, pg_ctl) in ", bin,
                                               "; install postgresql (ci/setup-debian.sh --tests) or set "
                                               "FUSETUNE_PG_BIN"));
  }
  std::string tmpl = "/tmp/fusetune_pg_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return absl::UnavailableError("cannot create a temporary directory");
  const std::string dir = tmpl;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(dir.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      std::filesystem::remove_all(dir);
      return absl::UnavailableError("running as root, and there is no postgres user to run the server as");
    }
  }
  // From here the destructor stops what was started and removes the directory.
  std::unique_ptr<PostgresTestCluster> cluster(new PostgresTestCluster(dir));
  const std::string data = dir + "/data";
  if (absl::Status st = Run({bin + "/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                             "--no-sync", "--no-instructions"},
                            "initdb");
      !st.ok()) {
    return st;
  }
  {
    // The password role's line goes first: pg_hba.conf is read top down, and initdb's own
    // lines trust everyone.
    const std::string hba = data + "/pg_hba.conf";
    std::ifstream in(hba);
    const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    std::ofstream out(hba, std::ios::trunc);
    out << "local all " << kPasswordRole << " scram-sha-256\n" << rest;
  }
  if (absl::Status st = cluster->StartServer(); !st.ok()) return st;
  PostgresTestCluster* raw = cluster.get();
  Instance() = std::move(cluster);
  std::atexit(StopAtExit);
  if (absl::Status st = raw->RunSql("postgres", absl::StrCat("CREATE ROLE ", kPasswordRole, " LOGIN PASSWORD '",
                                                             kPasswordRolePassword, "'"));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = raw->RunSql("postgres", absl::StrCat("CREATE DATABASE ", kDatabase)); !st.ok()) return st;
  return raw;
#endif
}

absl::Status PostgresTestCluster::StartServer() {
  const std::string bin = ServerBinDir();
  return Run({bin + "/pg_ctl", "-D", dir_ + "/data", "-l", dir_ + "/server.log", "-w", "-t", "60", "-o",
              absl::StrCat("-k ", dir_, " -c listen_addresses='' -c fsync=off -c max_connections=200"), "start"},
             "pg_ctl start");
}

absl::Status PostgresTestCluster::StopServer() {
  return Run({ServerBinDir() + "/pg_ctl", "-D", dir_ + "/data", "-m", "immediate", "-w", "stop"}, "pg_ctl stop");
}

PostgresTestCluster::~PostgresTestCluster() {
  const std::string data = dir_ + "/data";
  if (std::filesystem::exists(data + "/postmaster.pid")) {
    (void)Run({ServerBinDir() + "/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"}, "pg_ctl stop");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PostgresTestCluster::Url(const std::string& database, const std::string& user,
                                     const std::string& password, const std::string& schema) const {
  return absl::StrCat("postgresql://", user, password.empty() ? "" : absl::StrCat(":", password), "@/", database,
                      "?host=", dir_, schema.empty() ? "" : absl::StrCat("&options=-csearch_path%3D", schema));
}

absl::Status PostgresTestCluster::RunSql(const std::string& database, const std::string& sql) {
#ifndef FUSETUNE_WITH_POSTGRES
  return absl::UnavailableError("no PostgreSQL support");
#else
  PGconn* conn = PQconnectdb(Url(database).c_str());
  absl::Status st;
  if (PQstatus(conn) != CONNECTION_OK) {
    st = absl::UnavailableError(absl::StrCat("cannot connect to the test cluster: ", PQerrorMessage(conn)));
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    const ExecStatusType rs = PQresultStatus(r);
    if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK) {
      st = absl::InternalError(absl::StrCat("test SQL failed: ", PQresultErrorMessage(r)));
    }
    PQclear(r);
  }
  PQfinish(conn);
  return st;
#endif
}

absl::StatusOr<std::string> PostgresTestCluster::CreateSchema() {
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    name = absl::StrCat("test_", ++schemas_);
  }
  if (absl::Status st = RunSql(kDatabase, absl::StrCat("CREATE SCHEMA ", name)); !st.ok()) return st;
  return name;
}

absl::StatusOr<std::string> PostgresTestCluster::CreateDatabase() {
  absl::StatusOr<std::string> schema = CreateSchema();
  if (!schema.ok()) return schema.status();
  return Url(kDatabase, "postgres", "", *schema);
}

}  // namespace fusetune::db_test
