// The store's tests over both implementations: a value-parameterised fixture whose parameter
// is the backend, so that one test body checks SQLite and PostgreSQL alike (test support).
//
//   class StoreRuns : public db_test::StoreBackendTest {};
//   TEST_P(StoreRuns, ...) { auto store = db_test::OpenOrDie(Location()); ... }
//   FUSETUNE_STORE_BACKENDS(StoreRuns);
//
// Location() is the test's own empty database: a file in a fresh directory, or a fresh
// schema in the binary's PostgreSQL cluster (postgres_cluster.h). Where there is no
// cluster (no server binaries here), the PostgreSQL instances skip, saying why.
#ifndef FUSETUNE_DB_SRC_TESTING_STORE_BACKENDS_H_
#define FUSETUNE_DB_SRC_TESTING_STORE_BACKENDS_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "postgres_cluster.h"

namespace fusetune::db_test {

enum class StoreBackend { kSqlite, kPostgres };

inline std::string StoreBackendName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param == StoreBackend::kSqlite ? "Sqlite" : "Postgres";
}

class StoreBackendTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == StoreBackend::kPostgres) {
      absl::StatusOr<PostgresTestCluster*> cluster = PostgresTestCluster::Shared();
      if (!cluster.ok()) GTEST_SKIP() << "PostgreSQL tests skipped: " << cluster.status().message();
      cluster_ = *cluster;
    } else {
      std::string tmpl = ::testing::TempDir() + "fusetune_db_XXXXXX";
      if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
    }
    location_ = NewLocation();
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // This test's database: a file name or a postgresql:// URL.
  const std::string& Location() const { return location_; }
  // Another empty database for this test.
  std::string NewLocation() {
    if (cluster_ == nullptr) return absl::StrCat(dir_, "/store", ++files_, ".db");
    absl::StatusOr<std::string> url = cluster_->CreateDatabase();
    EXPECT_TRUE(url.ok()) << url.status();
    return url.ok() ? *url : std::string("postgresql://unavailable/");
  }
  bool IsPostgres() const { return GetParam() == StoreBackend::kPostgres; }
  // The cluster of a PostgreSQL instance (null for SQLite).
  PostgresTestCluster* cluster() const { return cluster_; }

 private:
  PostgresTestCluster* cluster_ = nullptr;
  std::string dir_;
  int files_ = 0;
  std::string location_;
};

}  // namespace fusetune::db_test

// Runs every TEST_P of `suite` (a StoreBackendTest) on SQLite and on PostgreSQL.
#define FUSETUNE_STORE_BACKENDS(suite)                                                                  \
  INSTANTIATE_TEST_SUITE_P(Backends, suite,                                                             \
                           ::testing::Values(::fusetune::db_test::StoreBackend::kSqlite,                \
                                             ::fusetune::db_test::StoreBackend::kPostgres),             \
                           ::fusetune::db_test::StoreBackendName)

#endif  // FUSETUNE_DB_SRC_TESTING_STORE_BACKENDS_H_
