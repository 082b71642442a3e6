// The launch arguments of the partial and materialized variants' own kernels (softmax rows,
// partial scores) for one GEMM group of a BaselinePlan, the kernels' element type of a
// storage dtype, and the partial and materialized configs a backend offers: in one place for
// the CUDA and the HIP backend, which share the kernels (gpu/shared_kernels.cmake) and differ
// only in their GEMMs.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_KERNELS_CUDA_BASELINE_ARGS_H_
#define FUSETUNE_KERNELS_CUDA_BASELINE_ARGS_H_

#include "baseline_kernels.h"
#include "baseline_plan.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {

inline ElemType ToElemType(DType d) {
  switch (d) {
    case DType::kFp32: return ElemType::kF32;
    case DType::kFp16: return ElemType::kF16;
    case DType::kBf16: return ElemType::kBf16;
  }
  return ElemType::kF32;
}

// The baseline variants' search grids. Partial: its kernel takes any tile up to 256 and any
// warp multiple up to kPartialMaxThreads; it assigns a warp per row (exact path) or per 16x16
// score tile (tensor cores), and rows and tiles come in powers of two, so only power-of-two
// warp counts divide the work evenly. Materialized: the backend's GEMMs pick their own tiles,
// so block_m/block_s change nothing there and stay at one value; only the softmax kernel's
// block size (one block per row) varies.
inline constexpr int kPartialTiles[] = {16, 32, 64, 128, 256};
inline constexpr int kPartialThreads[] = {32, 64, 128, 256, kPartialMaxThreads};
inline constexpr int kMaterializedTile = 64;
inline constexpr int kSoftmaxThreads[] = {32, 64, 128, 256, 512, 1024};

// Calls `visit(config)` for each partial and then each materialized config of the grids above
// at `precision` (stages 1, no KV split); the caller keeps those its backend can implement.
template <typename Visit>
void ForEachBaselineConfig(Precision precision, Visit&& visit) {
  KernelConfig c;
  c.precision = precision;
  c.stages = 1;
  c.split_kv = 1;
  c.variant = Variant::kPartial;
  for (int bm : kPartialTiles) {
    for (int bs : kPartialTiles) {
      for (int t : kPartialThreads) {
        c.block_m = bm;
        c.block_s = bs;
        c.threads = t;
        visit(c);
      }
    }
  }
  c.variant = Variant::kMaterialized;
  c.block_m = c.block_s = kMaterializedTile;
  for (int t : kSoftmaxThreads) {
    c.threads = t;
    visit(c);
  }
}

// Softmax rows over group `g`'s S (fp32) into its P (`p_type`), both in `workspace`.
inline SoftmaxRowsArgs SoftmaxRowsArgsFor(const AttentionProblem& problem, const KernelConfig& config,
                                          const GemmGroup& g, char* workspace, ElemType p_type, float scale_log2) {
  SoftmaxRowsArgs sm;
  sm.scores = reinterpret_cast<const float*>(workspace + g.scores_offset);
  sm.probs = workspace + g.probs_offset;
  sm.p_type = p_type;
  sm.entries = g.entries;
  sm.q_len = g.q_len;
  sm.k_len = g.k_len;
  sm.ld = g.ld;
  sm.causal = problem.causal;
  sm.scale_log2 = scale_log2;
  sm.threads = config.threads;
  return sm;
}

// The partial variant's scores kernel over group `g`: P in the storage type, in `workspace`.
inline PartialScoresArgs PartialScoresArgsFor(const AttentionProblem& problem, const KernelConfig& config,
                                              const GemmGroup& g, const void* q, const void* k, char* workspace,
                                              float scale_log2, bool tensor_cores) {
  PartialScoresArgs ps;
  ps.q = q;
  ps.k = k;
  ps.probs = workspace + g.probs_offset;
  ps.in_type = ToElemType(problem.dtype);
  ps.p_type = ps.in_type;
  ps.head_dim = problem.head_dim;
  ps.q_heads = problem.q_heads;
  ps.kv_heads = problem.kv_heads;
  ps.q_first_row = g.q_first_row;
  ps.k_first_row = g.k_first_row;
  ps.q_seq_stride = g.q_seq_stride;
  ps.k_seq_stride = g.k_seq_stride;
  ps.sequences = g.sequences;
  ps.q_len = g.q_len;
  ps.k_len = g.k_len;
  ps.ld = g.ld;
  ps.causal = problem.causal;
  ps.scale_log2 = scale_log2;
  ps.block_m = config.block_m;
  ps.block_s = config.block_s;
  ps.threads = config.threads;
  ps.tensor_cores = tensor_cores;
  return ps;
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_BASELINE_ARGS_H_
