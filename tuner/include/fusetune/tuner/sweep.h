// Sweep: tunes a list of problems on one backend and reports every trial to a sink.
//
// For each problem (its inputs and fp64 references made once by the Runner and shared by
// every config):
//   1. Search, per variant, over that variant's ConfigSpace (what the backend can run,
//      filtered by the options). kAuto is exhaustive for spaces of at most
//      kExhaustiveSpaceLimit configs and successive halving above; an exhaustive screen
//      whose first trial shows that the budget cannot cover the space becomes halving.
//      - exhaustive / random: each proposed config is screened (verified on both input
//        sets, timed in one block of RunnerOptions::timing) until the searcher runs out
//        or the StopCondition is reached;
//      - halving: the same with a quarter of the samples per block (at least 2).
//      Then, whatever the strategy, halving rungs: while more than
//      FinalRoundOptions::max_candidates configs verified, the better half is re-measured
//      in interleaved rounds (2, 4, 8, ... rounds, stage kHalving, the screen's block
//      size). A screen measures one config after another, so a spell of interference
//      skews a stretch of it; the rungs share such spells out evenly.
//   2. Final rounds: the fused leaders (within near_fraction of the fastest, between
//      min_candidates and max_candidates) and the best baseline_candidates of each
//      baseline variant are measured together in FinalRoundOptions::rounds interleaved
//      rounds (Runner::MeasureRounds: a fresh random order each round, one block each,
//      same inputs and L2 state; stage kFinal).
//   3. SelectBest picks the problem's BestConfig from the per-round ratios (selection.h),
//      unless SweepOptions::select_best is false.
// Every record goes through the RecordSink (records/sink.h): each trial before the next
// measurement starts (a set of rounds when all its rounds are done), and each problem's
// best config once it is selected, before the problem's progress is reported.
//
// Resume: at its start the sweep reads the run's recorded trials from the sink
// (RecordSink::RecordedTrials). Before measuring, it looks the trial id (run, problem,
// config, attempt, stage) up among them; a recorded trial is not measured again but counts
// toward the budget and takes part in selection, exactly as if it had just run. A set of
// rounds is reused only when every trial of it is recorded (its rounds pair up by index);
// one recorded in part is measured again under the next attempt number. Because searchers
// and round orders are deterministic, a sweep killed midway and started again with the same
// run id, problems and options continues where it stopped. Which run to resume is the
// caller's choice (run identity), not the sweep's.
//
// Budgets: max_trials_per_variant caps screen trials (measured + resumed) per (problem,
// variant); max_seconds_per_problem caps the time per problem, counted from when its
// inputs and fp64 references are ready (preparing them is not measuring): the search gets three
// quarters of it, shared by its variants (each gets the time left divided by the variants
// left, so an early finisher donates), the final rounds the rest (they stop after at least
// 3 rounds once it is spent). Within that, each baseline variant's search (screen and
// halving rungs) is capped by baseline_time_ratio x the fused search's time, and the final
// rounds by FinalRoundOptions::time_ratio x the whole search's time. The budget holds inside
// trials too: the runner's stop token (kernels/stop_token.h) carries the problem's deadline,
// so a trial still running when the budget is spent is stopped (within a launch; on the CPU
// backend, a tile), recorded as kInterrupted, and the problem's search ends there without
// final rounds (SweepProgress::incomplete says so; the pick, if any, is of what was
// measured). The final rounds may run past the budget to their 3-round minimum, never past
// twice the budget.
//
// Cancellation: `*cancel` is read between trials and blocks, and through the stop token
// inside them; once true the sweep returns the problems finished so far with cancelled =
// true. The trial in flight stops within a launch (a tile on the CPU) and is recorded as
// kInterrupted; rounds cut short are not recorded. A resumed sweep measures an interrupted
// screen again under the next attempt number.
//
// This API takes no Store: the `fusetune sweep` command passes its SQLite store as the
// sink, the worker daemon its spool-backed sink (whose trials reach the server through the
// uploader, and which leaves best configs to the server's selection at job completion).
//
// Thread-safety: RunSweep drives one Backend; do not share that backend meanwhile.
#ifndef FUSETUNE_TUNER_SWEEP_H_
#define FUSETUNE_TUNER_SWEEP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/tuner/config_space.h"
#include "fusetune/tuner/runner.h"
#include "fusetune/tuner/searcher.h"
#include "fusetune/records/trial.h"
#include "fusetune/records/run.h"
#include "fusetune/records/sink.h"

namespace fusetune {

// The interleaved final rounds after the search (see the top of this file).
struct FinalRoundOptions {
  int rounds = 9;                 // 0 = no final rounds (the pick is the screen's)
  double near_fraction = 0.05;    // fused contenders: within this of the leader (screen p10,
                                  //   or median of a halving rung's rounds)
  int min_candidates = 3;         // fused contenders at least (when that many verified)
  int max_candidates = 6;         // fused contenders at most
  int baseline_candidates = 1;    // contenders of each baseline variant (partial, materialized)
  // A baseline contender slower than this many times the fused leader is left out of the
  // rounds (they would take its time and decide nothing; its speedup is then the ratio of
  // its own and the fused pick's medians).
  double max_baseline_ratio = 3.0;
  // The rounds stop, after at least 3, once they took this many times the problem's
  // search time (at least min_seconds): slow baselines must not make the rounds cost more
  // than the search they refine. 0 = no such cap.
  double time_ratio = 0.5;
  double min_seconds = 1.0;
};

// What the sweep is doing now, sent before each trial and each set of rounds starts (and
// when a problem's inputs are being prepared), for a progress line while a problem runs.
struct SweepActivity {
  int problem_index = 0;                   // 0-based
  int problem_count = 0;
  std::string problem_key;
  std::string step;                        // "screen", "halving" or "final"
  std::string variant;                     // the variant screened ("" for rounds of several)
  std::string config_key;                  // the config screened ("" for rounds)
  int configs_done = 0;                    // configs of the variant's space screened so far
  int configs_in_space = 0;                // the variant's space
  int trials = 0;                          // the problem's trials so far (measured + resumed)
  double problem_seconds = 0;              // since the problem's inputs were prepared
  double budget_seconds = 0;               // SweepOptions::max_seconds_per_problem (0 = none)
};
using SweepActivityCallback = std::function<void(const SweepActivity&)>;

struct SweepOptions {
  ConfigSpaceOptions space;                // variants, precisions, block sizes, ...
  SearchStrategy strategy = SearchStrategy::kAuto;
  FinalRoundOptions final_rounds;
  // Each baseline variant (partial, materialized) is searched for at most this many times
  // the fused variant's search time (at least kMinBaselineSeconds): the baselines are there
  // for the speedup figure, and a slow baseline's large space must not cost the problem
  // many times what the served kernel's search did. 0 = no such cap (the baselines share
  // the budget like any variant). Not applied when max_trials_per_variant is set: an
  // explicit trial count is honoured.
  double baseline_time_ratio = 0.25;
  uint64_t seed = 1;                       // searcher seed (mixed with the problem key)
  int max_trials_per_variant = 0;          // screen trials; 0 = no cap
  double max_seconds_per_problem = 0;      // 0 = unbounded
  RunnerOptions runner;
  std::string commit;                      // provenance written into each BestConfig
  // false: no step 3 (no SelectBest, no sink.RecordBestConfig; SweepProgress::best and
  // SweepResult::best stay empty), for a caller that selects from the recorded trials itself:
  // the worker, whose server selects each problem's best config from the stored trials when
  // the job completes (that selection is the authority, so the worker's would be wasted).
  bool select_best = true;
  SweepActivityCallback activity;          // may be empty; called on the sweep's thread
};

inline constexpr double kMinBaselineSeconds = 0.5;

// Sent after each problem finishes (also the last one), once its best config is recorded.
struct SweepProgress {
  int problem_index = 0;                   // 0-based
  int problem_count = 0;
  std::string problem_key;
  int trials_measured = 0;                 // this problem, measured now
  int trials_resumed = 0;                  // this problem, found already recorded
  int trials_ok = 0;                       // this problem, kOk (measured or resumed; screen and rounds)
  double problem_seconds = 0;              // wall time on this problem after its inputs were prepared
  double elapsed_seconds = 0;              // since the sweep started
  // The remaining problems at the latest problem's seconds per FLOP, each capped by
  // max_seconds_per_problem (+10%) when set.
  double estimated_remaining_seconds = 0;
  std::optional<BestConfig> best;          // nullopt when no trial of the problem was kOk
  // Why the problem's search is incomplete ("" when it is not): the time budget ran out
  // inside a trial, or the final rounds were cut before their third round. `best`, when
  // set, is then the pick of what was measured.
  std::string incomplete;
  std::map<std::string, int> outcomes;     // measured screen trials by outcome name
  std::string first_failure;               // "<outcome>: <message>" of the first that was not ok
};



struct SweepResult {
  std::vector<BestConfig> best;            // one per finished problem with a kOk trial
  int problems_finished = 0;
  int trials_measured = 0;
  int trials_resumed = 0;
  bool cancelled = false;
};

using SweepProgressCallback = std::function<void(const SweepProgress&)>;

// Runs the sweep described above. Errors (the sweep stops; records sent so far stay
// recorded): InvalidArgument for an invalid problem or option, or an empty problem list
// (before the sink is asked anything); ResourceExhausted for a problem whose measurement
// does not fit in the host's or device's memory (CheckMemoryFits, same time); whatever `sink.RecordedTrials` returned when it fails
// (before anything is measured); whatever `sink.RecordTrial` or `sink.RecordBestConfig`
// returned when they fail (with the trial or problem named). Failing configs are not
// errors: they are trials with their outcome.
// `device_class` for the BestConfigs is backend.Describe().DeviceClass().
absl::StatusOr<SweepResult> RunSweep(Backend& backend, std::span<const AttentionProblem> problems,
                                     const SweepOptions& options, int64_t run_id, RecordSink& sink,
                                     const SweepProgressCallback& progress = nullptr,
                                     const std::atomic<bool>* cancel = nullptr);

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_SWEEP_H_
