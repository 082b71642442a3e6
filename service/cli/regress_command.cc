// fusetune regress: judge a candidate build against a baseline build on a bench suite, cell by
// cell, and say so in the exit status (0 clean, 1 regression, 2 error), a JUnit file, a markdown
// report, rows in the database's `regressions` table and, with --server, on a fusetune server.
// A build against itself (the same commit on both sides, nothing planted) is an A/A
// calibration: its rows give later runs' floors the cells' between-process noise, and its
// timing verdicts do not gate.
//
// Both builds are measured interleaved when the baseline's binary is at hand (--baseline-binary,
// or <builds-dir>/<commit>/bin/fusetune); otherwise the candidate is judged against the
// baseline's stored bench run with a wider floor, and every flagged cell is confirmed
// interleaved against a rebuilt baseline (--rebuild-command) before it is reported.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_records.h"
#include "bench_suite.h"
#include "builds.h"
#include "commands.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "fusetune/bench/block_source.h"
#include "fusetune/bench/compare.h"
#include "fusetune/bench/suite.h"
#include "fusetune/records/commit.h"
#include "fusetune/regress/junit.h"
#include "problem_flags.h"
#include "regress_outputs.h"

namespace fusetune::cli {
namespace {

constexpr int kExitClean = 0;
constexpr int kExitRegressed = 1;
constexpr int kExitError = 2;

int Error(const std::string& message) { return Failure("regress", message, kExitError); }

// The builds kept under --builds-dir (<dir>/<commit>/bin/fusetune): commit, canonical -> binary.
std::map<std::string, std::string> BuildsInDir(const std::string& dir) {
  std::map<std::string, std::string> builds;
  if (dir.empty()) return builds;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    absl::StatusOr<std::string> commit = CanonicalCommit(entry.path().filename().string());
    const std::filesystem::path binary = entry.path() / "bin" / "fusetune";
    if (commit.ok() && access(binary.c_str(), X_OK) == 0) builds.emplace(*commit, binary.string());
  }
  return builds;
}

// The commit of a build that reports `reported` (its own, canonical), which `flag` names as
// `named`: the build's commit when `named` is it or abbreviates it; for a build outside git,
// which reports none, `named` itself (then it cannot be an abbreviation). InvalidArgument
// otherwise, `hint` appended.
absl::StatusOr<std::string> CommitOfBuild(std::string_view flag, const std::string& named, const std::string& reported,
                                          const std::string& binary, std::string_view hint = "") {
  if (reported == kUnknownCommit) {
    return ResolveCommitFlag(flag, named, {}, fmt::format("{}, built outside git", binary));
  }
  absl::StatusOr<std::string> commit = ResolveCommitName(named, {reported}, binary);
  if (commit.ok() ? *commit != reported : absl::IsNotFound(commit.status())) {
    return absl::InvalidArgumentError(fmt::format("{} was built at commit {}, not {}{}", binary, reported, named, hint));
  }
  if (!commit.ok()) return absl::InvalidArgumentError(fmt::format("{}: {}", flag, std::string(commit.status().message())));
  return commit;
}

// Starts a build's bench-serve; the candidate side carries the planted slowdowns.
absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> StartBuild(const RegressFlags& f, const std::string& binary,
                                                                      const bench::Suite& suite, bool candidate) {
  BuildSourceOptions options;
  options.backend = f.backend;
  options.device = f.device;
  options.timing_cpu = f.timing_cpu;
  if (candidate) options.plant_slowdowns = f.plant_slowdowns;
  return StartBuild(options, binary, suite);
}

// The baseline to compare with: a stored run (when found) and the commit.
struct Baseline {
  // Canonical; with --baseline-binary, --baseline as given (an abbreviation lowercased) until
  // Measure resolves it against the commit the build reports.
  std::string commit;
  std::optional<RunInfo> run;
  std::string binary;
};

absl::StatusOr<Baseline> ResolveBaseline(const RegressFlags& f, Store* store, const bench::Suite& suite,
                                         const bench::SourceInfo& candidate) {
  const std::string device_class = candidate.device.DeviceClass();
  const std::map<std::string, std::string> builds = BuildsInDir(f.builds_dir);
  Baseline b;
  if (f.baseline == "previous") {
    if (store == nullptr) {
      return absl::NotFoundError(fmt::format("no database at {}: no previous bench run of suite {} to compare with", f.db, suite.name));
    }
    absl::StatusOr<std::vector<RunInfo>> runs = store->ListBenchRuns(suite.name, device_class, 100);
    if (!runs.ok()) return runs.status();
    for (const RunInfo& run : *runs) {
      if (run.commit != candidate.commit) {
        b.run = run;
        break;
      }
    }
    if (!b.run) {
      return absl::NotFoundError(fmt::format("{} has no bench run of suite {} on {} at a commit other than {}: "
                                             "bench one first ('fusetune bench --suite ... --db ...')",
                                             f.db, suite.name, device_class, candidate.commit));
    }
    b.commit = b.run->commit;
  } else if (!f.baseline_binary.empty()) {
    // The build reports its own commit: Measure resolves --baseline against it.
    absl::StatusOr<CommitName> named = ParseCommitName(f.baseline);
    if (!named.ok()) return absl::InvalidArgumentError(fmt::format("--baseline: {}", std::string(named.status().message())));
    b.commit = named->text;
  } else {
    // An abbreviation is resolved against the commits at hand: the database's and the kept builds'.
    absl::StatusOr<std::vector<std::string>> known = StoredCommitsAbbreviated(store, f.baseline);
    if (!known.ok()) return known.status();
    for (const auto& [commit, binary] : builds) known->push_back(commit);
    std::vector<std::string> sources;
    if (store != nullptr) sources.push_back("the database " + f.db);
    if (!f.builds_dir.empty()) sources.push_back("the builds in " + f.builds_dir);
    absl::StatusOr<std::string> commit = ResolveCommitFlag(
        "--baseline", f.baseline, *known,
        sources.empty() ? fmt::format("any database or build (none at {}, no --builds-dir)", f.db)
                        : fmt::format("{}", fmt::join(sources, " or ")));
    if (!commit.ok()) return commit.status();
    b.commit = *commit;
    const bool built = builds.count(b.commit) > 0;
    if (store != nullptr) {
      absl::StatusOr<RunInfo> run = store->FindBenchRun(suite.name, device_class, b.commit);
      if (run.ok()) {
        b.run = *run;
      } else if (!absl::IsNotFound(run.status())) {
        return run.status();
      } else if (!built) {
        absl::StatusOr<RunInfo> elsewhere = store->FindBenchRun(suite.name, "", b.commit);
        if (elsewhere.ok()) {
          return absl::FailedPreconditionError(fmt::format("the baseline {} was benched on {}, not on {}: only the same device class compares",
                                                           elsewhere->commit, elsewhere->device.DeviceClass(), device_class));
        }
        return run.status();
      }
    } else if (!built) {
      return absl::NotFoundError(fmt::format("no database at {} and no build of {}: nothing to compare with", f.db, b.commit));
    }
  }
  auto kept = builds.find(b.commit);
  b.binary = !f.baseline_binary.empty() ? f.baseline_binary : kept != builds.end() ? kept->second : "";
  return b;
}

// Adds, per "best" cell whose problem the database now answers with another pick tuned at the
// candidate commit, a "pick" cell: the new pick at the candidate against the old pick at the
// baseline (the "best" cell itself measures the old pick on both).
std::vector<std::string> AddChangedPicks(Store& store, const std::string& device_class, const std::string& candidate_commit,
                                         bench::Suite& suite) {
  std::vector<std::string> notes;
  const std::vector<bench::SuiteCell> cells = suite.cells;
  for (const bench::SuiteCell& cell : cells) {
    if (cell.role != "best" || cell.baseline_config) continue;
    absl::StatusOr<BestConfig> best = store.GetBestConfig(device_class, cell.problem.Key());
    if (!best.ok() || best->commit != candidate_commit || best->config_key == cell.config.Key()) continue;
    absl::StatusOr<KernelConfig> pick = KernelConfig::FromKey(best->config_key);
    if (!pick.ok()) continue;
    bench::SuiteCell changed = cell;
    changed.role = "pick";
    changed.config = *pick;
    changed.baseline_config = cell.config;
    suite.cells.push_back(changed);
    notes.push_back(fmt::format("{}: the re-tune at {} picks {} instead of {}", cell.problem.Key(), candidate_commit,
                                best->config_key, cell.config.Key()));
  }
  return notes;
}

// Confirms the cells a stored comparison flagged: both builds interleaved on those cells.
// Unconfirmable cells (no rebuild command, or it failed) become unknown; returns how many.
int ConfirmFlagged(const RegressFlags& f, const Baseline& baseline, const bench::Suite& suite,
                   const bench::CompareOptions& options, bench::BlockSource& candidate, bench::Comparison& comparison,
                   std::vector<std::string>* notes) {
  bench::Suite flagged = suite;
  flagged.cells.clear();
  std::vector<size_t> where;
  for (size_t i = 0; i < comparison.cells.size(); ++i) {
    if (comparison.cells[i].verdict.Failed()) {
      flagged.cells.push_back(comparison.cells[i].cell);
      where.push_back(i);
    }
  }
  if (where.empty()) return 0;
  absl::Status failure = absl::OkStatus();
  std::string binary = baseline.binary;
  if (binary.empty() && !f.rebuild_command.empty()) {
    absl::StatusOr<std::string> rebuilt = BuildCommit(f.rebuild_command, baseline.commit, "rebuilding the baseline");
    if (rebuilt.ok()) binary = *rebuilt;
    else failure = rebuilt.status();
  }
  if (binary.empty() && failure.ok()) {
    failure = absl::FailedPreconditionError("no baseline build to confirm with: give --rebuild-command, --builds-dir or --baseline-binary");
  }
  absl::StatusOr<bench::Comparison> confirmed = absl::UnknownError("");
  if (failure.ok()) {
    absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> source = StartBuild(f, binary, suite, /*candidate=*/false);
    if (source.ok()) {
      confirmed = bench::CompareInterleaved(**source, candidate, flagged, options);
    }
    failure = source.ok() ? confirmed.status() : source.status();
  }
  if (!failure.ok()) {
    for (size_t i : where) {
      regress::CellVerdict& v = comparison.cells[i].verdict;
      v.why = fmt::format("flagged against the stored baseline ({}), not confirmed: {}", v.why, std::string(failure.message()));
      v.verdict = regress::Verdict::kUnknown;
      v.accuracy.failed = v.accuracy.grew = false;
    }
    return static_cast<int>(where.size());
  }
  for (size_t k = 0; k < where.size(); ++k) {
    bench::CellComparison& cell = comparison.cells[where[k]];
    cell = confirmed->cells[k];
    cell.verdict.why = "confirmed interleaved: " + cell.verdict.why;
  }
  comparison.blocks_measured += confirmed->blocks_measured;
  comparison.measure_seconds += confirmed->measure_seconds;
  notes->push_back(fmt::format("{} cell(s) flagged against the stored baseline were measured again interleaved with "
                               "the baseline build; the verdicts shown for them are the interleaved ones",
                               where.size()));
  return 0;
}

// The A/A comparisons a cell's calibrated noise is taken over, newest first. Two processes of
// one build differ by a different amount each time (sign and size, docs/perf.md), so one
// comparison says little; ten follow the host as it changes.
constexpr size_t kCalibrationsPerCell = 10;

// Per cell, its between-process A/A noise (regress::CalibratedNoise) over the newest
// kCalibrationsPerCell A/A comparisons of this device class in the database (latency rows whose
// commit is their baseline). Empty when the database holds none.
std::map<std::string, double> KnownAANoise(Store* store, const std::string& device_class, std::string* note) {
  std::map<std::string, std::vector<double>> ratios;
  absl::StatusOr<std::vector<Regression>> rows =
      store == nullptr ? absl::StatusOr<std::vector<Regression>>(std::vector<Regression>{}) : store->ListRegressions({}, 100000);
  if (!rows.ok()) rows = std::vector<Regression>{};
  std::string commit;
  for (const Regression& r : *rows) {  // newest first
    if (r.metric != kLatencyMetric || r.commit != r.baseline_commit || r.device_class != device_class || !(r.ratio > 0)) {
      continue;
    }
    std::vector<double>& cell = ratios[r.problem_key + " " + r.config_key];
    if (cell.size() < kCalibrationsPerCell) cell.push_back(r.ratio);
    if (commit.empty()) commit = r.commit;
  }
  std::map<std::string, double> noise;
  size_t most = 0;
  for (const auto& [cell, aa] : ratios) {
    absl::StatusOr<double> calibrated = regress::CalibratedNoise(aa);
    if (!calibrated.ok()) continue;
    noise[cell] = *calibrated;
    most = std::max(most, aa.size());
  }
  *note = noise.empty()
              ? "no A/A calibration for this device class in the database: floors come from the blocks alone "
                "(regress a build against itself, --baseline C --commit C --baseline-binary B, to measure it)"
              : fmt::format("floors include the between-process A/A noise of {} cell(s), from up to {} calibration(s) "
                            "each (the newest at {})",
                            noise.size(), most, commit);
  return noise;
}

// The candidate's bench-serve, its commit checked against --commit and its device against the
// suite's.
absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> StartCandidate(const RegressFlags& f,
                                                                          const bench::Suite& suite,
                                                                          bench::SourceInfo* info) {
  const std::string binary = f.candidate_binary.empty() ? SelfBinary() : f.candidate_binary;
  absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> candidate = StartBuild(f, binary, suite, true);
  if (!candidate.ok()) return candidate.status();
  absl::StatusOr<bench::SourceInfo> described = (*candidate)->Describe();
  if (!described.ok()) return described.status();
  *info = *std::move(described);
  absl::StatusOr<std::string> commit =
      CommitOfBuild("--commit", f.commit, info->commit, binary,
                    ": build the candidate or pass its binary with --candidate-binary");
  if (!commit.ok()) return commit.status();
  info->commit = *std::move(commit);
  if (!suite.device_class.empty() && suite.device_class != info->device.DeviceClass()) {
    return absl::FailedPreconditionError(
        fmt::format("suite {} is for {}, not {}", suite.name, suite.device_class, info->device.DeviceClass()));
  }
  return candidate;
}

// The comparison's options: the floors' A/A calibration from the database, the stop signal.
bench::CompareOptions ComparisonOptions(const RegressFlags& f, Store* store, const std::string& device_class,
                                        const StopOnSignal& stop, std::vector<std::string>* notes) {
  bench::CompareOptions options;
  options.blocks = f.blocks;
  options.stored_min_floor = f.stored_floor;
  options.cancel = stop.flag();
  std::string calibration_note;
  const std::map<std::string, double> known = KnownAANoise(store, device_class, &calibration_note);
  notes->push_back(calibration_note);
  options.known_aa_noise = [known](const bench::SuiteCell& cell) {
    auto it = known.find(cell.problem.Key() + " " + cell.BaselineConfig().Key());
    return it == known.end() ? 0.0 : it->second;
  };
  return options;
}

// Both builds interleaved when the baseline's binary is at hand; else against its stored run,
// with the flagged cells confirmed (those that cannot be are counted in *unconfirmed).
absl::StatusOr<bench::Comparison> Measure(const RegressFlags& f, const Baseline& baseline, Store* store,
                                          const bench::Suite& suite, const bench::CompareOptions& options,
                                          bench::BlockSource& candidate, std::vector<std::string>* notes,
                                          int* unconfirmed) {
  if (!baseline.binary.empty()) {
    absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> base = StartBuild(f, baseline.binary, suite, false);
    if (!base.ok()) return base.status();
    absl::StatusOr<bench::SourceInfo> base_info = (*base)->Describe();
    if (!base_info.ok()) return base_info.status();
    absl::StatusOr<std::string> commit = CommitOfBuild("--baseline", baseline.commit, base_info->commit, baseline.binary);
    if (!commit.ok()) return commit.status();
    absl::StatusOr<bench::Comparison> comparison = bench::CompareInterleaved(**base, candidate, suite, options);
    if (comparison.ok()) comparison->baseline.commit = *std::move(commit);
    return comparison;
  }
  absl::StatusOr<std::vector<BenchCell>> rows = store->ListBenchCells(baseline.run->run_id);
  if (!rows.ok()) return rows.status();
  std::vector<bench::StoredCell> stored;
  for (const BenchCell& row : *rows) stored.push_back(ToStoredCell(row));
  const bench::SourceInfo base_info{baseline.commit, baseline.run->device, baseline.run->environment};
  absl::StatusOr<bench::Comparison> comparison = bench::CompareWithStored(base_info, stored, candidate, suite, options);
  if (comparison.ok()) *unconfirmed = ConfirmFlagged(f, baseline, suite, options, candidate, *comparison, notes);
  return comparison;
}

int RunRegress(const RegressFlags& f) {
  // Output paths first: a report that cannot be written must not cost a measurement or leave
  // a bench run and verdict rows behind.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--junit", f.junit},
                                   std::pair<const char*, const std::string&>{"--markdown", f.markdown}}) {
    if (absl::Status s = CheckOutputFile(flag, path); !s.ok()) return Error(std::string(s.message()));
  }
  absl::StatusOr<bench::Suite> suite = bench::ReadSuiteFile(f.suite);
  if (!suite.ok()) return Error(std::string(suite.status().message()));
  if (absl::Status s = CheckPlantedSlowdowns(*suite, f.plant_slowdowns); !s.ok()) return Error(std::string(s.message()));
  std::unique_ptr<Store> store;
  if (std::filesystem::exists(f.db)) {
    absl::StatusOr<std::unique_ptr<Store>> opened = OpenExistingStoreForWriting(f.db);
    if (!opened.ok()) return Error(std::string(opened.status().message()));
    store = *std::move(opened);
  }
  bench::SourceInfo candidate_info;
  absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> candidate = StartCandidate(f, *suite, &candidate_info);
  if (!candidate.ok()) return Error(std::string(candidate.status().message()));
  const std::string device_class = candidate_info.device.DeviceClass();
  absl::StatusOr<Baseline> baseline = ResolveBaseline(f, store.get(), *suite, candidate_info);
  if (!baseline.ok()) return Error(std::string(baseline.status().message()));
  if (baseline->commit == candidate_info.commit && baseline->binary.empty()) {
    return Error(fmt::format("the baseline and the candidate are the same commit {}; an A/A check needs --baseline-binary",
                             baseline->commit));
  }
  std::vector<std::string> notes;
  if (store != nullptr && !f.no_picks) {
    for (std::string& n : AddChangedPicks(*store, device_class, candidate_info.commit, *suite)) notes.push_back(std::move(n));
  }
  StopOnSignal stop;
  const bench::CompareOptions options = ComparisonOptions(f, store.get(), device_class, stop, &notes);
  int unconfirmed = 0;
  absl::StatusOr<bench::Comparison> comparison =
      Measure(f, *baseline, store.get(), *suite, options, **candidate, &notes, &unconfirmed);
  if (!comparison.ok()) return Error(std::string(comparison.status().message()));
  // A calibration's timing verdicts measure two processes of one build: recorded, not gating,
  // and never "regressed".
  const bool calibration = IsCalibration(f, *comparison);
  if (calibration) ReportCalibrationDifferencesAsUnknown(*comparison);
  absl::Status written = WriteRegressOutputs(f, *suite, *comparison, notes, store);
  if (!written.ok()) return Error(std::string(written.message()));
  if (calibration ? comparison->AnyAccuracyFailed() : comparison->AnyFailed()) return kExitRegressed;
  if (unconfirmed > 0) {
    return Error(fmt::format("{} cell(s) flagged against the stored baseline could not be confirmed (reported unknown)", unconfirmed));
  }
  const int unknown = comparison->CountVerdict(regress::Verdict::kUnknown);
  if (f.fail_on_unknown && !calibration && unknown > 0) {
    std::fprintf(stderr, "regress: %d cell(s) unknown and --fail-on-unknown was given (the report says why each is)\n",
                 unknown);
    return kExitRegressed;
  }
  return kExitClean;
}

}  // namespace

void AddRegressCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<RegressFlags>();
  CLI::App* regress = app.add_subcommand(
      "regress",
      "Judge a candidate build against a baseline on a bench suite: exit 0 clean (or an A/A calibration: the same "
      "commit on both sides), 1 regression (or an unknown cell with --fail-on-unknown), 2 error.");
  regress->add_option("--suite", flags->suite, "the bench suite file (suites/README.md)")->required();
  regress->add_option("--baseline", flags->baseline,
                      "the baseline commit (12 or more hex digits, or 7 or more resolved against --baseline-binary's "
                      "build, the database or --builds-dir), or 'previous': the newest bench run of the suite on this "
                      "device class at another commit")
      ->required();
  regress->add_option("--commit", flags->commit,
                      "the candidate commit: the commit the candidate binary was built at (7 or more of its hex digits)")
      ->required();
  AddDatabaseOption(regress, &flags->db, "database of bench runs and verdicts (read for stored baselines, written with the results)");
  AddBackendOptions(regress, &flags->backend, &flags->device);
  regress->add_option("--baseline-binary", flags->baseline_binary, "the baseline build's fusetune: measure both interleaved");
  regress->add_option("--candidate-binary", flags->candidate_binary, "the candidate build's fusetune (default: this one)");
  regress->add_option("--builds-dir", flags->builds_dir,
                      "builds kept by commit: <dir>/<commit>/bin/fusetune is the baseline's binary when present");
  regress->add_option("--rebuild-command", flags->rebuild_command,
                      "shell command that builds a commit ('{commit}' is replaced) and prints its fusetune binary's path "
                      "last; confirms cells flagged against a stored baseline");
  regress->add_option("--junit", flags->junit, "write a JUnit XML report here");
  regress->add_option("--markdown", flags->markdown, "write the markdown report here (it is also printed)");
  regress->add_option("--blocks", flags->blocks, "first-pass blocks per cell and side (default: the suite's)")
      ->check(CLI::Range(3, 1000));
  regress->add_option("--stored-floor", flags->stored_floor,
                      "the effect floor against a stored baseline (relative; interleaved comparisons use 1.5 % or 3x the noise)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  regress->add_flag("--no-picks", flags->no_picks, "do not add cells for best configs re-tuned at the candidate commit");
  regress->add_flag("--fail-on-unknown", flags->fail_on_unknown,
                    "exit 1 when a cell is unknown (not resolved on this host), as for a regression; an A/A "
                    "calibration never fails on it");
  AddPlantSlowdownOption(regress, &flags->plant_slowdowns);
  regress->add_option("--timing-cpu", flags->timing_cpu,
                      "the CPU both builds launch from during blocks (-1: unpinned; default: the last allowed CPU "
                      "for a GPU backend, unpinned for the CPU backend)")
      ->check(CLI::Range(-1, 4095));
  AddRegressServerOptions(regress, flags.get());
  SetAction(regress, context, [flags] { return RunRegress(*flags); });
}

}  // namespace fusetune::cli
