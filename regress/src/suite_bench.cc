#include "fusetune/regress/suite_bench.h"

#include <utility>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace fusetune::regress {

absl::StatusOr<std::vector<PlantedSlowdown>> ParsePlantedSlowdowns(const std::vector<std::string>& specs) {
  std::vector<PlantedSlowdown> slowdowns;
  for (const std::string& spec : specs) {
    absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown(spec);
    if (!s.ok()) {
      return absl::InvalidArgumentError(fmt::format("--plant-slowdown {}: {}", spec, std::string(s.status().message())));
    }
    slowdowns.push_back(*std::move(s));
  }
  return slowdowns;
}

absl::Status CheckPlantedSlowdowns(const Suite& suite, const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown(spec);
    if (!s.ok()) {
      return absl::InvalidArgumentError(fmt::format("--plant-slowdown {}: {}", spec, std::string(s.status().message())));
    }
    std::vector<std::string> names;
    bool matched = false;
    for (const SuiteCell& cell : suite.cells) {
      const std::string name = cell.problem.Key() + " " + cell.config.Key();
      if (name.find(s->cell_substring) != std::string::npos) matched = true;
      names.push_back(name);
    }
    if (!matched) {
      return absl::InvalidArgumentError(fmt::format("--plant-slowdown {}: '{}' is in no cell of suite {}; its cells: {}",
                                                    spec, s->cell_substring, suite.name, fmt::join(names, "; ")));
    }
  }
  return absl::OkStatus();
}

std::string PlantedDescription(const std::vector<std::string>& specs) { return fmt::format("{}", fmt::join(specs, "; ")); }

bool SuiteBench::AnyCellFailed() const {
  for (const MeasuredCell& c : cells) {
    if (c.measurement.check.outcome != TrialOutcome::kOk) return true;
  }
  return false;
}

absl::StatusOr<SuiteBench> BenchSuite(Backend& backend, const std::string& commit, const Suite& suite,
                                      const SuiteBenchOptions& options) {
  RunnerBlockSource source(backend, commit, suite.block);
  CompareOptions compare;
  compare.blocks = options.blocks;
  compare.cancel = options.cancel;
  absl::StatusOr<std::vector<MeasuredCell>> cells = MeasureSuite(source, suite, compare);
  if (!cells.ok()) return cells.status();
  absl::StatusOr<SourceInfo> info = source.Describe();
  if (!info.ok()) return info.status();
  return SuiteBench{*std::move(info), *std::move(cells)};
}

absl::StatusOr<SuiteFromStore> SuiteFromDatabase(Store& store, const std::string& device_class_asked,
                                                 const std::string& name, const std::string& db) {
  absl::StatusOr<std::vector<BestConfig>> best = store.ListBestConfigs(device_class_asked);
  if (!best.ok()) return best.status();
  if (best->empty()) {
    return absl::NotFoundError(fmt::format("{} holds no best configs{}: tune first ('fusetune sweep')", db,
                                           device_class_asked.empty() ? "" : " for " + device_class_asked));
  }
  SuiteFromStore out;
  out.device_class = device_class_asked;
  for (const BestConfig& b : *best) {
    if (out.device_class.empty()) out.device_class = b.device_class;
    if (b.device_class != out.device_class) {
      return absl::InvalidArgumentError(
          fmt::format("{} holds best configs of several device classes ({}, {}): choose one with --device-class", db,
                      out.device_class, b.device_class));
    }
  }
  std::vector<SuiteSource> sources;
  for (const BestConfig& b : *best) {
    SuiteSource s;
    s.best = b;
    if (b.run_id > 0) {
      absl::StatusOr<std::vector<Trial>> trials = store.ListTrials(b.run_id, b.problem_key);
      if (trials.ok()) s.provenance_trials = *std::move(trials);
    }
    sources.push_back(std::move(s));
  }
  // The reference cells are the default config of the backend the best configs were tuned on.
  const std::string tuned_backend = out.device_class.substr(0, out.device_class.find('/'));
  absl::StatusOr<Suite> suite = SuiteFromBestConfigs(name, out.device_class, tuned_backend, sources, &out.skipped);
  if (!suite.ok()) return suite.status();
  out.suite = *std::move(suite);
  out.best_configs = best->size();
  return out;
}

}  // namespace fusetune::regress
