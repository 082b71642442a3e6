// Runner: measures (problem, config) pairs on a backend and returns Trials, whatever
// happens. Following KTT, a failing config is an outcome, never an exception or an error
// return.
//
// Per-problem work is done once: the first measurement of a problem makes its inputs and
// keeps them (on the device) until a different problem comes, so every config of a
// problem runs on the same tensors and the fp64 reference is computed once:
//   - the random set: uniform in [-1, 1], never zero, rounded to the storage dtype, from a
//     counter-based generator seeded by (RunnerOptions::seed, problem key), reproducible
//     on every host; it is the set that is timed;
//   - the adversarial set (RunnerOptions::adversarial_check): in every head query dim 0 is
//     1 (the rest in [-0.25, 0.25]), key dim 0 grows with the key's position so that each
//     later key tile raises the running max (logits span ~12, e^12 between first and last
//     key), some keys are -inf in dim 0 (scores -inf: masked; the first quarter of each
//     sequence up to 24 keys, and every 7th key, so some rows see no key at all), values
//     scaled by 64;
//   - a paged problem (page_block_size > 0): K and V are random pools of PoolPages() pages,
//     and each set has its own block table from GenerateBlockTable (seeded like the
//     tensors), uploaded to device memory and passed as AttentionBuffers::block_table; the
//     adversarial keys are written through that table;
//   - K/V stored as e4m3 (kv_storage kE4m3): each set's K and V are made as above (rounded to
//     the dtype), then quantised per KV head (QuantizeE4m3PerHead); the bytes and the fp32
//     scales are uploaded through the backend (AttentionBuffers::k_scale, v_scale) and the
//     reference takes the e4m3 values with their scales (KvScales; the adversarial set's -inf
//     keys saturate to -448 * scale: e4m3 has no infinities). The random set also keeps its
//     K/V before quantisation and the reference of the checked rows on them (the problem with
//     kv_storage kDType);
//   - the checked rows: every query token of a small problem (OElements() <=
//     full_check_max_elements); else `sampled_rows` tokens, all heads, including the first
//     and last token of each sequence (as many as fit), the rest drawn at random;
//   - each set's fp64 reference (ReferenceAttentionRow) of the checked rows, computed on
//     the host's threads; for a paged problem that of problem.Unpaged() on the K/V gathered
//     through the set's table (GatherPagedKV).
//
// Measure, the screen of one config:
//   1. Backend::CanImplement says no                      -> kUnsupported
//   2. for each input set: O poisoned with 0xFF bytes (NaN in fp32, fp16 and bf16), one
//      Run(); a Run error                                  -> kLaunchFailed
//      (at any step: the backend stopped by the stop token -> kInterrupted; out of memory,
//      a ResourceExhausted status or std::bad_alloc        -> kResourceExhausted)
//   3. the random set's run took longer than trial_time_limit_seconds -> kTimedOut
//   4. verification of each set's output:
//      - the whole output is scanned for NaN/Inf (an unwritten element stays NaN);
//      - the checked rows are compared with the reference; error metric |out - ref| /
//        max|ref| over the checked elements ("relative to the largest reference
//        magnitude", so near-zero outputs do not blow it up);
//      - a NaN/Inf anywhere or an error above ToleranceFor(precision, dtype,
//        LogitBound(set), head_dim)                        -> kVerifyFailed (the message
//        names the adversarial set when that one failed)
//   5. Backend::Time on the random set, one block; a timing error -> kLaunchFailed;
//      median, p10 and p90 of the kept samples (linear interpolation between order
//      statistics)                                          -> kOk
// Trial::max_abs_error is max |out - ref| and Trial::max_rel_error the metric above, both
// over the random set's checked elements (both 0 when verification did not run). For K/V
// stored as e4m3, Trial::unquantised_rel_error is the same metric of the same output against
// the reference of the unquantised K/V (what the format costs; never checked against a
// tolerance); 0 for every other problem.
//
// MeasureRounds, the interleaved comparison of already verified configs: see below.
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
#include "fusetune/records/trial.h"

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

// A block table for the paged problem `problem` (BlockTableEntries() entries, row b for
// sequence b), as a serving cache's allocator leaves it: the pool's pages shuffled by a
// permutation seeded by `seed`; the first shared_prefix_pages logical pages of every sequence
// mapped to the same physical pages; every other page a sequence needs a page of its own,
// drawn in shuffled order, so a pool larger than PagesNeeded() leaves pages unused and one
// smaller reuses pages (the n-th page needed is the (n mod PoolPages())-th of the shuffle).
// Entries past a sequence's pages (never read) name a valid page. Empty for a contiguous or
// invalid problem. The result always passes ValidateBlockTable.
std::vector<int32_t> GenerateBlockTable(const AttentionProblem& problem, uint64_t seed);

// Order statistics of timing samples, linear interpolation; q in [0, 1]. 0 for no samples.
double Quantile(std::vector<double> samples, double q);

// What measuring a problem holds in memory at its peak (Runner's inputs: both input sets on
// the device, the output and its host copy, the host's float tensors and staging while a set
// is made, the fp64 reference rows), in bytes. The backends' own workspaces come on top
// (CanImplement refuses a config whose workspace is too large).
struct MemoryNeed {
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
};
MemoryNeed MeasurementMemory(const AttentionProblem& problem, const RunnerOptions& options = {});

// The host memory this process may still take: the smaller of the physical memory and what
// the address-space limit (RLIMIT_AS, e.g. `prlimit --as`) leaves above the current size.
int64_t HostMemoryAvailableBytes();

// OK when MeasurementMemory(problem) fits: on the CPU backend (whose device memory is host
// memory) device plus host bytes within HostMemoryAvailableBytes(); on a GPU the device bytes
// within `device.memory_bytes` (when known) and the host bytes within the host's.
// ResourceExhausted otherwise, naming the problem, the bytes it needs and what there is.
absl::Status CheckMemoryFits(const AttentionProblem& problem, const DeviceInfo& device,
                             const RunnerOptions& options = {});

class Runner {
 public:
  // `backend` must outlive the Runner.
  Runner(Backend& backend, RunnerOptions options = {});
  ~Runner();

  // Measures one screen trial with RunnerOptions::timing. Always returns a Trial with
  // trial_id, run_id, keys, attempt, stage, outcome, message (for every outcome but kOk),
  // flops, wall_seconds and created_unix_ms filled. An invalid problem or config gives
  // kUnsupported with the validation message; inputs that cannot be prepared (device
  // memory) give kLaunchFailed.
  Trial Measure(const AttentionProblem& problem, const KernelConfig& config, int64_t run_id,
                int attempt = 0);
  // The same with its own timing block and stage (successive halving screens with fewer
  // samples; an audit screens under stage kAudit).
  Trial Measure(const AttentionProblem& problem, const KernelConfig& config,
                const TimingOptions& timing, int64_t run_id, int attempt,
                TrialStage stage = TrialStage::kScreen);

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

  // Stops the measurements from now on once `stop` asks (kernels/stop_token.h): passed to the
  // backend, so a trial in flight ends within about a launch (on the CPU, a tile) and is
  // recorded as kInterrupted; MeasureRounds drops the round it cuts short. Until the next
  // call or the Runner's destruction (which gives the backend a token that never stops).
  void SetStopToken(const StopToken& stop) { backend_.SetStopToken(stop); }

  // Seconds spent preparing the current problem's inputs and references (0 before any).
  double prepare_seconds() const { return prepare_seconds_; }

  // Makes `problem`'s inputs and fp64 references now (a no-op when they are the current
  // ones), so a caller can start a time budget after them. An error here (an invalid
  // problem, memory) is returned and also becomes the outcome of each later trial of it.
  absl::Status PrepareInputs(const AttentionProblem& problem);

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
