// Device kernels of the two non-fused variants (partial and materialized), launched by the
// CUDA backend once per "GEMM group" (see baseline_plan.h). Host-callable launchers only:
// no absl and no CUDA types beyond cudaStream_t/cudaError_t, so this header is shared by the
// .cu files (nvcc) and the backend (host compiler).
//
// Every launcher is asynchronous on `stream` and returns the launch error (cudaSuccess when
// the launch was accepted). Arguments are trusted: the backend validated them.
#ifndef FUSETUNE_KERNELS_CUDA_BASELINE_KERNELS_H_
#define FUSETUNE_KERNELS_CUDA_BASELINE_KERNELS_H_

#include <cstdint>

#include "../gpu/gpu_runtime.h"


namespace fusetune::FUSETUNE_GPU_NAMESPACE {

// Element types of the tensors these kernels read and write (mirrors fusetune::DType without
// pulling absl into nvcc-compiled files).
enum class ElemType { kF32, kF16, kBf16 };

// Rows of one GEMM group: `entries` (sequence, q head) pairs, each q_len rows of ld elements,
// stored back to back. A row's visible keys follow problem.h's masks:
// causal ? clamp(i + k_len - q_len + 1, 0, k_len) : k_len.
struct SoftmaxRowsArgs {
  const float* scores = nullptr;  // S, unscaled Q.K dot products, [entries][q_len][ld]
  void* probs = nullptr;          // P (may alias scores when p_type is kF32), same shape
  ElemType p_type = ElemType::kF32;  // element type of P
  int64_t entries = 0;
  int q_len = 0;
  int k_len = 0;  // visible keys of the sequence (padding already applied); columns >= k_len
                  // of P are not written (the PV GEMM reads only [0, k_len))
  int ld = 0;     // row stride of S and P in elements, >= k_len
  bool causal = false;
  float scale_log2 = 1.0f;  // softmax scale * log2(e)
  int threads = 256;        // threads per block (one block per row), warp multiple <= 1024
};

// P = softmax(scale * S) row by row with the causal mask; a row that sees no key is zeros.
cudaError_t LaunchSoftmaxRows(const SoftmaxRowsArgs& args, cudaStream_t stream);

// The partial variant's first kernel: for a block of block_m query rows of one (sequence,
// head), computes Q.K^T tile by tile (block_s keys per tile) twice: once to find each row's
// max and sum (online), once to write P = softmax(scale * Q.K^T) with the masks applied.
// Products are exact fp32 FMAs on the inputs converted to float, or, with tensor_cores,
// WMMA tensor-core products (fp16/bf16 inputs; tf32 for fp32 inputs) with fp32 accumulation;
// the tensor-core path needs block_m and block_s to be multiples of 16.
struct PartialScoresArgs {
  const void* q = nullptr;  // problem.h layout, storage dtype
  const void* k = nullptr;
  void* probs = nullptr;    // P, [entries][q_len][ld], entries ordered (sequence, q head)
  ElemType in_type = ElemType::kF32;  // storage type of Q and K
  ElemType p_type = ElemType::kF32;   // element type of P
  int head_dim = 64;             // 64 or 128
  int q_heads = 1;
  int kv_heads = 1;
  int64_t q_first_row = 0;   // token row of the group's first sequence's first query
  int64_t k_first_row = 0;   // token row of the group's first sequence's first key
  int64_t q_seq_stride = 0;  // token rows between consecutive sequences of the group
  int64_t k_seq_stride = 0;
  int sequences = 0;
  int q_len = 0;
  int k_len = 0;  // visible keys; P columns [0, k_len) are written
  int ld = 0;
  bool causal = false;
  float scale_log2 = 1.0f;
  int block_m = 64;
  int block_s = 64;
  int threads = 256;
  bool tensor_cores = false;
};

// Most threads per block of the partial kernel (its register budget is sized for it).
inline constexpr int kPartialMaxThreads = 512;

// Dynamic shared memory the partial kernel needs for this geometry (bytes).
int64_t PartialScoresSharedBytes(int head_dim, int block_m, int block_s, ElemType in_type,
                                 bool tensor_cores);
cudaError_t LaunchPartialScores(const PartialScoresArgs& args, cudaStream_t stream);

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE

#endif  // FUSETUNE_KERNELS_CUDA_BASELINE_KERNELS_H_
