// One regress run: a candidate build judged against a baseline on a bench suite. The baseline
// is a build measured interleaved with the candidate when its binary is at hand, else its
// stored bench run (every cell flagged against it confirmed interleaved against a rebuilt
// baseline). Floors take in the cells' A/A noise from earlier calibrations in the store. A
// build against itself (the same commit on both sides, nothing planted) is an A/A calibration.
// `fusetune regress` is these calls in order: StartCandidate, ResolveBaseline, AddChangedPicks,
// ComparisonOptions, Measure, IsCalibration / ReportCalibrationDifferencesAsUnknown,
// RecordRegressRun.
//
// Thread-safety: the functions keep no state; those given a Store are as safe as it is.
#ifndef FUSETUNE_REGRESS_REGRESS_RUN_H_
#define FUSETUNE_REGRESS_REGRESS_RUN_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/builds.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"

namespace fusetune::regress {

// What a regress run compares and how (the `fusetune regress` flags of the same names).
struct RegressOptions {
  std::string baseline;  // a commit (or an abbreviation), or "previous"
  std::string commit;    // the candidate's commit as named
  std::string db = "fusetune.db";  // named in messages; the Store itself is passed in
  std::string backend = "cpu";
  int device = 0;
  std::string baseline_binary;
  std::string candidate_binary;  // empty: this process's executable
  std::string builds_dir;        // <dir>/<commit>/bin/fusetune
  std::string rebuild_command;   // builds the baseline to confirm flagged cells ('{commit}')
  int blocks = 0;                // first-pass blocks (0: the suite's)
  double stored_floor = 0.03;    // the floor against a stored baseline
  std::optional<double> min_floor;  // the floor's minimum (CompareOptions::min_floor); unset: the suite's
  std::optional<double> calibrated_min_floor;  // CompareOptions::calibrated_min_floor; unset: the suite's
  std::optional<regress::Correction> correction;  // CompareOptions::correction; unset: the suite's
  std::optional<RoundOrder> round_order;          // CompareOptions::round_order; unset: the suite's
  std::optional<double> max_measure_seconds;  // CompareOptions::max_measure_seconds; unset: the suite's
  bool no_picks = false;
  std::vector<std::string> plant_slowdowns;  // the candidate side's
  int timing_cpu = kAutoTimingCpu;
  // Measure the baseline build in a bench-serve process of its own even when its C ABI library
  // could be loaded into the candidate's (StartBaseline).
  bool separate_processes = false;
  BuildAnnouncer announce_build;  // told each build command before it runs (may be empty)
};

// The builds kept under `dir` (<dir>/<commit>/bin/fusetune, executable): commit, canonical ->
// binary. Empty for an empty or unreadable `dir`.
std::map<std::string, std::string> BuildsInDir(const std::string& dir);

// The commit of a build that reports `reported` (its own, canonical), which `flag` names as
// `named`: the build's commit when `named` is it or abbreviates it; for a build outside git,
// which reports none, `named` itself (then it cannot be an abbreviation). InvalidArgument
// otherwise, `hint` appended.
absl::StatusOr<std::string> CommitOfBuild(std::string_view flag, const std::string& named, const std::string& reported,
                                          const std::string& binary, std::string_view hint = "");

// The baseline to compare with: a stored run (when found) and the commit.
struct Baseline {
  // Canonical; with baseline_binary, the baseline as given (an abbreviation lowercased) until
  // Measure resolves it against the commit the build reports.
  std::string commit;
  std::optional<RunInfo> run;
  std::string binary;  // empty: compare with `run`
};

// The baseline of `options` for `candidate` on `suite`, from `store` (may be null: no
// database) and the builds in options.builds_dir. "previous": the newest bench run of the
// suite on the candidate's device class at another commit. NotFound when there is nothing to
// compare with, FailedPrecondition when the baseline was benched on another device class only,
// InvalidArgument for a bad commit name; the store's errors.
absl::StatusOr<Baseline> ResolveBaseline(const RegressOptions& options, Store* store, const Suite& suite,
                                         const SourceInfo& candidate);

// Adds to `suite`, per "best" cell whose problem the store now answers with another pick tuned
// at `candidate_commit`, a "pick" cell: the new pick at the candidate against the old pick at
// the baseline (the "best" cell itself measures the old pick on both). Returns one note per
// added cell.
std::vector<std::string> AddChangedPicks(Store& store, const std::string& device_class,
                                         const std::string& candidate_commit, Suite& suite);

// The A/A comparisons a cell's calibrated noise is taken over, newest first. Two processes of
// one build differ by a different amount each time (sign and size, docs/perf.md), so one
// comparison says little; ten follow the host as it changes.
inline constexpr size_t kCalibrationsPerCell = 10;

// The metric of an A/A calibration row: the latency rows of a comparison whose baseline and
// candidate commits are equal (two processes of one build).
inline constexpr char kLatencyMetric[] = "latency";
// The metric of an A/A row measured in one process (Comparison::one_process): one build's
// kernels on both sides of one process, on the same inputs. What it measures is what the two
// sides of one process differ by (on the H200, up to about 1 % on cells whose kernels keep
// large scratch buffers: each side's library has its own), not between-process noise: it
// calibrates runs in one process only.
inline constexpr char kOneProcessCalibrationMetric[] = "latency_one_process_aa";

// Per cell ("PROBLEM_KEY CONFIG_KEY"), its A/A noise (CalibratedNoise) over the newest
// kCalibrationsPerCell A/A comparisons of `device_class` in the store made the same way: rows of
// `metric` (kLatencyMetric: two processes; kOneProcessCalibrationMetric: one) whose commit is
// their baseline; and a note for the report saying what the floors include.
struct KnownNoise {
  std::map<std::string, KnownCellNoise> noise;  // empty when the store holds no calibration
  std::string note;
};
KnownNoise KnownAANoise(Store* store, const std::string& device_class, std::string_view metric = kLatencyMetric);

// Per cell key, the calibration its A/A ratios (newest first) give: CalibratedNoise over the
// first kCalibrationsPerCell, and their count. Cells without a valid ratio are left out.
std::map<std::string, KnownCellNoise> CalibrationOf(const std::map<std::string, std::vector<double>>& aa_ratios);

// The A/A ratios of comparisons read back (ComparisonFromJson; newest first), per cell key
// ("PROBLEM_KEY CONFIG_KEY", as the store's calibration rows are keyed): each comparison's
// Hodges–Lehmann ratio of each cell where it is finite and > 0.
std::map<std::string, std::vector<double>> AARatiosOf(const std::vector<Comparison>& comparisons);

// The comparison options that judge: `options`' floors, and each cell's noise looked up in
// `calibration` by its problem and baseline config (a pick cell's is the old pick's).
// ComparisonOptions adds the measuring; `fusetune rejudge` judges with these alone.
CompareOptions JudgingOptions(const RegressOptions& options, std::map<std::string, KnownCellNoise> calibration);

// The comparison's options: blocks and the stored floor from `options`, `cancel` (may be null),
// and the floors' A/A calibration from `store`, of comparisons made as this one is (in one
// process or two); a note for `notes` says what the floors include.
CompareOptions ComparisonOptions(const RegressOptions& options, Store* store, const std::string& device_class,
                                 bool one_process, const std::atomic<bool>* cancel, std::vector<std::string>* notes);

// A side's bench-serve; the candidate side carries the planted slowdowns.
absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartSide(const RegressOptions& options, const std::string& binary,
                                                              const Suite& suite, bool candidate);

// The candidate's bench-serve (options.candidate_binary, else this process's executable), its
// commit checked against options.commit (InvalidArgument) and its device against the suite's
// (FailedPrecondition). `*info` is its description with the canonical commit.
absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartCandidate(const RegressOptions& options, const Suite& suite,
                                                                   SourceInfo* info);

// The C ABI library of a build: `build` itself when it is one (IsCapiLibrary), else the
// libfusetune_capi.so beside the fusetune binary `build`: <prefix>/lib/ for <prefix>/bin/fusetune
// (an installed or staged build), <dir>/kernels/capi/ for <dir>/service/cli/fusetune (a CMake
// build tree). NotFound naming where it looked.
absl::StatusOr<std::string> CapiLibraryOfBuild(const std::string& build);

// The commit a fusetune binary reports (`<binary> --version`, canonical; kUnknownCommit for a
// build outside git or a C ABI library). Unavailable when the binary does not say.
absl::StatusOr<std::string> ReportedCommit(const std::string& binary);

// The baseline build of an interleaved comparison, started, and what the candidate is measured
// through beside it.
struct BaselineBuild {
  std::unique_ptr<BlockSource> source;     // valid while the candidate's source lives
  std::string commit;                      // canonical, checked against the name given
  // One process: the candidate's own C ABI library, a side of its bench-serve like the
  // baseline's; null: the candidate's bench-serve itself.
  std::unique_ptr<BlockSource> candidate;
  bool one_process = false;
  std::string note;                        // for the report: how both are measured, and why
};

// Starts the baseline build `binary`, named `named` (a commit or abbreviation, checked against
// the commit the build reports, CommitOfBuild, when `check_commit`; else canonical and taken as
// it is, as for a rebuild that confirms stored verdicts), beside `candidate` (the candidate's bench-serve,
// `candidate_info` its checked description).
//
// One process, the default: the C ABI libraries of both builds (CapiLibraryOfBuild) are loaded
// into the candidate's bench-serve as sides, measured by its Runner on the same inputs, so that
// the builds differ in nothing but their kernels and launch code (the planted slowdowns of
// `options` go to the candidate's side). Both sides go through a library because a build's own
// backend and its library are compiled apart (the library position-independent) and can
// differ by themselves: the CPU backend's materialized variant by 4-7 %.
// Else, when options.separate_processes is set, either build has no library, the candidate
// cannot open sides or a library does not load: the baseline's own bench-serve (StartSide)
// against the candidate's, the note saying why. The errors of starting it and of the commit
// check.
absl::StatusOr<BaselineBuild> StartBaseline(const RegressOptions& options, const std::string& binary,
                                            const std::string& named, bool check_commit, const Suite& suite,
                                            ProcessBlockSource& candidate, const SourceInfo& candidate_info);

// Confirms the cells a stored comparison flagged: both builds interleaved on those cells (the
// baseline's binary, else rebuilt with options.rebuild_command; StartBaseline). Unconfirmable
// cells (no build, or it failed) become unknown with the reason; returns how many. A
// confirmation adds a note.
int ConfirmFlagged(const RegressOptions& options, const Baseline& baseline, const Suite& suite,
                   const CompareOptions& compare, ProcessBlockSource& candidate, Comparison& comparison,
                   std::vector<std::string>* notes);

// Both builds interleaved when `baseline_build` is given (StartBaseline); else the candidate
// against the baseline's stored run in `store`, with the flagged cells confirmed (those that
// cannot be are counted in *unconfirmed). The comparison's errors, the baseline build's, the
// store's.
absl::StatusOr<Comparison> Measure(const RegressOptions& options, const Baseline& baseline,
                                   BaselineBuild* baseline_build, Store* store, const Suite& suite,
                                   const CompareOptions& compare, ProcessBlockSource& candidate,
                                   std::vector<std::string>* notes, int* unconfirmed);

// Whether `comparison` is an A/A calibration: the same commit on both sides and nothing planted.
// Its verdicts measure two processes of one build: they are reported and stored (later runs'
// floors read its latency rows), and its timing verdicts do not gate.
bool IsCalibration(const RegressOptions& options, const Comparison& comparison);

// A calibration calls no cell regressed or improved: a timing difference beyond a cell's floor
// between two processes of one build is the host's between-process noise, which is what the
// calibration measures, so such a cell is reported unknown with that reason (its ratio stays,
// for later floors). Accuracy verdicts are left as they are. Returns how many cells it changed.
int ReportCalibrationDifferencesAsUnknown(Comparison& comparison);

// The rows of `comparison` for the `regressions` table: per cell a "latency" row (a pick cell:
// "latency_vs_previous_pick"; with planted slowdowns "planted_latency", so that a method check
// is never read as a calibration; an A/A comparison in one process kOneProcessCalibrationMetric) with the Hodges–Lehmann ratio and the adjusted p-value of the
// direction it leans, and a "max_rel_error" row (ratio = error growth) where accuracy was checked.
std::vector<Regression> RegressionRows(const Comparison& comparison, bool planted);

// What RecordRegressRun stored.
struct RecordedRegressRun {
  int64_t run_id = 0;  // the candidate's bench run; 0 when planted (none stored)
  std::vector<Regression> rows;
};

// Stores the candidate's measurement as a bench run described by `candidate_run` (unless
// `planted`: a method check is never a baseline or a history point) and the verdict rows
// (RegressionRows). The store's first error; what was stored before it stays.
absl::StatusOr<RecordedRegressRun> RecordRegressRun(Store& store, const Suite& suite, const Comparison& comparison,
                                                    const RunInfo& candidate_run, bool planted);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_REGRESS_RUN_H_
