// BaselinePlan: how the partial and materialized variants cover a problem with batched GEMMs.
//
// cuBLAS batched GEMMs need one (m, n, k) per call, so sequences are grouped: a GEMM group is
// a run of consecutive sequences with equal query length and equal visible key length, laid
// out at a constant token stride (a uniform batch without padding is one group; a varlen
// batch usually has one group per sequence). Each group holds sequences x q_heads
// "entries"; GQA is handled by pointing every q head of an entry at its kv head. Sequences
// whose queries see no key at all get their output rows zeroed instead of a GEMM.
//
// The plan also lays out the workspace: per group, S (fp32, materialized only) and P
// (fp32, fp16 or bf16), [entries][q_len][ld] each, with ld = visible keys rounded up to 8
// elements (aligned rows for the tensor-core GEMMs). When P is fp32 it aliases S.
//
// Thread-safety: plain value types and a pure function.
#ifndef FUSETUNE_KERNELS_CUDA_BASELINE_PLAN_H_
#define FUSETUNE_KERNELS_CUDA_BASELINE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/problem.h"
#include "../gpu/gpu_namespace.h"  // FUSETUNE_GPU_NAMESPACE: cuda or hip

namespace fusetune::FUSETUNE_GPU_NAMESPACE {

struct GemmGroup {
  int first_sequence = 0;
  int sequences = 0;
  int64_t q_first_row = 0;   // token row of the first query of the first sequence
  int64_t k_first_row = 0;   // token row of the first key of the first sequence
  int64_t q_seq_stride = 0;  // token rows between the group's consecutive sequences
  int64_t k_seq_stride = 0;
  int q_len = 0;
  int k_len = 0;  // visible keys (key padding applied)
  int ld = 0;     // row stride of S and P, elements
  int64_t entries = 0;         // sequences * q_heads
  size_t scores_offset = 0;    // bytes into the workspace (materialized only)
  size_t probs_offset = 0;     // bytes into the workspace
};

// Output rows [first_token, first_token + tokens) (all heads) that must be zero.
struct ZeroRows {
  int64_t first_token = 0;
  int64_t tokens = 0;
};

struct BaselinePlan {
  std::vector<GemmGroup> groups;
  std::vector<ZeroRows> zero_rows;
  size_t workspace_bytes = 0;
};

// `with_scores`: the materialized variant (S stored in fp32); `probs_bytes`: bytes per P
// element (4, or 2 for fp16/bf16 P). Requires a valid problem (InvalidArgument otherwise).
absl::StatusOr<BaselinePlan> PlanBaseline(const AttentionProblem& problem, bool with_scores,
                                          int probs_bytes);

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_BASELINE_PLAN_H_
