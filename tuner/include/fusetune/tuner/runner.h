// Runner: measures one (problem, config) on a backend and returns the Trial, whatever
// happens. Following KTT, a failing config is an outcome, never an exception or an error
// return:
//
//   1. Backend::CanImplement says no                      -> kUnsupported
//   2. fresh random inputs (uniform in [-1, 1], never zero), rounded to the storage dtype;
//      O poisoned with 0xFF bytes (NaN in fp32, fp16 and bf16);
//      one Run(); a Run error                              -> kLaunchFailed
//   3. the run took longer than trial_time_limit_seconds  -> kTimedOut
//   4. verification against the fp64 reference (ReferenceAttentionRow):
//      - the whole output is scanned for NaN/Inf (an unwritten element stays NaN);
//      - small problems (OElements() <= full_check_max_elements): every element is compared;
//        large ones: `sampled_rows` query tokens, all heads, always including the first and
//        last token of each sequence (as many as fit), the rest drawn at random;
//      - error metric: |out - ref| / max|ref| over the checked elements ("relative to the
//        largest reference magnitude", so near-zero outputs do not blow it up);
//      - a NaN/Inf anywhere or an error above ToleranceFor(precision, dtype, LogitBound(...),
//        head_dim)                                          -> kVerifyFailed
//   5. Backend::Time with warm-up and repeats; a timing error  -> kLaunchFailed;
//      median, p10 and p90 of the kept samples (linear interpolation between order
//      statistics)                                          -> kOk
//
// Trial::max_abs_error is max |out - ref| and Trial::max_rel_error the metric above, both
// over the checked elements (both 0 when verification did not run).
//
// Thread-safety: not thread-safe (it drives one Backend, which is not).
#ifndef FUSETUNE_TUNER_RUNNER_H_
#define FUSETUNE_TUNER_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/kernels/reference.h"
#include "fusetune/tuner/trial.h"

namespace fusetune {

// ToleranceFor and LogitBound (what the verification accepts) live beside the oracle in
// fusetune/kernels/reference.h.

struct RunnerOptions {
  TimingOptions timing{.warmup = 1, .repeats = 10, .max_seconds = 1.0, .flush_l2 = true};
  // Problems with at most this many output elements are checked in full.
  int64_t full_check_max_elements = int64_t{1} << 18;
  // Query tokens checked (all heads each) for larger problems.
  int sampled_rows = 64;
  // A verification run slower than this is recorded as kTimedOut and not timed.
  double trial_time_limit_seconds = 60.0;
  // Seeds the input generator (mixed with the problem key): every config of a problem runs
  // on the same inputs, reproducible on every host.
  uint64_t seed = 1;
  // Also verify every config on the problem's adversarial inputs (see ProblemInputs).
  bool adversarial_check = true;
};

// Order statistics of timing samples, linear interpolation; q in [0, 1]. 0 for no samples.
double Quantile(std::vector<double> samples, double q);

class Runner {
 public:
  // `backend` must outlive the Runner.
  Runner(Backend& backend, RunnerOptions options = {});
  ~Runner();

  // Measures one trial. Always returns a Trial with trial_id, run_id, keys, attempt,
  // outcome, message (for every outcome but kOk), flops and created_unix_ms filled.
  // An invalid problem or config gives kUnsupported with the validation message.
  Trial Measure(const AttentionProblem& problem, const KernelConfig& config, int64_t run_id,
                int attempt = 0);

  // Interleaved rounds: measures `configs` (already verified on these inputs, e.g. by
  // Measure) in `rounds` rounds; each round visits every config once in a fresh random
  // order (seeded by `order_seed` and the round) and runs one Backend::Time block of
  // `block` per config. Returns one Trial per config, in the order of `configs`, with
  // `stage` and `attempt`: kOk with samples_us = the per-round block medians and blocks
  // the per-round blocks; or the outcome of the first failing block (kUnsupported /
  // kLaunchFailed), the others still measured. Stops early (returning the rounds done)
  // when `max_seconds` > 0 is exceeded after at least 3 rounds, or `*cancel` is true.
  std::vector<Trial> MeasureRounds(const AttentionProblem& problem,
                                   std::span<const KernelConfig> configs, int rounds,
                                   const TimingOptions& block, uint64_t order_seed,
                                   int64_t run_id, TrialStage stage, int attempt,
                                   double max_seconds = 0,
                                   const std::atomic<bool>* cancel = nullptr);

  // Seconds spent preparing the current problem's inputs and references (0 before any).
  double prepare_seconds() const { return prepare_seconds_; }

  const RunnerOptions& options() const { return options_; }

 private:
  class ProblemInputs;
  // The inputs of `problem`, made on first use and reused until another problem comes.
  absl::StatusOr<ProblemInputs*> InputsFor(const AttentionProblem& problem);

  Backend& backend_;
  RunnerOptions options_;
  std::unique_ptr<ProblemInputs> inputs_;
  double prepare_seconds_ = 0;
};

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_RUNNER_H_
