// The partial variant's first kernel: QK^T and softmax fused per block of query rows, P
// written to the workspace (the PV product is a cuBLAS GEMM afterwards).
//
// One thread block owns block_m query rows of one (sequence, q head). It streams the visible
// keys in tiles of block_s twice: the first pass keeps each row's running max and sum (online
// softmax, log2 domain), the second recomputes the scores and writes normalised
// probabilities.
//
// Scores are scaled once each, x = s * c rounded (__fmul_rn, c = scale * log2(e)), and both
// passes use that same rounded x, so the row max's probability is exp2(0) = 1 at any scale
// (a contracted fmaf(s, c, -m) in pass 2 against pass 1's rounded x differed by up to half an
// ulp of x: a wrong output from scale ~1e6, NaN at 1e10). The limit is fp32's range:
// |s| * c must stay below FLT_MAX (beyond, x is inf and the row NaN, never a plausible number). Recomputing costs a second QK^T but never stores S, which is what separates
// this variant from the materialized one.
//
// Two bodies: exact fp32 (SIMT FMAs; Q and K tiles as float rows padded by 4 floats, so
// 16-byte loads stay aligned and the 8 lanes of a 16-byte load phase hit distinct banks), and
// tensor cores through WMMA (fp16/bf16 inputs, or tf32 for fp32 inputs): each warp computes
// 16x16 sub-tiles of the score tile into shared memory, then the same softmax steps run.
#include "../gpu/gpu_runtime.h"
#if defined(FUSETUNE_GPU_CUDA)
#include <mma.h>  // WMMA: the tensor-core body is CUDA-only
#endif

#include <type_traits>

#include "baseline_kernels.h"
#include "device_common.cuh"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {
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

// A score in the exp2 domain, rounded once (never contracted into a later subtraction).
__device__ __forceinline__ float ScaledScore(float s, float c_log2) { return __fmul_rn(s, c_log2); }

// Online (max, sum of exp2(x - max)) over scaled scores x, per lane, then merged across the
// warp and into the row. x = -inf (masked, or an infinite key component against the query)
// contributes nothing; NaN makes l NaN.
__device__ __forceinline__ void AddScaledScore(float& m, float& l, float x) {
  if (x == -INFINITY) return;
  if (x > m) {
    l = l * exp2f(m - x) + 1.0f;
    m = x;
  } else {
    l += exp2f(x - m);
  }
}
__device__ __forceinline__ void MergeScaledMaxSum(float& m, float& l, float m2, float l2) {
  if (!(l == l) || !(l2 == l2)) {  // a NaN score: the row is NaN
    l = NAN;
    return;
  }
  const float m_new = fmaxf(m, m2);
  if (m_new == -INFINITY) return;  // both empty
  l = (m == -INFINITY ? 0.0f : l * exp2f(m - m_new)) + (m2 == -INFINITY ? 0.0f : l2 * exp2f(m2 - m_new));
  m = m_new;
}
__device__ __forceinline__ void WarpReduceScaledMaxSum(float& m, float& l) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = gpu::ShflXor(m, offset);
    const float l2 = gpu::ShflXor(l, offset);
    MergeScaledMaxSum(m, l, m2, l2);
  }
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
      // A warp per row, a lane per key: no run-time division, Q row broadcast, K rows padded.
      for (int r = warp; r < bm; r += nwarps) {
        for (int c = lane; c < bs; c += 32) {
          float x = -INFINITY;
          if (t0 + c < row_visible[r]) x = ScaledScore(Dot<D>(qs + r * kRow, ks + c * kRow), a.scale_log2);
          ss[r * (bs + 1) + c] = x;
        }
      }
      __syncthreads();
      for (int r = warp; r < rows_here; r += nwarps) {
        float m = -INFINITY, l = 0.0f;
        for (int c = lane; c < bs; c += 32) AddScaledScore(m, l, ss[r * (bs + 1) + c]);
        WarpReduceScaledMaxSum(m, l);
        if (lane == 0) MergeScaledMaxSum(row_m[r], row_l[r], m, l);
      }
      // The next tile's K load touches ks only; ss is rewritten after the barrier below it.
    }
    __syncthreads();

    // 1/l (0 for a row of only -inf scores: zeros; NaN stays NaN) and the shift (0 for such a
    // row, so its -inf scores give exp2(-inf) = 0, not NaN).
    for (int r = tid; r < bm; r += nthreads) {
      row_l[r] = InverseOfSum(row_l[r]);
      if (row_m[r] == -INFINITY) row_m[r] = 0.0f;
    }
    __syncthreads();

    // Pass 2: probabilities (zeros past each row's visible keys, up to k_len).
    for (int t0 = 0; t0 < a.k_len; t0 += bs) {
      const bool any_visible = t0 < keys_needed;
      if (any_visible) {
        load_k_tile(t0);
        __syncthreads();
      }
      for (int r = warp; r < rows_here; r += nwarps) {
        PT* p_row = pg + ((entry * a.q_len) + first_i + r) * static_cast<int64_t>(a.ld);
        for (int c = lane; c < bs && t0 + c < a.k_len; c += 32) {
          const int col = t0 + c;
          float p = 0.0f;
          if (any_visible && col < row_visible[r]) {
            const float x = ScaledScore(Dot<D>(qs + r * kRow, ks + c * kRow), a.scale_log2);
            p = exp2f(x - row_m[r]) * row_l[r];  // row_l holds 1/sum by now
          }
          p_row[col] = FromFloat<PT>(p);
        }
      }
      if (any_visible) __syncthreads();  // before the next K tile overwrites ks
    }
    __syncthreads();  // shared memory is reused by the next row block
  }
}


#if defined(FUSETUNE_GPU_CUDA)
namespace wmma = nvcuda::wmma;

// WMMA fragment types per storage type: 16x16x16 for fp16/bf16, 16x16x8 tf32 for fp32.
template <typename T>
struct MmaTraits;
template <>
struct MmaTraits<__half> {
  using Frag = __half;
  static constexpr int kK = 16;
};
template <>
struct MmaTraits<__nv_bfloat16> {
  using Frag = __nv_bfloat16;
  static constexpr int kK = 16;
};
template <>
struct MmaTraits<float> {
  using Frag = wmma::precision::tf32;
  static constexpr int kK = 8;
};

// Shared-memory row length (elements) of the Q/K tiles on the tensor-core path: 16 bytes of
// padding keeps WMMA's 32-byte fragment alignment for every 16-row sub-tile.
template <int D, typename T>
__host__ __device__ constexpr int MmaTileLd() {
  return D + static_cast<int>(16 / sizeof(T));
}

template <int D, typename T, typename PT>
__global__ void __launch_bounds__(kPartialMaxThreads) PartialScoresMmaKernel(PartialScoresArgs a) {
  using Traits = MmaTraits<T>;
  constexpr int kLd = MmaTileLd<D, T>();
  extern __shared__ float4 smem4[];
  const int bm = a.block_m, bs = a.block_s;
  const int ss_ld = bs + 4;
  char* base = reinterpret_cast<char*>(smem4);
  T* qs = reinterpret_cast<T*>(base);                                    // [bm][kLd]
  T* ks = reinterpret_cast<T*>(base + sizeof(T) * bm * kLd);            // [bs][kLd]
  float* ss = reinterpret_cast<float*>(base + sizeof(T) * (bm + bs) * kLd);  // [bm][ss_ld]
  float* row_m = ss + bm * ss_ld;
  float* row_l = row_m + bm;
  int* row_visible = reinterpret_cast<int*>(row_l + bm);

  const T* qg = static_cast<const T*>(a.q);
  const T* kg = static_cast<const T*>(a.k);
  PT* pg = static_cast<PT*>(a.probs);
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int warp = tid >> 5, lane = tid & 31, nwarps = nthreads >> 5;
  const int row_blocks = (a.q_len + bm - 1) / bm;
  const int64_t blocks = static_cast<int64_t>(a.sequences) * a.q_heads * row_blocks;
  const int group = a.q_heads / a.kv_heads;
  const int tiles_n = bs / 16, tiles = (bm / 16) * tiles_n;

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
    const T zero = FromFloat<T>(0.0f);

    for (int e = tid; e < bm * D; e += nthreads) {
      const int r = e / D, x = e % D;
      qs[r * kLd + x] = r < rows_here ? qg[(q_row0 + r) * q_tok_stride + h * D + x] : zero;
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
    const int keys_needed = row_visible[rows_here - 1];

    // Loads keys [t0, t0 + bs) and leaves the raw scores Q.K^T of the tile in ss.
    auto score_tile = [&](int t0) {
      for (int e = tid; e < bs * D; e += nthreads) {
        const int c = e / D, x = e % D;
        ks[c * kLd + x] = t0 + c < a.k_len ? kg[(k_row0 + t0 + c) * k_tok_stride + kvh * D + x] : zero;
      }
      __syncthreads();
      for (int t = warp; t < tiles; t += nwarps) {
        const int tr = t / tiles_n, tc = t % tiles_n;
        wmma::fragment<wmma::accumulator, 16, 16, Traits::kK, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D; kk += Traits::kK) {
          wmma::fragment<wmma::matrix_a, 16, 16, Traits::kK, typename Traits::Frag, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, Traits::kK, typename Traits::Frag, wmma::col_major> fb;
          wmma::load_matrix_sync(fa, qs + tr * 16 * kLd + kk, kLd);
          wmma::load_matrix_sync(fb, ks + tc * 16 * kLd + kk, kLd);
          if constexpr (std::is_same_v<T, float>) {
#pragma unroll
            for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
#pragma unroll
            for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
          }
          wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(ss + tr * 16 * ss_ld + tc * 16, acc, ss_ld, wmma::mem_row_major);
      }
      __syncthreads();
    };

    // Pass 1: row max and sum.
    for (int t0 = 0; t0 < keys_needed; t0 += bs) {
      score_tile(t0);
      for (int r = warp; r < rows_here; r += nwarps) {
        float m = -INFINITY, l = 0.0f;
        for (int c = lane; c < bs; c += 32) {
          if (t0 + c < row_visible[r]) AddScaledScore(m, l, ScaledScore(ss[r * ss_ld + c], a.scale_log2));
        }
        WarpReduceScaledMaxSum(m, l);
        if (lane == 0) MergeScaledMaxSum(row_m[r], row_l[r], m, l);
      }
      __syncthreads();  // ss and ks are rewritten by the next tile
    }

    // 1/l (0 for a row of only -inf scores: zeros; NaN stays NaN) and the shift (0 for such a
    // row, so its -inf scores give exp2(-inf) = 0, not NaN).
    for (int r = tid; r < bm; r += nthreads) {
      row_l[r] = InverseOfSum(row_l[r]);
      if (row_m[r] == -INFINITY) row_m[r] = 0.0f;
    }
    __syncthreads();

    // Pass 2: probabilities (zeros past each row's visible keys, up to k_len).
    for (int t0 = 0; t0 < a.k_len; t0 += bs) {
      const bool any_visible = t0 < keys_needed;
      if (any_visible) score_tile(t0);
      for (int r = warp; r < rows_here; r += nwarps) {
        PT* p_row = pg + ((entry * a.q_len) + first_i + r) * static_cast<int64_t>(a.ld);
        for (int c = lane; c < bs && t0 + c < a.k_len; c += 32) {
          const int col = t0 + c;
          float p = 0.0f;
          if (any_visible && col < row_visible[r]) {
            p = exp2f(ScaledScore(ss[r * ss_ld + c], a.scale_log2) - row_m[r]) * row_l[r];  // row_l = 1/sum
          }
          p_row[col] = FromFloat<PT>(p);
        }
      }
      if (any_visible) __syncthreads();
    }
    __syncthreads();
  }
}

#endif  // FUSETUNE_GPU_CUDA

template <int D, typename T, typename PT>
cudaError_t LaunchTyped(const PartialScoresArgs& a, cudaStream_t stream) {
  const int row_blocks = (a.q_len + a.block_m - 1) / a.block_m;
  const int64_t blocks = static_cast<int64_t>(a.sequences) * a.q_heads * row_blocks;
  if (blocks == 0 || a.k_len == 0) return cudaSuccess;
  const int64_t smem = PartialScoresSharedBytes(D, a.block_m, a.block_s, a.in_type, a.tensor_cores);
  if (a.tensor_cores && (a.block_m % 16 != 0 || a.block_s % 16 != 0)) return cudaErrorInvalidValue;
#if defined(FUSETUNE_GPU_CUDA)
  auto kernel = a.tensor_cores ? PartialScoresMmaKernel<D, T, PT> : PartialScoresKernel<D, T, PT>;
#else
  if (a.tensor_cores) return cudaErrorNotSupported;  // WMMA only
  auto kernel = PartialScoresKernel<D, T, PT>;
#endif
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
      return LaunchTyped<D, gpu::Bf16, gpu::Bf16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int64_t PartialScoresSharedBytes(int head_dim, int block_m, int block_s, ElemType in_type,
                                 bool tensor_cores) {
  const int64_t bm = block_m, bs = block_s;
  if (tensor_cores) {
    const int64_t elem = in_type == ElemType::kF32 ? 4 : 2;
    const int64_t row = head_dim + 16 / elem;
    return elem * (bm + bs) * row + 4 * (bm * (bs + 4) + 3 * bm);
  }
  const int64_t row = head_dim + 4;
  return 4 * ((bm + bs) * row + bm * (bs + 1) + 3 * bm);
}

cudaError_t LaunchPartialScores(const PartialScoresArgs& args, cudaStream_t stream) {
  if (args.p_type != args.in_type) return cudaErrorInvalidValue;
  if (args.head_dim == 64) return LaunchForDim<64>(args, stream);
  if (args.head_dim == 128) return LaunchForDim<128>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE
