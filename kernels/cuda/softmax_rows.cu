// The materialized variant's softmax pass: one thread block per row of S.
//
// Rows short enough to fit in shared memory are read from global memory once (S read once, P
// written once: the pass is memory bound); longer rows are read twice (an online max/sum pass,
// then the write pass).
#include <cfloat>

#include "baseline_kernels.h"
#include "device_common.cuh"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {
namespace {

// Rows with at most this many columns are cached in shared memory (48 KiB: no opt-in needed).
constexpr int kCachedRowMaxColumns = 12 * 1024;

template <typename PT, bool kCached>
__global__ void SoftmaxRowsKernel(const float* scores, PT* probs, int64_t rows,
                                  int q_len, int k_len, int ld, bool causal, float scale_log2) {
  extern __shared__ float row_cache[];
  __shared__ float reduce_m[32];
  __shared__ float reduce_l[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int i = static_cast<int>(row % q_len);
    const int visible = causal ? min(max(i + k_len - q_len + 1, 0), k_len) : k_len;
    const float* s = scores + row * ld;
    PT* p = probs + row * ld;

    // The row's max (scores in score units) and sum of exp2(e(s)) relative to it (ExpShift,
    // device_common.cuh). A cached row takes the max first and then the sum over the cache (no
    // exp2 on a dependency chain); a long row is read once for an online (max, sum).
    float m = -INFINITY, l = 0.0f;
    if (kCached) {
      for (int j = threadIdx.x; j < visible; j += blockDim.x) {
        const float x = s[j];
        row_cache[j] = x;
        m = fmaxf(m, x);
      }
      m = BlockReduceMax(m, reduce_m);
      const ExpShift e = ExpShiftOfMax(m, scale_log2);
      for (int j = threadIdx.x; j < visible; j += blockDim.x) {
        l += exp2f(ShiftedExponent(row_cache[j], e, scale_log2));  // this thread's own entries
      }
      l = BlockReduceSum(l, reduce_l);
    } else {
      for (int j = threadIdx.x; j < visible; j += blockDim.x) AddToMaxSum(m, l, s[j], scale_log2);
      BlockReduceMaxSum(m, l, reduce_m, reduce_l, scale_log2);
    }
    const float inv_l = InverseOfSum(l);
    const ExpShift e = ExpShiftOfMax(m, scale_log2);
    for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
      float out = 0.0f;
      if (j < visible) {
        const float x = kCached ? row_cache[j] : s[j];
        out = exp2f(ShiftedExponent(x, e, scale_log2)) * inv_l;
      }
      p[j] = FromFloat<PT>(out);
    }
    __syncthreads();  // row_cache and the reduction buffers are reused by the next row
  }
}

template <typename PT>
cudaError_t LaunchTyped(const SoftmaxRowsArgs& a, cudaStream_t stream) {
  const int64_t rows = a.entries * a.q_len;
  if (rows == 0 || a.k_len == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(rows < (int64_t{1} << 20) ? rows : (int64_t{1} << 20));
  PT* probs = static_cast<PT*>(a.probs);
  if (a.k_len <= kCachedRowMaxColumns) {
    const size_t smem = static_cast<size_t>(a.k_len) * sizeof(float);
    SoftmaxRowsKernel<PT, true><<<grid, a.threads, smem, stream>>>(
        a.scores, probs, rows, a.q_len, a.k_len, a.ld, a.causal, a.scale_log2);
  } else {
    SoftmaxRowsKernel<PT, false><<<grid, a.threads, 0, stream>>>(
        a.scores, probs, rows, a.q_len, a.k_len, a.ld, a.causal, a.scale_log2);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSoftmaxRows(const SoftmaxRowsArgs& args, cudaStream_t stream) {
  switch (args.p_type) {
    case ElemType::kF32:
      return LaunchTyped<float>(args, stream);
    case ElemType::kF16:
      return LaunchTyped<__half>(args, stream);
    case ElemType::kBf16:
      return LaunchTyped<gpu::Bf16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE
