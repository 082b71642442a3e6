// Helpers shared by the store's tests (not part of the library).
#ifndef FUSETUNE_DB_SRC_TEST_UTIL_H_
#define FUSETUNE_DB_SRC_TEST_UTIL_H_

#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "schema.h"
#include "sqlite.h"

namespace fusetune::db_test {

// A fresh directory per test, removed afterwards.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = ::testing::TempDir() + "fusetune_db_XXXXXX";
    char* p = mkdtemp(tmpl.data());
    if (p != nullptr) path_ = p;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `path` as a binary of schema `version` created it: migrations 1..version in one write
// transaction, as Store::Open applies them. For the tests of upgrades from older files.
inline absl::Status WriteSchemaVersion(const std::string& path, int version) {
  absl::StatusOr<std::unique_ptr<db_internal::SqliteConnection>> c = db_internal::SqliteConnection::Open(path, 1000);
  if (!c.ok()) return c.status();
  const std::vector<db_internal::Migration> first(db_internal::Migrations().begin(),
                                                  db_internal::Migrations().begin() + version);
  absl::Status st = (*c)->Exec("BEGIN IMMEDIATE");
  if (st.ok()) st = db_internal::ApplyMigrations(**c, first, path);
  return st.ok() ? (*c)->Exec("COMMIT") : st;
}

// Store::Open of `path`; a failure is a test failure and returns nullptr.
inline std::unique_ptr<Store> OpenOrDie(const std::string& path, const StoreOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// A device state read by a backend that knows it.
inline DeviceState KnownState(int mhz, int mw, uint64_t throttle) {
  DeviceState d;
  d.known = true;
  d.sm_clock_mhz = mhz;
  d.power_mw = mw;
  d.throttle_reasons = throttle;
  return d;
}

inline DeviceInfo TestDevice(const std::string& name = "Test CPU") {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = name;
  d.arch = "x86_64-avx2";
  d.device_index = 0;
  d.sm_count = 2;
  d.shared_mem_per_block = 0;
  d.l2_bytes = 1 << 20;
  d.memory_bytes = int64_t{8} << 30;
  d.driver = "none";
  d.max_clock_mhz = 3000;
  return d;
}

inline RunInfo TestRun(const std::string& commit = "abc123", const std::string& label = "sweep") {
  RunInfo r;
  r.commit = commit;
  r.host = "testhost";
  r.device = TestDevice();
  r.tool_version = "0.1.0";
  r.environment = "g++ 12";
  r.label = label;
  r.started_unix_ms = 1700000000000;
  return r;
}

inline Trial TestTrial(int64_t run_id, const std::string& problem, const std::string& config,
                       int attempt = 0) {
  Trial t;
  t.trial_id = TrialId(run_id, problem, config, attempt);
  t.run_id = run_id;
  t.problem_key = problem;
  t.config_key = config;
  t.attempt = attempt;
  t.outcome = TrialOutcome::kOk;
  t.samples_us = {10.5, 11.25, 9.75};
  t.median_us = 10.5;
  t.p10_us = 9.75;
  t.p90_us = 11.25;
  t.max_abs_error = 1e-6;
  t.max_rel_error = 2e-6;
  t.checked_elements = 4096;
  t.sm_clock_mhz = 1980;
  t.flops = 1.5e9;
  t.created_unix_ms = 1700000000123;
  return t;
}

// Runs a single-value query on `path` through a separate raw connection.
inline std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_ROW) {
        const unsigned char* p = sqlite3_column_text(stmt, 0);
        out = p != nullptr ? reinterpret_cast<const char*>(p) : "";
      } else if (rc == SQLITE_DONE) {
        out = "";
      }
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close_v2(db);
  return out;
}

}  // namespace fusetune::db_test

#endif  // FUSETUNE_DB_SRC_TEST_UTIL_H_
