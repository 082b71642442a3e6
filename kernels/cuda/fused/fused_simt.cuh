// Fused attention forward on CUDA cores in exact fp32 (every product and sum is an fp32 FMA;
// storage of any dtype is converted to fp32 on load).
//
// Block: block_m query rows of one (sequence, head); TX x TY threads (TX = 8 or 16 threads
// per row, chosen so a thread owns 8 rows where possible). Thread (tx, ty) owns query rows
// ty + TY*i (i < TM) and, for S = Q K^T, keys tx + TX*j (j < TN); for O it owns column chunks
// tx*4 + 4*TX*c. The TX lanes of a row are consecutive, so row max/sum reductions are
// shuffles within TX lanes. P goes through shared memory between the
// two products. K/V tiles stream through `stages` cp.async buffers (zero-filled tails);
// Q is converted to fp32 once. Strided key ownership + padded rows keep shared-memory reads
// free of bank conflicts (see README.md).
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_

#include <cmath>

#include "fused_common.cuh"

namespace fusetune::cuda::fused {

__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <typename T, int D, int BM, int BS, int W, int ST>
struct SimtTraits {
  using Storage = T;
  static constexpr int kHeadDim = D, kBlockM = BM, kBlockS = BS, kWarps = W, kStages = ST;
  static constexpr int kThreads = 32 * W;
  // Threads sharing a query row (8 or 16): chosen so that each thread owns 8 rows when the
  // block allows it (a larger register tile means fewer shared-memory loads per FMA).
  static constexpr int kTx = kThreads * 8 / BM < 8 ? 8 : (kThreads * 8 / BM > 16 ? 16 : kThreads * 8 / BM);
  static constexpr int kRowThreads = kThreads / kTx;  // ty extent
  static constexpr int kTm = BM / kRowThreads;        // rows per thread
  static constexpr int kTn = BS / kTx;                // keys per thread
  static constexpr int kDChunks = D / (4 * kTx);      // float4 output chunks per thread
  static constexpr int kQPitch = D + 4;               // fp32 elements
  static constexpr int kKvPitch = D + 16 / static_cast<int>(sizeof(T));
  // Rows of P written by one warp land on disjoint banks.
  static constexpr int kPPitch = BS + (kTx == 8 ? 8 : 16);
  static constexpr int kSmemBytes = BM * kQPitch * 4 +
                                    2 * ST * BS * kKvPitch * static_cast<int>(sizeof(T)) +
                                    BM * kPPitch * 4;
  static_assert(BM % kRowThreads == 0, "block_m must be a multiple of 2*warps");
  static_assert(kTx == 8 || kTx == 16, "8 or 16 threads per row");
  static_assert(BS % kTx == 0 && BS % 4 == 0, "block_s must be a multiple of the row threads");
  static_assert(D % (4 * kTx) == 0, "head_dim must be a multiple of 4 * row threads");
  static_assert(ST >= 1 && ST <= 4, "stages in [1, 4]");
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads)
    FusedSimtKernel(const FusedKernelArgs a) {
  using T = typename Tr::Storage;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, TX = Tr::kTx, TY = Tr::kRowThreads, TM = Tr::kTm, TN = Tr::kTn;
  constexpr int DC = Tr::kDChunks, QP = Tr::kQPitch, KP = Tr::kKvPitch, PP = Tr::kPPitch;

  extern __shared__ __align__(16) unsigned char simt_smem[];
  float* sQ = reinterpret_cast<float*>(simt_smem);
  T* sK = reinterpret_cast<T*>(sQ + BM * QP);
  T* sV = sK + ST * BS * KP;
  float* sP = reinterpret_cast<float*>(sV + ST * BS * KP);

  const bool causal = a.causal != 0;
  const SequenceGeometry g = LoadSequenceGeometry(a, blockIdx.z);
  const int m0 = QueryBlockIndex(causal) * BM;
  if (m0 >= g.q_len) return;
  const int q_rows = min(BM, g.q_len - m0);
  const int head = blockIdx.y;
  const int kv_head = head / a.heads_per_kv;
  const T* q_ptr = static_cast<const T*>(a.q) + (g.q_start + m0) * a.q_row_stride +
                   static_cast<int64_t>(head) * a.q_head_stride;
  const T* k_ptr = static_cast<const T*>(a.k) + g.k_start * a.k_row_stride +
                   static_cast<int64_t>(kv_head) * a.k_head_stride;
  const T* v_ptr = static_cast<const T*>(a.v) + g.k_start * a.v_row_stride +
                   static_cast<int64_t>(kv_head) * a.v_head_stride;
  T* o_ptr = static_cast<T*>(a.o) + (g.q_start + m0) * a.o_row_stride +
             static_cast<int64_t>(head) * a.o_head_stride;

  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const int max_vis = VisibleKeys(g, causal, m0 + q_rows - 1);
  const int min_vis = VisibleKeys(g, causal, m0);
  const int n_tiles = CeilDiv(max_vis, BS);
  const int n_unmasked = min_vis / BS;  // tiles every row of the block sees completely

  if (n_tiles == 0) {  // no row of this block sees a key: zeros, never NaN
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ty + TY * i;
      if (r < q_rows) {
#pragma unroll
        for (int c = 0; c < DC; ++c) {
          Store4FromFloat<T>(o_ptr + r * a.o_row_stride + tx * 4 + 4 * TX * c,
                             make_float4(0.f, 0.f, 0.f, 0.f));
        }
      }
    }
    return;
  }

  auto load_k = [&](int tile, int buf) {
    const int key0 = tile * BS;
    const int valid = min(BS, g.k_vis - key0);
    LoadTileAsync<T, BS, D, KP, NT>(sK + buf * BS * KP, k_ptr + key0 * a.k_row_stride,
                                    a.k_row_stride, valid, tid);
  };
  auto load_v = [&](int tile, int buf) {
    const int key0 = tile * BS;
    const int valid = min(BS, g.k_vis - key0);
    LoadTileAsync<T, BS, D, KP, NT>(sV + buf * BS * KP, v_ptr + key0 * a.v_row_stride,
                                    a.v_row_stride, valid, tid);
  };
  auto load_kv = [&](int tile, int buf) {
    load_k(tile, buf);
    load_v(tile, buf);
  };
  if constexpr (ST == 1) {
    // One K and one V buffer (FlashAttention-2 order): V_j streams in during S_j and the
    // softmax, K_{j+1} during PV_j.
    load_k(0, 0);
    CpAsyncCommit();
    load_v(0, 0);
    CpAsyncCommit();
  } else {
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < n_tiles) load_kv(s, s);
      CpAsyncCommit();
    }
  }

  // Q -> fp32 shared memory (rows past the sequence are zeros).
  for (int c = tid; c < BM * (D / 4); c += NT) {
    const int r = c / (D / 4), col = (c % (D / 4)) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < q_rows) val = Load4AsFloat<T>(q_ptr + r * a.q_row_stride + col);
    *reinterpret_cast<float4*>(sQ + r * QP + col) = val;
  }

  int row_vis[TM];
  float m_run[TM], l_run[TM], acc[TM][DC * 4];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    row_vis[i] = VisibleKeys(g, causal, m0 + ty + TY * i);
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
#pragma unroll
    for (int d = 0; d < DC * 4; ++d) acc[i][d] = 0.f;
  }
  const float c_log2 = a.scale_log2;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j % ST;
    if constexpr (ST == 1) {
      if (j == 0) {
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();  // K_j (and Q) resident; every warp is done with PV of tile j-1
      if (j > 0) load_v(j, 0);
      CpAsyncCommit();
    } else {
      CpAsyncWait<(ST >= 2 ? ST - 2 : 0)>();
      __syncthreads();  // tile j (and Q) resident; every warp is done with tile j-1
    }
    if constexpr (ST > 1) {
      const int jn = j + ST - 1;
      if (jn < n_tiles) load_kv(jn, jn % ST);
      CpAsyncCommit();
    }
    const T* k_s = sK + buf * BS * KP;
    const T* v_s = sV + buf * BS * KP;

    // S = Q K^T (unscaled; the scale is folded into the exponent).
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int n = 0; n < TN; ++n) s[i][n] = 0.f;
#pragma unroll 8
    for (int kk = 0; kk < D; kk += 4) {
      float4 qv[TM], kv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) qv[i] = *reinterpret_cast<const float4*>(sQ + (ty + TY * i) * QP + kk);
#pragma unroll
      for (int n = 0; n < TN; ++n) kv[n] = Load4AsFloat<T>(k_s + (tx + TX * n) * KP + kk);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int n = 0; n < TN; ++n) {
          s[i][n] = fmaf(qv[i].x, kv[n].x, s[i][n]);
          s[i][n] = fmaf(qv[i].y, kv[n].y, s[i][n]);
          s[i][n] = fmaf(qv[i].z, kv[n].z, s[i][n]);
          s[i][n] = fmaf(qv[i].w, kv[n].w, s[i][n]);
        }
    }

    if (j >= n_unmasked) {  // diagonal / padded tail tile: mask per row
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int n = 0; n < TN; ++n)
          if (j * BS + tx + TX * n >= row_vis[i]) s[i][n] = -INFINITY;
    }

    // Online softmax; each row lives in TX consecutive lanes.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float mx = s[i][0];
#pragma unroll
      for (int n = 1; n < TN; ++n) mx = fmaxf(mx, s[i][n]);
#pragma unroll
      for (int off = TX / 2; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run[i], mx);
      const float m_scaled = m_new == -INFINITY ? 0.f : m_new * c_log2;
      const float alpha = FastExp2(m_run[i] * c_log2 - m_scaled);
      m_run[i] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < TN; ++n) {
        const float p = FastExp2(fmaf(s[i][n], c_log2, -m_scaled));
        sP[(ty + TY * i) * PP + tx + TX * n] = p;
        sum += p;
      }
      l_run[i] = l_run[i] * alpha + sum;
#pragma unroll
      for (int d = 0; d < DC * 4; ++d) acc[i][d] *= alpha;
    }
    if constexpr (ST == 1) {
      CpAsyncWait<0>();
      __syncthreads();  // V_j resident and P complete; every warp is done with K_j
      if (j + 1 < n_tiles) load_k(j + 1, 0);
      CpAsyncCommit();
    } else {
      __syncthreads();  // P complete
    }

    // O += P V
#pragma unroll 2
    for (int kk = 0; kk < BS; kk += 4) {
      float4 pv[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) pv[i] = *reinterpret_cast<const float4*>(sP + (ty + TY * i) * PP + kk);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float4 vv[DC];
#pragma unroll
        for (int c = 0; c < DC; ++c) vv[c] = Load4AsFloat<T>(v_s + (kk + u) * KP + tx * 4 + 4 * TX * c);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const float p = u == 0 ? pv[i].x : u == 1 ? pv[i].y : u == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int c = 0; c < DC; ++c) {
            acc[i][c * 4 + 0] = fmaf(p, vv[c].x, acc[i][c * 4 + 0]);
            acc[i][c * 4 + 1] = fmaf(p, vv[c].y, acc[i][c * 4 + 1]);
            acc[i][c * 4 + 2] = fmaf(p, vv[c].z, acc[i][c * 4 + 2]);
            acc[i][c * 4 + 3] = fmaf(p, vv[c].w, acc[i][c * 4 + 3]);
          }
        }
      }
    }
  }
  CpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float l = l_run[i];
#pragma unroll
    for (int off = TX / 2; off >= 1; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int r = ty + TY * i;
    if (r < q_rows) {
#pragma unroll
      for (int c = 0; c < DC; ++c) {
        Store4FromFloat<T>(o_ptr + r * a.o_row_stride + tx * 4 + 4 * TX * c,
                           make_float4(acc[i][c * 4 + 0] * inv, acc[i][c * 4 + 1] * inv,
                                       acc[i][c * 4 + 2] * inv, acc[i][c * 4 + 3] * inv));
      }
    }
  }
}

template <class Tr>
cudaError_t LaunchSimt(const FusedKernelArgs& a, cudaStream_t stream) {
  auto kernel = FusedSimtKernel<Tr>;
  if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedSimtKernel<Tr>>(Tr::kSmemBytes); e != cudaSuccess) {
    return e;
  }
  const dim3 grid(CeilDiv(a.q_len, Tr::kBlockM), a.q_heads, a.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, int D, int BM, int BS, int W, int ST>
FusedInstance SimtInstance() {
  using Tr = SimtTraits<T, D, BM, BS, W, ST>;
  return FusedInstance{D,  StorageOf<T>(), PrecisionCode::kFp32, BM, BS, Tr::kThreads, ST,
                       Tr::kSmemBytes, &LaunchSimt<Tr>};
}

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_
