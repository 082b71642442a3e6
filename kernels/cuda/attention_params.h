// Plain parameter block passed from the CUDA backend (host) to the launch templates, after
// the API checks (flash-attention's shape: checks -> params struct -> launch -> kernel).
// Everything here is already validated; kernels trust it.
#ifndef FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_
#define FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fused/fused_instance.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {

// The device-visible fields (tensors, strides, shapes, masks, scale_log2, total rows) are the
// kernels' own argument block, FusedKernelArgs (fused/fused_instance.h, absl-free so nvcc
// compiles the kernels without third-party headers); the host-only ones are added here.
struct AttentionParams : fused::FusedKernelArgs {
  int head_dim = 0;
  DType dtype = DType::kFp32;
  float scale = 1.0f;  // softmax scale (scale_log2 = scale * log2(e), for the exp2 folding)

  // Workspace for partial/materialized (S or P), device memory, and its size in bytes.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The fused kernels' arguments for `problem`'s tensors q, k, v and o in the layout of
// problem.h (rows of heads x head_dim); the device length arrays and the workspace are the
// caller's to set. The one filling of these fields for the CUDA and the HIP backend.
inline AttentionParams AttentionParamsFor(const AttentionProblem& problem, const void* q, const void* k,
                                          const void* v, void* o) {
  AttentionParams p;
  const int d = problem.head_dim;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.head_dim = d;
  p.dtype = problem.dtype;
  p.scale = problem.EffectiveScale();
  fused::SetContiguousGeometry(p, problem.batch, problem.q_heads, problem.kv_heads, d, problem.q_len, problem.kv_len,
                               problem.causal ? 1 : 0, p.scale);
  p.q_total_rows = problem.TotalQueries();
  p.kv_total_rows = problem.TotalKeys();
  if (problem.is_paged()) {  // the table pointer is the caller's to set
    p.page_size = problem.page_block_size;
    p.block_table_width = problem.BlockTableWidth();
  }
  return p;
}

// Fused kernel (QK^T -> online softmax -> PV in one kernel).
// FusedCanImplement: OK if an instantiation exists for (head_dim, dtype, precision, block_m,
// block_s, threads, stages), runs on a GPU of `sm_version` (major * 10 + minor; the wgmma/TMA
// instances need 90) and fits `smem_limit_bytes`; otherwise Unimplemented/FailedPrecondition
// naming the reason. Never calls CUDA. LaunchFused: asynchronous launch on `stream`;
// returns the launch error (cudaSuccess when launched).
absl::Status FusedCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                               int64_t smem_limit_bytes, int sm_version);
cudaError_t LaunchFused(const AttentionParams& params, const KernelConfig& config,
                        cudaStream_t stream);

// Device memory with which a fused launch of `config` for `problem`, on a GPU of
// `multiprocessors`, splits its last round along the keys (persistent Hopper configs without a
// causal mask, uniform lengths; SplitTail in fused/persistent_tile_order.h): floats of partial
// states and int32 arrival counters, zeroed once. Both 0 where the launch never splits; a launch
// given less (or none) runs unsplit.
struct FusedSplitWorkspace {
  int64_t partial_floats = 0;
  int64_t counters = 0;
};
FusedSplitWorkspace FusedSplitWorkspaceFor(const AttentionProblem& problem, const KernelConfig& config,
                                           int multiprocessors);

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_
