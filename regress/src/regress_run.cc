#include "fusetune/regress/regress_run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "fusetune/base/time.h"
#include "fusetune/records/commit.h"
#include "fusetune/regress/bench_records.h"
#include "fusetune/regress/verdict.h"

namespace fusetune::regress {

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

absl::StatusOr<std::string> CommitOfBuild(std::string_view flag, const std::string& named, const std::string& reported,
                                          const std::string& binary, std::string_view hint) {
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

absl::StatusOr<Baseline> ResolveBaseline(const RegressOptions& f, Store* store, const Suite& suite,
                                         const SourceInfo& candidate) {
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
    // The build reports its own commit: Measure resolves the baseline against it.
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

std::vector<std::string> AddChangedPicks(Store& store, const std::string& device_class,
                                         const std::string& candidate_commit, Suite& suite) {
  std::vector<std::string> notes;
  const std::vector<SuiteCell> cells = suite.cells;
  for (const SuiteCell& cell : cells) {
    if (cell.role != "best" || cell.baseline_config) continue;
    absl::StatusOr<BestConfig> best = store.GetBestConfig(device_class, cell.problem.Key());
    if (!best.ok() || best->commit != candidate_commit || best->config_key == cell.config.Key()) continue;
    absl::StatusOr<KernelConfig> pick = KernelConfig::FromKey(best->config_key);
    if (!pick.ok()) continue;
    SuiteCell changed = cell;
    changed.role = "pick";
    changed.config = *pick;
    changed.baseline_config = cell.config;
    suite.cells.push_back(changed);
    notes.push_back(fmt::format("{}: the re-tune at {} picks {} instead of {}", cell.problem.Key(), candidate_commit,
                                best->config_key, cell.config.Key()));
  }
  return notes;
}

KnownNoise KnownAANoise(Store* store, const std::string& device_class, std::string_view metric) {
  std::map<std::string, std::vector<double>> ratios;
  absl::StatusOr<std::vector<Regression>> rows =
      store == nullptr ? absl::StatusOr<std::vector<Regression>>(std::vector<Regression>{}) : store->ListRegressions({}, 100000);
  if (!rows.ok()) rows = std::vector<Regression>{};
  std::string commit;
  for (const Regression& r : *rows) {  // newest first
    if (r.metric != metric || r.commit != r.baseline_commit || r.device_class != device_class || !(r.ratio > 0)) {
      continue;
    }
    ratios[r.problem_key + " " + r.config_key].push_back(r.ratio);
    if (commit.empty()) commit = r.commit;
  }
  KnownNoise known;
  known.noise = CalibrationOf(ratios);
  size_t most = 0;
  for (const auto& [cell, noise] : known.noise) most = std::max(most, static_cast<size_t>(noise.calibrations));
  const bool one_process = metric == kOneProcessCalibrationMetric;
  const char* arrangement = one_process ? "in one process" : "in two processes";
  known.note = known.noise.empty()
                   ? fmt::format("no A/A calibration {} for this device class in the database: floors come from the "
                                 "blocks alone (regress a build against itself, --baseline C --commit C "
                                 "--baseline-binary B, to measure it)",
                                 arrangement)
                   : fmt::format("floors include the {} A/A noise of {} cell(s), from up to {} calibration(s) each "
                                 "(the newest at {})",
                                 one_process ? "one-process" : "between-process", known.noise.size(), most, commit);
  return known;
}

std::map<std::string, KnownCellNoise> CalibrationOf(const std::map<std::string, std::vector<double>>& aa_ratios) {
  std::map<std::string, KnownCellNoise> out;
  for (const auto& [cell, all] : aa_ratios) {
    const std::vector<double> newest(all.begin(),
                                     all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), kCalibrationsPerCell)));
    absl::StatusOr<double> calibrated = CalibratedNoise(newest);
    if (!calibrated.ok()) continue;
    out[cell] = KnownCellNoise{*calibrated, static_cast<int>(newest.size())};
  }
  return out;
}

std::map<std::string, std::vector<double>> AARatiosOf(const std::vector<Comparison>& comparisons) {
  std::map<std::string, std::vector<double>> ratios;
  for (const Comparison& c : comparisons) {
    for (const CellComparison& cell : c.cells) {
      const double r = cell.verdict.ratio.pairwise_ratio;
      if (std::isfinite(r) && r > 0) ratios[cell.cell.problem.Key() + " " + cell.cell.config.Key()].push_back(r);
    }
  }
  return ratios;
}

CompareOptions JudgingOptions(const RegressOptions& f, std::map<std::string, KnownCellNoise> calibration) {
  CompareOptions options;
  options.stored_min_floor = f.stored_floor;
  options.min_floor = f.min_floor;
  options.calibrated_min_floor = f.calibrated_min_floor;
  options.correction = f.correction;
  options.round_order = f.round_order;
  options.known_aa_noise = [noise = std::move(calibration)](const SuiteCell& cell) {
    auto it = noise.find(cell.problem.Key() + " " + cell.BaselineConfig().Key());
    return it == noise.end() ? KnownCellNoise{} : it->second;
  };
  return options;
}

CompareOptions ComparisonOptions(const RegressOptions& f, Store* store, const std::string& device_class,
                                 bool one_process, const std::atomic<bool>* cancel, std::vector<std::string>* notes) {
  KnownNoise known =
      KnownAANoise(store, device_class, one_process ? kOneProcessCalibrationMetric : kLatencyMetric);
  notes->push_back(known.note);
  CompareOptions options = JudgingOptions(f, std::move(known.noise));
  options.blocks = f.blocks;
  options.max_measure_seconds = f.max_measure_seconds;
  options.cancel = cancel;
  return options;
}

absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartSide(const RegressOptions& f, const std::string& binary,
                                                              const Suite& suite, bool candidate) {
  BuildSourceOptions options;
  options.backend = f.backend;
  options.device = f.device;
  options.timing_cpu = f.timing_cpu;
  if (candidate) options.plant_slowdowns = f.plant_slowdowns;
  return StartBuild(options, binary, suite);
}

absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartCandidate(const RegressOptions& f, const Suite& suite,
                                                                   SourceInfo* info) {
  const std::string binary = f.candidate_binary.empty() ? SelfBinary() : f.candidate_binary;
  absl::StatusOr<std::unique_ptr<ProcessBlockSource>> candidate = StartSide(f, binary, suite, true);
  if (!candidate.ok()) return candidate.status();
  absl::StatusOr<SourceInfo> described = (*candidate)->Describe();
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

absl::StatusOr<std::string> CapiLibraryOfBuild(const std::string& build) {
  if (IsCapiLibrary(build)) return build;
  const std::filesystem::path binary(build);
  const std::filesystem::path dir = binary.parent_path();
  const std::filesystem::path candidates[] = {dir.parent_path() / "lib" / "libfusetune_capi.so",
                                              dir.parent_path().parent_path() / "kernels" / "capi" /
                                                  "libfusetune_capi.so"};
  for (const std::filesystem::path& p : candidates) {
    if (access(p.c_str(), R_OK) == 0) return p.string();
  }
  return absl::NotFoundError(fmt::format("no libfusetune_capi.so beside {} (looked at {} and {})", build,
                                         candidates[0].string(), candidates[1].string()));
}

absl::StatusOr<std::string> ReportedCommit(const std::string& binary) {
  if (IsCapiLibrary(binary)) return std::string(kUnknownCommit);
  const ShellResult r = RunShell(ShellQuote(binary) + " --version 2>/dev/null");
  // "<version> (commit <commit>)", as main.cc's version flag prints it.
  const size_t at = r.out.rfind("(commit ");
  const size_t end = at == std::string::npos ? std::string::npos : r.out.find(')', at);
  if (r.status != 0 || end == std::string::npos) {
    return absl::UnavailableError(fmt::format("{} --version does not name its commit", binary));
  }
  absl::StatusOr<std::string> commit = CanonicalCommit(r.out.substr(at + 8, end - at - 8));
  if (!commit.ok()) return absl::UnavailableError(fmt::format("{} --version: {}", binary, std::string(commit.status().message())));
  return commit;
}

namespace {

// Both builds' libraries as sides of the candidate's bench-serve (StartBaseline's first way):
// the build, or FailedPrecondition / Unimplemented saying why not (the child serves on), or
// the child's or the commit check's error.
absl::StatusOr<BaselineBuild> OpenBothSides(const RegressOptions& f, const std::string& binary,
                                            const std::string& named, bool check_commit,
                                            ProcessBlockSource& candidate, const SourceInfo& candidate_info) {
  const std::string candidate_build = f.candidate_binary.empty() ? SelfBinary() : f.candidate_binary;
  absl::StatusOr<std::string> candidate_library = CapiLibraryOfBuild(candidate_build);
  if (!candidate_library.ok()) return absl::FailedPreconditionError(candidate_library.status().message());
  absl::StatusOr<std::string> library = CapiLibraryOfBuild(binary);
  if (!library.ok()) return absl::FailedPreconditionError(library.status().message());
  absl::StatusOr<std::string> commit = CanonicalCommit(named);
  if (check_commit) {
    absl::StatusOr<std::string> reported = ReportedCommit(binary);
    if (!reported.ok()) return absl::FailedPreconditionError(reported.status().message());
    commit = CommitOfBuild("--baseline", named, *reported, binary);
  }
  if (!commit.ok()) return commit.status();
  BaselineBuild build;
  absl::StatusOr<std::unique_ptr<BlockSource>> candidate_side =
      candidate.OpenSide(*candidate_library, candidate_info.commit, /*planted=*/!f.plant_slowdowns.empty());
  if (!candidate_side.ok()) return candidate_side.status();
  absl::StatusOr<std::unique_ptr<BlockSource>> side = candidate.OpenSide(*library, *commit);
  if (!side.ok()) return side.status();
  absl::StatusOr<SourceInfo> candidate_side_info = (*candidate_side)->Describe();
  absl::StatusOr<SourceInfo> side_info = (*side)->Describe();
  const bool both = candidate_side_info.ok() && side_info.ok();
  const bool shared_scratch = both && candidate_side_info->shared_scratch && side_info->shared_scratch;
  const bool shared_workers = both && candidate_side_info->shared_workers && side_info->shared_workers;
  build.source = *std::move(side);
  build.candidate = *std::move(candidate_side);
  build.commit = *std::move(commit);
  build.one_process = true;
  build.note = fmt::format("both builds are measured in one process on the same inputs, through their C ABI "
                           "libraries (candidate {}, baseline {}); {}{}",
                           *candidate_library, *library,
                           shared_scratch ? "their scratch at the same addresses (one arena, lent to each in turn)"
                                          : "each keeps its scratch at addresses of its own (a library without "
                                            "fusetune_use_scratch_arena, or a backend that takes no arena): where "
                                            "it lies can move some cells by 1-2 % for the whole run",
                           shared_workers ? "; their tasks on the same worker threads" : "");
  return build;
}

}  // namespace

absl::StatusOr<BaselineBuild> StartBaseline(const RegressOptions& f, const std::string& binary,
                                            const std::string& named, bool check_commit, const Suite& suite,
                                            ProcessBlockSource& candidate, const SourceInfo& candidate_info) {
  std::string why_not = "--separate-processes";
  if (!f.separate_processes) {
    absl::StatusOr<BaselineBuild> both = OpenBothSides(f, binary, named, check_commit, candidate, candidate_info);
    if (both.ok()) return both;
    // A refusal leaves the candidate's bench-serve serving; anything else is an error.
    if (!absl::IsFailedPrecondition(both.status()) && !absl::IsUnimplemented(both.status())) return both.status();
    why_not = std::string(both.status().message());
  }
  absl::StatusOr<std::unique_ptr<ProcessBlockSource>> process = StartSide(f, binary, suite, /*candidate=*/false);
  if (!process.ok()) return process.status();
  absl::StatusOr<SourceInfo> info = (*process)->Describe();
  if (!info.ok()) return info.status();
  absl::StatusOr<std::string> commit =
      check_commit ? CommitOfBuild("--baseline", named, info->commit, binary) : CanonicalCommit(named);
  if (!commit.ok()) return commit.status();
  BaselineBuild build;
  build.source = *std::move(process);
  build.commit = *std::move(commit);
  build.note = fmt::format("the baseline is measured in a bench-serve process of its own ({}): the comparison "
                           "includes the difference between two processes",
                           why_not);
  return build;
}

int ConfirmFlagged(const RegressOptions& f, const Baseline& baseline, const Suite& suite,
                   const CompareOptions& options, ProcessBlockSource& candidate, Comparison& comparison,
                   std::vector<std::string>* notes) {
  Suite flagged = suite;
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
    absl::StatusOr<std::string> rebuilt = BuildCommit(f.rebuild_command, baseline.commit, f.announce_build);
    if (rebuilt.ok()) binary = *rebuilt;
    else failure = rebuilt.status();
  }
  if (binary.empty() && failure.ok()) {
    failure = absl::FailedPreconditionError("no baseline build to confirm with: give --rebuild-command, --builds-dir or --baseline-binary");
  }
  absl::StatusOr<Comparison> confirmed = absl::UnknownError("");
  std::string arrangement;
  if (failure.ok()) {
    absl::StatusOr<SourceInfo> candidate_info = candidate.Describe();
    absl::StatusOr<BaselineBuild> source =
        candidate_info.ok() ? StartBaseline(f, binary, baseline.commit, /*check_commit=*/false, suite, candidate,
                                          *candidate_info)
                            : absl::StatusOr<BaselineBuild>(candidate_info.status());
    if (source.ok()) {
      confirmed = CompareInterleaved(*source->source, source->candidate ? *source->candidate : candidate, flagged,
                                     options);
      if (confirmed.ok()) confirmed->one_process = source->one_process;
      arrangement = source->note;
    }
    failure = source.ok() ? confirmed.status() : source.status();
  }
  if (!failure.ok()) {
    for (size_t i : where) {
      CellVerdict& v = comparison.cells[i].verdict;
      v.why = fmt::format("flagged against the stored baseline ({}), not confirmed: {}", v.why, std::string(failure.message()));
      v.verdict = Verdict::kUnknown;
      v.accuracy.failed = v.accuracy.grew = false;
    }
    return static_cast<int>(where.size());
  }
  for (size_t k = 0; k < where.size(); ++k) {
    CellComparison& cell = comparison.cells[where[k]];
    cell = confirmed->cells[k];
    cell.verdict.why = "confirmed interleaved: " + cell.verdict.why;
  }
  comparison.blocks_measured += confirmed->blocks_measured;
  comparison.measure_seconds += confirmed->measure_seconds;
  notes->push_back(fmt::format("{} cell(s) flagged against the stored baseline were measured again interleaved with "
                               "the baseline build; the verdicts shown for them are the interleaved ones ({})",
                               where.size(), arrangement));
  return 0;
}

absl::StatusOr<Comparison> Measure(const RegressOptions& f, const Baseline& baseline, BaselineBuild* baseline_build,
                                   Store* store, const Suite& suite, const CompareOptions& options,
                                   ProcessBlockSource& candidate, std::vector<std::string>* notes, int* unconfirmed) {
  if (baseline_build != nullptr) {
    notes->push_back(baseline_build->note);
    BlockSource& candidate_side = baseline_build->candidate ? *baseline_build->candidate : candidate;
    absl::StatusOr<Comparison> comparison = CompareInterleaved(*baseline_build->source, candidate_side, suite, options);
    if (comparison.ok()) {
      comparison->baseline.commit = baseline_build->commit;
      comparison->one_process = baseline_build->one_process;
    }
    return comparison;
  }
  if (store == nullptr || !baseline.run) return absl::FailedPreconditionError("no baseline build and no stored baseline run");
  absl::StatusOr<std::vector<BenchCell>> rows = store->ListBenchCells(baseline.run->run_id);
  if (!rows.ok()) return rows.status();
  std::vector<StoredCell> stored;
  for (const BenchCell& row : *rows) stored.push_back(ToStoredCell(row));
  const SourceInfo base_info{baseline.commit, baseline.run->device, baseline.run->environment};
  absl::StatusOr<Comparison> comparison = CompareWithStored(base_info, stored, candidate, suite, options);
  if (comparison.ok()) *unconfirmed = ConfirmFlagged(f, baseline, suite, options, candidate, *comparison, notes);
  return comparison;
}

bool IsCalibration(const RegressOptions& options, const Comparison& comparison) {
  return options.plant_slowdowns.empty() && comparison.candidate.commit == comparison.baseline.commit;
}

int ReportCalibrationDifferencesAsUnknown(Comparison& comparison) {
  int changed = 0;
  for (CellComparison& cell : comparison.cells) {
    CellVerdict& v = cell.verdict;
    if (v.verdict != Verdict::kRegressed && v.verdict != Verdict::kImproved) continue;
    v.why = comparison.one_process
                ? fmt::format("A/A calibration: one build, measured twice in one process on the same inputs, "
                              "differs beyond the floor: the measurement's own noise (recorded for later floors), "
                              "not a change: {}",
                              v.why)
                : fmt::format("A/A calibration: two processes of one build differ beyond the floor, which is this "
                              "host's between-process noise (recorded for later floors), not a change: {}",
                              v.why);
    v.verdict = Verdict::kUnknown;
    v.remeasure = false;
    ++changed;
  }
  return changed;
}

std::vector<Regression> RegressionRows(const Comparison& comparison, bool planted) {
  std::vector<Regression> rows;
  const int64_t now = NowUnixMs();
  for (const CellComparison& cell : comparison.cells) {
    const CellVerdict& v = cell.verdict;
    Regression r;
    r.commit = comparison.candidate.commit;
    r.baseline_commit = comparison.baseline.commit;
    r.device_class = comparison.candidate.device.DeviceClass();
    r.problem_key = cell.cell.problem.Key();
    r.config_key = cell.cell.config.Key();
    r.metric = planted                                                                   ? "planted_latency"
               : cell.cell.baseline_config                                               ? "latency_vs_previous_pick"
               : comparison.one_process && r.commit == r.baseline_commit ? kOneProcessCalibrationMetric
                                                                         : kLatencyMetric;
    r.ratio = std::isfinite(v.ratio.pairwise_ratio) ? v.ratio.pairwise_ratio : 0;
    r.p_value = r.ratio >= 1 ? v.p_slower_adjusted : v.p_faster_adjusted;
    r.verdict = VerdictName(v.verdict);
    r.created_unix_ms = now;
    rows.push_back(r);
    if (v.accuracy.checked) {
      Regression a = r;
      a.metric = "max_rel_error";
      a.ratio = std::isfinite(v.accuracy.growth) ? v.accuracy.growth : 0;
      a.p_value = 1;
      a.verdict = v.accuracy.failed || v.accuracy.grew ? "regressed" : "same";
      rows.push_back(a);
    }
  }
  return rows;
}

absl::StatusOr<RecordedRegressRun> RecordRegressRun(Store& store, const Suite& suite, const Comparison& comparison,
                                                    const RunInfo& candidate_run, bool planted) {
  RecordedRegressRun recorded;
  if (!planted) {
    std::vector<MeasuredCell> measured;
    for (const CellComparison& c : comparison.cells) measured.push_back({c.cell, c.candidate});
    absl::StatusOr<int64_t> run = StoreBenchRun(store, suite, candidate_run, measured);
    if (!run.ok()) return run.status();
    recorded.run_id = *run;
  }
  recorded.rows = RegressionRows(comparison, planted);
  if (absl::StatusOr<int> stored = store.RecordRegressions(recorded.rows); !stored.ok()) return stored.status();
  return recorded;
}

}  // namespace fusetune::regress
