// Helpers shared by the CPU backend tests: inputs, a run on a backend, error against the
// fp64 reference.
#ifndef FUSETUNE_KERNELS_CPU_CPU_TEST_UTIL_H_
#define FUSETUNE_KERNELS_CPU_CPU_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/reference.h"

namespace fusetune::testing_util {

// Uniform values in [lo, hi), deterministic for a seed.
std::vector<float> Uniform(int64_t n, float lo, float hi, uint64_t seed);

struct Inputs {
  // Already rounded to the problem's storage dtype; K/V stored as e4m3: the e4m3 values
  // (E4m3ToFloat of the bytes RunBackend uploads), with their per-KV-head scales.
  std::vector<float> q, k, v;
  std::vector<float> k_scale, v_scale;  // e4m3 K/V only: kv_heads each
};
// Q in [-2, 2), K and V in [-1, 1), rounded to the storage dtype; for K/V stored as e4m3, K
// and V then quantised per head (QuantizeE4m3PerHead).
Inputs RandomInputs(const AttentionProblem& problem, uint64_t seed);
// Replaces in->k and in->v (floats in the problem's dtype) by their per-head e4m3 values and
// sets the scales, as a serving engine quantises its cache.
void QuantizeKV(const AttentionProblem& problem, Inputs* in);
// The reference's scales of `in` (empty unless the problem's K/V are e4m3).
KvScales ScalesOf(const AttentionProblem& problem, const Inputs& in);

// Extra memory around the tensors for poisoning tests.
struct RunOptions {
  int64_t extra_kv_rows = 0;      // rows allocated after the last key row of K and V
  float kv_tail_value = 0.0f;     // value stored in those rows
  uint8_t output_poison = 0xFF;   // every byte of O before the run (0xFFFF... = NaN)
  // Paged problems: the block table (Inputs' K and V are then the page pool).
  std::vector<int32_t> block_table;
};

// Encodes the inputs (K/V stored as e4m3: their bytes, and the scales), runs the backend and
// decodes O to floats.
absl::StatusOr<std::vector<float>> RunBackend(Backend& backend, const AttentionProblem& problem,
                                              const KernelConfig& config, const Inputs& in,
                                              const RunOptions& options = {});

// Largest |out - ref| (inf if any output is NaN/Inf while the reference is finite).
double MaxAbsError(const std::vector<float>& out, const std::vector<double>& ref);

// Absolute tolerance for outputs whose inputs V lie in [-1, 1]: the outputs are convex
// combinations of V rows, so absolute error is error relative to the output range.
//   fp32 1e-5: fp32 accumulation over <= a few hundred keys plus the ~1e-7 exp2 polynomial;
//   tf32 2e-3 and fp16 5e-3: 10-bit operand mantissas (2^-11 relative each) on scores of
//   magnitude up to ~8 (Q in [-2, 2)) and on P and V;
//   bf16 3e-2: 7-bit mantissas (2^-8 relative each) on the same;
// and at least the rounding of the stored output: fp16 1e-3, bf16 8e-3.
double Tolerance(Precision precision, DType storage);

std::string Describe(const AttentionProblem& problem, const KernelConfig& config);

// A CPU config (stages 1).
KernelConfig CpuConfig(Variant variant, int block_m, int block_s, int threads, Precision precision, int split_kv = 1);

// One CPU backend per kernel build this host can run (AVX-512, AVX2, generic), each
// labelled with its instruction set, so a test covers every build.
struct IsaBackend {
  std::string isa;
  std::unique_ptr<Backend> backend;
};
std::vector<IsaBackend> BackendsForEveryIsa();

}  // namespace fusetune::testing_util

#endif  // FUSETUNE_KERNELS_CPU_CPU_TEST_UTIL_H_
