// The C ABI's database reads (fusetune_db_*): a read-only fusetune::Store whose rows go out as
// JSON arrays, so that a caller in any language reads the database the way `fusetune report`
// does, through the one reader of the schema (db/), without SQL of its own.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "c_api_internal.h"
#include "fusetune/c_api.h"
#include "fusetune/db/store.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"
#include "nlohmann/json.hpp"

struct fusetune_db {
  std::unique_ptr<fusetune::Store> store;
};

namespace {

using fusetune::capi::Guard;
using nlohmann::json;

// A finite number as itself; NaN and the infinities, which JSON has no numbers for, as the
// strings "nan", "inf", "-inf" (c_api.h promises exactly these).
json Number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

json Numbers(const std::vector<double>& xs) {
  json out = json::array();
  for (double x : xs) out.push_back(Number(x));
  return out;
}

json DeviceStateJson(const fusetune::DeviceState& d) {
  return {{"known", d.known}, {"sm_clock_mhz", d.sm_clock_mhz}, {"power_mw", d.power_mw},
          {"throttle_reasons", d.throttle_reasons}};
}

json TrialJson(const fusetune::Trial& t) {
  json blocks = json::array();
  for (const fusetune::SampleBlock& b : t.blocks) {
    blocks.push_back({{"samples", b.samples},
                      {"median_us", Number(b.median_us)},
                      {"before", DeviceStateJson(b.before)},
                      {"after", DeviceStateJson(b.after)},
                      {"unsteady", b.unsteady},
                      {"graphed", b.graphed}});
  }
  return {{"trial_id", t.trial_id},
          {"run_id", t.run_id},
          {"problem_key", t.problem_key},
          {"config_key", t.config_key},
          {"attempt", t.attempt},
          {"stage", std::string(fusetune::TrialStageName(t.stage))},
          {"outcome", std::string(fusetune::TrialOutcomeName(t.outcome))},
          {"message", t.message},
          {"samples_us", Numbers(t.samples_us)},
          {"blocks", std::move(blocks)},
          {"median_us", Number(t.median_us)},
          {"p10_us", Number(t.p10_us)},
          {"p90_us", Number(t.p90_us)},
          {"max_abs_error", Number(t.max_abs_error)},
          {"max_rel_error", Number(t.max_rel_error)},
          {"checked_elements", t.checked_elements},
          {"sm_clock_mhz", t.sm_clock_mhz},
          {"flops", Number(t.flops)},
          {"created_unix_ms", t.created_unix_ms},
          {"wall_seconds", Number(t.wall_seconds)}};
}

json BestConfigJson(const fusetune::BestConfig& b) {
  return {{"device_class", b.device_class},
          {"problem_key", b.problem_key},
          {"config_key", b.config_key},
          {"median_us", Number(b.median_us)},
          {"p10_us", Number(b.p10_us)},
          {"p90_us", Number(b.p90_us)},
          {"max_abs_error", Number(b.max_abs_error)},
          {"max_rel_error", Number(b.max_rel_error)},
          {"speedup_vs_materialized", Number(b.speedup_vs_materialized)},
          {"speedup_vs_partial", Number(b.speedup_vs_partial)},
          {"best_materialized_us", Number(b.best_materialized_us)},
          {"best_partial_us", Number(b.best_partial_us)},
          {"run_id", b.run_id},
          {"commit", b.commit},
          {"updated_unix_ms", b.updated_unix_ms}};
}

json RegressionJson(const fusetune::Regression& r) {
  return {{"id", r.id},
          {"commit", r.commit},
          {"baseline_commit", r.baseline_commit},
          {"device_class", r.device_class},
          {"problem_key", r.problem_key},
          {"config_key", r.config_key},
          {"metric", r.metric},
          {"ratio", Number(r.ratio)},
          {"p_value", Number(r.p_value)},
          {"verdict", r.verdict},
          {"created_unix_ms", r.created_unix_ms}};
}

json AuditJson(const fusetune::AuditSummary& a) {
  return {{"audit_id", a.audit_id},
          {"run_id", a.run_id},
          {"device_class", a.device_class},
          {"problem_key", a.problem_key},
          {"recorded_config_key", a.recorded_config_key},
          {"best_config_key", a.best_config_key},
          {"recorded_us", Number(a.recorded_us)},
          {"best_us", Number(a.best_us)},
          {"regret", Number(a.regret)},
          {"regret_low", Number(a.regret_low)},
          {"regret_high", Number(a.regret_high)},
          {"rounds", a.rounds},
          {"configs_measured", a.configs_measured},
          {"configs_failed", a.configs_failed},
          {"commit", a.commit},
          {"created_unix_ms", a.created_unix_ms}};
}

std::string_view Text(const char* s) { return s == nullptr ? std::string_view() : std::string_view(s); }

// Hands `rows` (mapped by `to_json`) to the caller as malloc'ed JSON text in *out.
template <typename Row, typename ToJson>
absl::Status WriteRows(const absl::StatusOr<std::vector<Row>>& rows, ToJson to_json, char** out) {
  if (!rows.ok()) return rows.status();
  json array = json::array();
  for (const Row& row : *rows) array.push_back(to_json(row));
  // Text from a driver or a commit message may hold invalid UTF-8: replaced, never an error.
  const std::string text = array.dump(-1, ' ', false, json::error_handler_t::replace);
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return absl::ResourceExhaustedError("out of memory for the JSON text");
  std::memcpy(copy, text.c_str(), text.size() + 1);
  *out = copy;
  return absl::OkStatus();
}

// Every read: a live database and somewhere to put the text (cleared first).
absl::Status CheckRead(const fusetune_db* db, char** out) {
  if (out == nullptr) return absl::InvalidArgumentError("json is NULL");
  *out = nullptr;
  if (db == nullptr || db->store == nullptr) return absl::InvalidArgumentError("db is NULL");
  return absl::OkStatus();
}

}  // namespace

extern "C" {

int fusetune_db_open(const char* path, fusetune_db** out, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    if (path == nullptr) return absl::InvalidArgumentError("path is NULL");
    fusetune::StoreOptions options;
    options.access = fusetune::StoreAccess::kReadOnly;
    absl::StatusOr<std::unique_ptr<fusetune::Store>> store = fusetune::Store::Open(path, options);
    if (!store.ok()) return store.status();
    *out = new fusetune_db{*std::move(store)};
    return absl::OkStatus();
  });
}

void fusetune_db_close(fusetune_db* db) {
  try {
    delete db;
  } catch (...) {
  }
}

int fusetune_db_best_configs(fusetune_db* db, const char* device_class, char** json, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckRead(db, json); !s.ok()) return s;
    return WriteRows(db->store->ListBestConfigs(Text(device_class)), BestConfigJson, json);
  });
}

int fusetune_db_trials(fusetune_db* db, int64_t run_id, const char* device_class, const char* problem_key,
                       int limit, char** json, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckRead(db, json); !s.ok()) return s;
    if (run_id < 0) return absl::InvalidArgumentError("run_id must be >= 0 (0: by problem across runs)");
    if (run_id > 0) return WriteRows(db->store->ListTrials(run_id, Text(problem_key)), TrialJson, json);
    if (Text(device_class).empty() || Text(problem_key).empty()) {
      return absl::InvalidArgumentError("trials across runs need a device_class and a problem_key (or give a run_id)");
    }
    return WriteRows(db->store->ListTrialsForProblem(Text(device_class), Text(problem_key), limit), TrialJson, json);
  });
}

int fusetune_db_regressions(fusetune_db* db, const char* commit, int limit, char** json, char* err,
                            size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckRead(db, json); !s.ok()) return s;
    return WriteRows(db->store->ListRegressions(Text(commit), limit), RegressionJson, json);
  });
}

int fusetune_db_audits(fusetune_db* db, const char* device_class, const char* problem_key, int limit, char** json,
                       char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckRead(db, json); !s.ok()) return s;
    return WriteRows(db->store->ListAudits(Text(device_class), Text(problem_key), limit), AuditJson, json);
  });
}

void fusetune_free_text(char* text) { std::free(text); }

}  // extern "C"
