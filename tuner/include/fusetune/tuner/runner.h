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

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/tuner/trial.h"

namespace fusetune {

// Largest allowed |out - ref| / max|ref| for a precision and storage dtype on the runner's own
// inputs (uniform in [-1, 1], scale 1/sqrt(head_dim)): the larger of
//   precision of the products: fp32 1e-4, tf32 5e-3, fp16 1e-2, bf16 3e-2
//   rounding of the stored output: fp32 0, fp16 2e-3, bf16 1.6e-2 (a few ulps of max|ref|)
// A dropped online-softmax rescale or an off-by-one mask gives errors of order 1e-1..1.
double ToleranceFor(Precision precision, DType dtype);

// Bound on every logit |scale * q.k| of the inputs: scale * max ||q row|| * max ||k row||
// (Cauchy-Schwarz; non-finite elements are skipped). On inputs in [-1, 1] with the default
// scale it is at most sqrt(head_dim).
double LogitBound(const AttentionProblem& problem, const std::vector<float>& q,
                  const std::vector<float>& k);

// The tolerance for inputs whose logits are bounded by `logit_bound`. Rounding the product
// operands to a mantissa with unit roundoff u (tf32 and fp16 2^-11, bf16 2^-8, fp32 2^-24)
// perturbs each logit by at most about 2u * |scale| * sum|q||k| <= 2u * logit_bound, and to
// first order the softmax output moves in proportion to that perturbation. The fixed
// tolerance above holds up to the bound of the runner's inputs, sqrt(head_dim); beyond it the
// tolerance grows by logit_bound / sqrt(head_dim), so a correct kernel on large-magnitude
// inputs (e.g. an exact TF32 emulation at |x| <= 4) is not failed, while on the runner's
// inputs nothing is looser than before.
double ToleranceFor(Precision precision, DType dtype, double logit_bound, int head_dim);

struct RunnerOptions {
  TimingOptions timing{.warmup = 1, .repeats = 10, .max_seconds = 1.0, .flush_l2 = true};
  // Problems with at most this many output elements are checked in full.
  int64_t full_check_max_elements = int64_t{1} << 18;
  // Query tokens checked (all heads each) for larger problems.
  int sampled_rows = 64;
  // A verification run slower than this is recorded as kTimedOut and not timed.
  double trial_time_limit_seconds = 60.0;
  // Seeds the input generator; each trial mixes in its problem and config keys and attempt,
  // so inputs differ between trials yet are reproducible.
  uint64_t seed = 1;
};

// Order statistics of timing samples, linear interpolation; q in [0, 1]. 0 for no samples.
double Quantile(std::vector<double> samples, double q);

class Runner {
 public:
  // `backend` must outlive the Runner.
  Runner(Backend& backend, RunnerOptions options = {});

  // Measures one trial. Always returns a Trial with trial_id, run_id, keys, attempt,
  // outcome, message (for every outcome but kOk), flops and created_unix_ms filled.
  // An invalid problem or config gives kUnsupported with the validation message.
  Trial Measure(const AttentionProblem& problem, const KernelConfig& config, int64_t run_id,
                int attempt = 0);

  const RunnerOptions& options() const { return options_; }

 private:
  Backend& backend_;
  RunnerOptions options_;
};

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_RUNNER_H_
