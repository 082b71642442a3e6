// fusetune regress: judge a candidate build against a baseline build on a bench suite, cell by
// cell, and say so in the exit status (0 clean, 1 regression, 2 error), a JUnit file, a markdown
// report, rows in the database's `regressions` table and, with --server, on a fusetune server.
// A build against itself (the same commit on both sides, nothing planted) is an A/A
// calibration: its rows give the floors of later runs made the same way (one process or two)
// the cells' A/A noise, and its timing verdicts do not gate.
//
// Both builds are measured interleaved when the baseline's binary is at hand (--baseline-binary,
// or <builds-dir>/<commit>/bin/fusetune), in one process when both builds have their C ABI
// libraries (each a side of the candidate's bench-serve, on the same inputs); otherwise the
// candidate is judged against the baseline's stored bench run with a wider floor, and every
// flagged cell is confirmed interleaved against a rebuilt baseline (--rebuild-command) before
// it is reported.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_suite.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"
#include "fusetune/regress/regress_run.h"
#include "fusetune/regress/suite_bench.h"
#include "problem_flags.h"
#include "regress_outputs.h"

namespace fusetune::cli {
namespace {

constexpr int kExitClean = 0;
constexpr int kExitRegressed = 1;
constexpr int kExitError = 2;

int Error(const std::string& message) { return Failure("regress", message, kExitError); }

int RunRegress(const RegressFlags& flags) {
  RegressFlags f = flags;
  f.announce_build = [](const std::string& line) {
    std::fprintf(stderr, "fusetune: rebuilding the baseline: %s\n", line.c_str());
  };
  // Output paths first: a report that cannot be written must not cost a measurement or leave
  // a bench run and verdict rows behind.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--junit", f.junit},
                                   std::pair<const char*, const std::string&>{"--markdown", f.markdown},
                                   std::pair<const char*, const std::string&>{"--json", f.json},
                                   std::pair<const char*, const std::string&>{"--html", f.html}}) {
    if (absl::Status s = CheckOutputFile(flag, path); !s.ok()) return Error(std::string(s.message()));
  }
  absl::StatusOr<regress::Suite> suite = regress::ReadSuiteFile(f.suite);
  if (!suite.ok()) return Error(std::string(suite.status().message()));
  if (absl::Status s = regress::CheckPlantedSlowdowns(*suite, f.plant_slowdowns); !s.ok()) return Error(std::string(s.message()));
  std::unique_ptr<Store> store;
  if (std::filesystem::exists(f.db)) {
    absl::StatusOr<std::unique_ptr<Store>> opened = OpenExistingStoreForWriting(f.db);
    if (!opened.ok()) return Error(std::string(opened.status().message()));
    store = *std::move(opened);
  }
  regress::SourceInfo candidate_info;
  absl::StatusOr<std::unique_ptr<regress::ProcessBlockSource>> candidate = regress::StartCandidate(f, *suite, &candidate_info);
  if (!candidate.ok()) return Error(std::string(candidate.status().message()));
  const std::string device_class = candidate_info.device.DeviceClass();
  absl::StatusOr<regress::Baseline> baseline = regress::ResolveBaseline(f, store.get(), *suite, candidate_info);
  if (!baseline.ok()) return Error(std::string(baseline.status().message()));
  if (baseline->commit == candidate_info.commit && baseline->binary.empty()) {
    return Error(fmt::format("the baseline and the candidate are the same commit {}; an A/A check needs --baseline-binary",
                             baseline->commit));
  }
  std::vector<std::string> notes;
  if (store != nullptr && !f.no_picks) {
    for (std::string& n : regress::AddChangedPicks(*store, device_class, candidate_info.commit, *suite)) notes.push_back(std::move(n));
  }
  // The baseline build first: whether it shares the candidate's process decides the floors.
  std::optional<regress::BaselineBuild> baseline_build;
  if (!baseline->binary.empty()) {
    absl::StatusOr<regress::BaselineBuild> started =
        regress::StartBaseline(f, baseline->binary, baseline->commit, /*check_commit=*/true, *suite, **candidate,
                               candidate_info);
    if (!started.ok()) return Error(std::string(started.status().message()));
    baseline_build = *std::move(started);
  }
  StopOnSignal stop;
  const regress::CompareOptions options = regress::ComparisonOptions(
      f, store.get(), device_class, baseline_build && baseline_build->one_process, stop.flag(), &notes);
  notes.push_back(fmt::format("p-values adjusted across the {} cells: {}", suite->cells.size(),
                              regress::CorrectionName(regress::EffectiveVerdictOptions(*suite, options).correction)));
  notes.push_back(fmt::format("each round's blocks in {} order", regress::RoundOrderName(regress::EffectiveRoundOrder(*suite, options))));
  if (const double budget = regress::EffectiveMaxMeasureSeconds(*suite, options); budget > 0) {
    notes.push_back(fmt::format("no re-measure pass starts after {:g} s of measuring", budget));
  }
  int unconfirmed = 0;
  absl::StatusOr<regress::Comparison> comparison =
      regress::Measure(f, *baseline, baseline_build ? &*baseline_build : nullptr, store.get(), *suite, options,
                       **candidate, &notes, &unconfirmed);
  if (!comparison.ok()) return Error(std::string(comparison.status().message()));
  // A calibration's timing verdicts measure one build against itself (in one process or two):
  // recorded, not gating, and never "regressed".
  const bool calibration = regress::IsCalibration(f, *comparison);
  if (calibration) regress::ReportCalibrationDifferencesAsUnknown(*comparison);
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
  regress->add_option("--json", flags->json,
                      "write the whole comparison here as JSON: per cell the verdict with its statistics and both "
                      "builds' verification and blocks (clock, power, throttle state), in measurement order");
  regress->add_option("--html", flags->html,
                      "write a self-contained HTML report here: verdicts by severity, per cell both builds' blocks as "
                      "strip plots with the ratio, its interval and the floor, why a cell is unknown, accuracy findings");
  regress->add_option("--html-history-link", flags->html_history_link,
                      "link each cell of the HTML report to its section of this history page (as `history --html` "
                      "writes it), e.g. history.html");
  regress->add_option("--blocks", flags->blocks, "first-pass blocks per cell and side (default: the suite's)")
      ->check(CLI::Range(3, 1000));
  regress->add_option("--stored-floor", flags->stored_floor,
                      "the effect floor against a stored baseline (relative; interleaved comparisons use 1.5 % or 3x the noise)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  regress->add_option("--min-floor", flags->min_floor,
                      "the smallest change (relative) an interleaved comparison calls regressed or improved (default: "
                      "the suite's min_floor, else 0.015); cells whose A/A noise is larger get 3x their noise")
      ->check(CLI::Range(0.0, 0.1));
  regress->add_option("--calibrated-min-floor", flags->calibrated_min_floor,
                      "the same for cells with at least 3 stored A/A calibrations of this device (default: the "
                      "suite's calibrated_min_floor, else --min-floor's): their own A/A spread sets the rest")
      ->check(CLI::Range(0.0, 0.1));
  AddCorrectionOption(regress, &flags->correction);
  AddRoundOrderOption(regress, &flags->round_order);
  regress->add_option("--max-measure-seconds", flags->max_measure_seconds,
                      "a time budget: no re-measure pass of undecided cells starts after this many seconds of "
                      "measuring (0: none); the first pass always completes, cells left undecided are unknown; default: the "
                      "suite's max_measure_seconds, else none")
      ->check(CLI::Range(0.0, 86400.0));
  regress->add_flag("--no-picks", flags->no_picks, "do not add cells for best configs re-tuned at the candidate commit");
  regress->add_flag("--fail-on-unknown", flags->fail_on_unknown,
                    "exit 1 when a cell is unknown (not resolved on this host), as for a regression; an A/A "
                    "calibration never fails on it");
  AddPlantSlowdownOption(regress, &flags->plant_slowdowns);
  regress->add_option("--timing-cpu", flags->timing_cpu,
                      "the CPU both builds launch from during blocks (-1: unpinned; default: the last allowed CPU "
                      "for a GPU backend, unpinned for the CPU backend)")
      ->check(CLI::Range(-1, 4095));
  regress->add_flag("--separate-processes", flags->separate_processes,
                    "measure the baseline build in a bench-serve process of its own even when its C ABI library "
                    "(beside its binary: ../lib/ or, in a build tree, kernels/capi/) can be loaded into the "
                    "candidate's; two processes of one build differ by up to 2 % on some cells");
  AddRegressServerOptions(regress, flags.get());
  SetAction(regress, context, [flags] { return RunRegress(*flags); });
}

}  // namespace fusetune::cli
