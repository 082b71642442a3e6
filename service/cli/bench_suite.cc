#include "bench_suite.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/bench_records.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/planted_slowdown.h"
#include "fusetune/regress/suite_bench.h"
#include "fusetune/regress/suite.h"
#include "fusetune/kernels/default_config.h"
#include "fusetune/tuner/runner.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

constexpr int kExitCellFailed = 1;
constexpr int kExitError = 2;

int Error(const std::string& command, const std::string& message) { return Failure(command, message, kExitError); }

// Block medians' spread: (p90 - p10) / median, percent.
double SpreadPercent(const regress::CellMeasurement& m) {
  if (m.blocks.size() < 2) return 0;
  const std::vector<double> medians = m.Medians();
  const double median = Quantile(medians, 0.5);
  return median > 0 ? 100 * (Quantile(medians, 0.9) - Quantile(medians, 0.1)) / median : 0;
}

void PrintTable(const regress::SourceInfo& source, const std::vector<regress::MeasuredCell>& cells) {
  std::printf("device %s, commit %s\n\n", source.device.DeviceClass().c_str(), source.commit.c_str());
  std::printf("| role | problem | config | outcome | median us | spread p10-p90 | TFLOP/s | max rel error | blocks |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const regress::MeasuredCell& c : cells) {
    const double median = regress::MedianOfBlocks(c.measurement);
    const double tflops = median > 0 ? c.cell.problem.Flops() / (median * 1e-6) / 1e12 : 0;
    const bool ok = c.measurement.check.outcome == TrialOutcome::kOk;
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %.1e | %zu |\n", c.cell.role.c_str(),
                c.cell.problem.Key().c_str(), c.cell.config.Key().c_str(),
                ok ? "ok" : fmt::format("{}: {}", TrialOutcomeName(c.measurement.check.outcome), c.measurement.check.message).c_str(),
                ok ? fmt::format("{:.2f}", median).c_str() : "-", ok ? fmt::format("{:.2f} %", SpreadPercent(c.measurement)).c_str() : "-",
                ok ? fmt::format("{:.4g}", tflops).c_str() : "-", c.measurement.check.max_rel_error, c.measurement.blocks.size());
  }
}

void PrintJson(const regress::SourceInfo& source, const std::vector<regress::MeasuredCell>& cells, int64_t run_id,
               const std::string& planted) {
  nlohmann::json rows = nlohmann::json::array();
  for (const regress::MeasuredCell& c : cells) {
    rows.push_back({{"role", c.cell.role},
                    {"problem", c.cell.problem.Key()},
                    {"config", c.cell.config.Key()},
                    {"outcome", std::string(TrialOutcomeName(c.measurement.check.outcome))},
                    {"message", c.measurement.check.message},
                    {"median_us", regress::MedianOfBlocks(c.measurement)},
                    {"block_medians_us", c.measurement.Medians()},
                    {"max_rel_error", c.measurement.check.max_rel_error},
                    {"tolerance", c.measurement.check.tolerance}});
  }
  nlohmann::json out = {{"commit", source.commit}, {"device_class", source.device.DeviceClass()},
                        {"run_id", run_id}, {"cells", rows}};
  if (!planted.empty()) out["planted_slowdowns"] = planted;
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

RunInfo BenchRunInfo(const regress::Suite& suite, const regress::SourceInfo& source) {
  RunInfo info = LocalRunInfo(source.device, source.commit, suite.RunLabel());
  if (!source.environment.empty()) info.environment += "; " + source.environment;
  return info;
}

void AddPlantSlowdownOption(CLI::App* command, std::vector<std::string>* specs) {
  command->add_option("--plant-slowdown", *specs,
                      "SUBSTRING=FRACTION: report cells whose '<problem key> <config key>' contains SUBSTRING "
                      "slower by FRACTION (e.g. 0.03 or 3%), to measure what the regression method detects "
                      "(repeatable)");
}

std::unique_ptr<Backend> CreateMeasuredBackend(const std::string& command, const std::string& backend, int device,
                                               const std::vector<std::string>& plant_slowdowns, int* exit_code) {
  absl::StatusOr<std::vector<regress::PlantedSlowdown>> slowdowns = regress::ParsePlantedSlowdowns(plant_slowdowns);
  if (!slowdowns.ok()) {
    *exit_code = Error(command, std::string(slowdowns.status().message()));
    return nullptr;
  }
  int create_exit = kExitOk;
  std::unique_ptr<Backend> inner = CreateLocalBackend(command, backend, device, &create_exit);
  if (inner == nullptr) {
    *exit_code = kExitError;
    return nullptr;
  }
  if (slowdowns->empty()) return inner;
  return std::make_unique<regress::PlantedSlowdownBackend>(std::move(inner), *std::move(slowdowns));
}

int RunSuiteBench(const SuiteBenchFlags& f, const std::string& backend_name, int device) {
  const std::string cmd = "bench";
  absl::StatusOr<regress::Suite> suite = regress::ReadSuiteFile(f.suite);
  if (!suite.ok()) return Error(cmd, std::string(suite.status().message()));
  if (f.blocks != 0 && f.blocks < 3) return Error(cmd, "--blocks must be at least 3");
  if (absl::Status s = regress::CheckPlantedSlowdowns(*suite, f.plant_slowdowns); !s.ok()) return Error(cmd, std::string(s.message()));
  const std::string planted = regress::PlantedDescription(f.plant_slowdowns);
  // An existing database is opened before measuring, so that a bad one fails at once; a new
  // one is created only when there is a measurement to store.
  std::unique_ptr<Store> store;
  auto open_store = [&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(f.db);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    return absl::OkStatus();
  };
  if (!f.db.empty() && std::filesystem::exists(f.db)) {
    if (absl::Status s = open_store(); !s.ok()) return Error(cmd, std::string(s.message()));
  }
  int exit_code = kExitOk;
  std::unique_ptr<Backend> backend = CreateMeasuredBackend(cmd, backend_name, device, f.plant_slowdowns, &exit_code);
  if (backend == nullptr) return exit_code;
  StopOnSignal stop;
  absl::StatusOr<regress::SuiteBench> bench =
      regress::BenchSuite(*backend, BuiltCommit(), *suite, {.blocks = f.blocks, .cancel = stop.flag()});
  if (!bench.ok()) return Error(cmd, std::string(bench.status().message()));
  const regress::SourceInfo& info = bench->source;
  const std::vector<regress::MeasuredCell>& cells = bench->cells;
  int64_t run_id = 0;
  if (!f.db.empty() && planted.empty()) {
    if (store == nullptr) {
      if (absl::Status s = open_store(); !s.ok()) return Error(cmd, std::string(s.message()));
    }
    absl::StatusOr<int64_t> stored = regress::StoreBenchRun(*store, *suite, BenchRunInfo(*suite, info), cells);
    if (!stored.ok()) return Error(cmd, std::string(stored.status().message()));
    run_id = *stored;
  }
  if (f.json) {
    PrintJson(info, cells, run_id, planted);
  } else {
    if (!planted.empty()) std::printf("planted slowdowns (a check of the method, not a measurement): %s\n", planted.c_str());
    PrintTable(info, cells);
    if (run_id > 0) std::printf("\nstored as bench run %lld of suite %s in %s\n", static_cast<long long>(run_id), suite->name.c_str(), RedactDatabaseUrl(f.db).c_str());
    if (!planted.empty() && !f.db.empty()) {
      std::printf("\nnot stored in %s: a run with planted slowdowns is never a baseline or a history point\n", RedactDatabaseUrl(f.db).c_str());
    }
  }
  return bench->AnyCellFailed() ? kExitCellFailed : kExitOk;
}

int WriteSuiteFromDatabase(const SuiteFromDbFlags& f) {
  const std::string cmd = "bench";
  if (f.out.empty()) return Error(cmd, "--from-db needs --suite-out FILE");
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(f.db);
  if (!store.ok()) return Error(cmd, std::string(store.status().message()));
  const std::string name = f.name.empty() ? std::filesystem::path(f.out).stem().string() : f.name;
  absl::StatusOr<regress::SuiteFromStore> written = regress::SuiteFromDatabase(**store, f.device_class, name, RedactDatabaseUrl(f.db));
  if (!written.ok()) return Error(cmd, std::string(written.status().message()));
  const regress::Suite& suite = written->suite;
  const std::string text = regress::SuiteToJson(suite);
  const std::string tmp = f.out + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) return Error(cmd, fmt::format("cannot write {}", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, f.out, ec);
  if (ec) return Error(cmd, fmt::format("cannot write {}: {}", f.out, ec.message()));
  std::printf("wrote suite %s (%zu cells from %zu best configs of %s) to %s\n", suite.name.c_str(), suite.cells.size(),
              written->best_configs, written->device_class.c_str(), f.out.c_str());
  for (const std::string& s : written->skipped) std::printf("  skipped %s\n", s.c_str());
  return kExitOk;
}

}  // namespace fusetune::cli
