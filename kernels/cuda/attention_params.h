// Plain parameter block passed from the CUDA backend (host) to the launch templates, after
// the API checks (flash-attention's shape: checks -> params struct -> launch -> kernel).
// Everything here is already validated; kernels trust it.
#ifndef FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_
#define FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_

#include <cstdint>

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune::cuda {

struct AttentionParams {
  // Tensors in the layout of problem.h ([tokens][heads][head_dim]), storage dtype.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Row strides in elements (tokens dimension) and head strides.
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, o_row_stride = 0;
  int q_head_stride = 0, k_head_stride = 0, v_head_stride = 0, o_head_stride = 0;

  int batch = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int q_len = 0, kv_len = 0;  // uniform lengths, or the maxima for varlen
  // Device arrays of batch+1 prefix sums (varlen), or nullptr for a uniform batch.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // Device array of batch visible key counts (key padding), or nullptr.
  const int32_t* kv_valid_lens = nullptr;
  bool causal = false;
  DType dtype = DType::kFp32;
  float scale = 1.0f;           // softmax scale
  float scale_log2 = 1.0f;      // scale * log2(e): exp2 folding
  // Rows of Q/O and of K/V in memory (problem.TotalQueries() / TotalKeys()). The Hopper TMA
  // kernel uses them as tensor bounds and refuses to launch (cudaErrorNotSupported) at 0.
  int64_t q_total_rows = 0, kv_total_rows = 0;

  // Workspace for partial/materialized (S or P), device memory, and its size in bytes.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

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

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_ATTENTION_PARAMS_H_
