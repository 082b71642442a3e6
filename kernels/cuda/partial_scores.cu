// The partial variant's first kernel: QK^T and softmax fused per block of query rows, P
// written to the workspace (the PV product is a cuBLAS GEMM afterwards).
//
// One thread block owns block_m query rows of one (sequence, q head). It streams the visible
// keys in tiles of block_s twice: the first pass keeps each row's running max and sum (online
// softmax, log2 domain), the second recomputes the scores and writes normalised
// probabilities. Recomputing costs a second QK^T but never stores S, which is what separates
// this variant from the materialized one. Q and K tiles live in shared memory as float rows
// padded by 4 floats: 16-byte loads stay aligned and the 8 lanes of a 16-byte load phase hit
// distinct banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "baseline_kernels.h"
#include "device_common.cuh"

namespace fusetune::cuda {
namespace {

template <int D>
__device__ __forceinline__ float Dot(const float* a, const float* b) {
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
#pragma unroll
  for (int x = 0; x < D; x += 4) {
    const float4 u = *reinterpret_cast<const float4*>(a + x);
    const float4 w = *reinterpret_cast<const float4*>(b + x);
    acc0 = fmaf(u.x, w.x, acc0);
    acc1 = fmaf(u.y, w.y, acc1);
    acc2 = fmaf(u.z, w.z, acc2);
    acc3 = fmaf(u.w, w.w, acc3);
  }
  return (acc0 + acc1) + (acc2 + acc3);
}

template <int D, typename T, typename PT>
__global__ void __launch_bounds__(kPartialMaxThreads) PartialScoresKernel(PartialScoresArgs a) {
  constexpr int kRow = D + 4;
  extern __shared__ float4 smem4[];
  const int bm = a.block_m, bs = a.block_s;
  float* qs = reinterpret_cast<float*>(smem4);  // [bm][kRow]
  float* ks = qs + bm * kRow;                    // [bs][kRow]
  float* ss = ks + bs * kRow;                    // [bm][bs + 1]
  float* row_m = ss + bm * (bs + 1);             // [bm]
  float* row_l = row_m + bm;                     // [bm]
  int* row_visible = reinterpret_cast<int*>(row_l + bm);  // [bm]

  const T* qg = static_cast<const T*>(a.q);
  const T* kg = static_cast<const T*>(a.k);
  PT* pg = static_cast<PT*>(a.probs);
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int warp = tid >> 5, lane = tid & 31, nwarps = nthreads >> 5;
  const int row_blocks = (a.q_len + bm - 1) / bm;
  const int64_t blocks = static_cast<int64_t>(a.sequences) * a.q_heads * row_blocks;
  const int group = a.q_heads / a.kv_heads;

  for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const int64_t entry = blk / row_blocks;
    const int rb = static_cast<int>(blk % row_blocks);
    const int64_t seq = entry / a.q_heads;
    const int h = static_cast<int>(entry % a.q_heads);
    const int kvh = h / group;
    const int first_i = rb * bm;
    const int rows_here = min(bm, a.q_len - first_i);
    const int64_t q_row0 = a.q_first_row + seq * a.q_seq_stride + first_i;
    const int64_t k_row0 = a.k_first_row + seq * a.k_seq_stride;
    const int64_t q_tok_stride = static_cast<int64_t>(a.q_heads) * D;
    const int64_t k_tok_stride = static_cast<int64_t>(a.kv_heads) * D;

    for (int e = tid; e < bm * D; e += nthreads) {
      const int r = e / D, x = e % D;
      qs[r * kRow + x] =
          r < rows_here ? ToFloat<T>(qg[(q_row0 + r) * q_tok_stride + h * D + x]) : 0.0f;
    }
    for (int r = tid; r < bm; r += nthreads) {
      int visible = 0;
      if (r < rows_here) {
        const int i = first_i + r;
        visible = a.causal ? min(max(i + a.k_len - a.q_len + 1, 0), a.k_len) : a.k_len;
      }
      row_visible[r] = visible;
      row_m[r] = -INFINITY;
      row_l[r] = 0.0f;
    }
    __syncthreads();
    // Visible key counts grow with the row under the causal mask: the last row sees most.
    const int keys_needed = row_visible[rows_here - 1];

    auto load_k_tile = [&](int t0) {
      for (int e = tid; e < bs * D; e += nthreads) {
        const int c = e / D, x = e % D;
        ks[c * kRow + x] =
            t0 + c < a.k_len ? ToFloat<T>(kg[(k_row0 + t0 + c) * k_tok_stride + kvh * D + x]) : 0.0f;
      }
    };

    // Pass 1: row max and sum.
    for (int t0 = 0; t0 < keys_needed; t0 += bs) {
      load_k_tile(t0);
      __syncthreads();
      for (int e = tid; e < bm * bs; e += nthreads) {
        const int r = e / bs, c = e % bs;
        float x = -INFINITY;
        if (t0 + c < row_visible[r]) x = Dot<D>(qs + r * kRow, ks + c * kRow) * a.scale_log2;
        ss[r * (bs + 1) + c] = x;
      }
      __syncthreads();
      for (int r = warp; r < rows_here; r += nwarps) {
        float m = -INFINITY, l = 0.0f;
        for (int c = lane; c < bs; c += 32) {
          const float x = ss[r * (bs + 1) + c];
          if (x == -INFINITY) continue;
          if (x > m) {
            l = l * exp2f(m - x) + 1.0f;
            m = x;
          } else {
            l += exp2f(x - m);
          }
        }
        WarpReduceMaxSum(m, l);
        if (lane == 0) MergeMaxSum(row_m[r], row_l[r], m, l);
      }
      // The next tile's K load touches ks only; ss is rewritten after the barrier below it.
    }
    __syncthreads();

    // Pass 2: probabilities (zeros past each row's visible keys, up to k_len).
    for (int t0 = 0; t0 < a.k_len; t0 += bs) {
      const bool any_visible = t0 < keys_needed;
      if (any_visible) {
        load_k_tile(t0);
        __syncthreads();
      }
      for (int e = tid; e < bm * bs; e += nthreads) {
        const int r = e / bs, c = e % bs;
        const int col = t0 + c;
        if (r >= rows_here || col >= a.k_len) continue;
        float p = 0.0f;
        if (any_visible && col < row_visible[r]) {
          const float x = Dot<D>(qs + r * kRow, ks + c * kRow) * a.scale_log2;
          p = exp2f(x - row_m[r]) / row_l[r];
        }
        pg[((entry * a.q_len) + first_i + r) * static_cast<int64_t>(a.ld) + col] = FromFloat<PT>(p);
      }
      if (any_visible) __syncthreads();  // before the next K tile overwrites ks
    }
    __syncthreads();  // shared memory is reused by the next row block
  }
}

template <int D, typename T, typename PT>
cudaError_t LaunchTyped(const PartialScoresArgs& a, cudaStream_t stream) {
  const int row_blocks = (a.q_len + a.block_m - 1) / a.block_m;
  const int64_t blocks = static_cast<int64_t>(a.sequences) * a.q_heads * row_blocks;
  if (blocks == 0 || a.k_len == 0) return cudaSuccess;
  const int64_t smem = PartialScoresSharedBytes(D, a.block_m, a.block_s);
  auto kernel = PartialScoresKernel<D, T, PT>;
  if (smem > 48 * 1024) {
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess) {
      return e;
    }
  }
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 24) ? blocks : (int64_t{1} << 24));
  kernel<<<grid, a.threads, static_cast<size_t>(smem), stream>>>(a);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchForDim(const PartialScoresArgs& a, cudaStream_t stream) {
  // P shares the storage type for 16-bit inputs (the PV GEMM needs P and V of one type).
  switch (a.in_type) {
    case ElemType::kF32:
      return LaunchTyped<D, float, float>(a, stream);
    case ElemType::kF16:
      return LaunchTyped<D, __half, __half>(a, stream);
    case ElemType::kBf16:
      return LaunchTyped<D, __nv_bfloat16, __nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int64_t PartialScoresSharedBytes(int head_dim, int block_m, int block_s) {
  const int64_t row = head_dim + 4;
  return 4 * ((static_cast<int64_t>(block_m) + block_s) * row +
              static_cast<int64_t>(block_m) * (block_s + 1) + 3 * static_cast<int64_t>(block_m));
}

cudaError_t LaunchPartialScores(const PartialScoresArgs& args, cudaStream_t stream) {
  if (args.p_type != args.in_type) return cudaErrorInvalidValue;
  if (args.head_dim == 64) return LaunchForDim<64>(args, stream);
  if (args.head_dim == 128) return LaunchForDim<128>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace fusetune::cuda
