// Hopper (sm_90a) path of the fp16/bf16 fused kernel: the same algorithm, tiles, masks and
// pipeline as fused_mma.cuh, with the two products on wgmma (warpgroup MMA) instead of
// mma.sync. LaunchMma routes eligible configs (16 rows per warp, block_s 64 or 128) here only
// when FUSETUNE_FUSED_WGMMA=1 and the device is sm_90 (see WgmmaEnabled); on the sm_80 build
// the kernel body is empty.
//
// Each warpgroup (4 warps) owns 64 query rows. Shared memory holds Q, K and V in the canonical
// no-swizzle "core matrix" layout (8 rows x 16 bytes contiguous per core matrix): S = Q K^T is
// an SS wgmma (both operands K-major, from descriptors); O += P V is an RS wgmma with P in
// registers (the S accumulator layout per warp is the mma.sync one, so P packs exactly as
// there) and V as an MN-major (transposed) descriptor. The cp.async loader writes whole core
// matrices with 8 consecutive lanes (conflict-free), and each thread fences the async proxy
// before the barrier that publishes a tile to wgmma.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_

#include <cmath>
#include <type_traits>

#include "fused_common.cuh"
#include "fused_simt.cuh"  // FastExp2
#include "fused_wgmma_ops.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSETUNE_FUSED_WGMMA_ENABLED 1
#endif

namespace fusetune::cuda::fused {

template <typename T, int D, int BM, int BS, int W>
constexpr bool WgmmaEligible() {
  return sizeof(T) == 2 && BM == 16 * W && BM % 64 == 0 && (BS == 64 || BS == 128) &&
         (D == 64 || D == 128);
}

// Byte offset of element (r, c) in a [rows][D] 16-bit tile stored as core matrices:
// core matrix (r/8, c/8) at ((r/8) * D/8 + c/8) * 128, row r%8 at +16 * (r%8).
template <int D>
__device__ __forceinline__ uint32_t CoreMatrixOffset(int r, int c) {
  return ((r >> 3) * (D / 8) + (c >> 3)) * 128 + (r & 7) * 16 + (c & 7) * 2;
}

// Loads kRows x D (16-bit) into the core-matrix layout; 8 consecutive lanes fill one core
// matrix (128 contiguous bytes), rows >= valid_rows are zero-filled.
template <typename T, int kRows, int D, int kThreads>
__device__ __forceinline__ void LoadCoreMatrixTileAsync(unsigned char* dst, const T* src,
                                                        int64_t row_stride, int valid_rows,
                                                        int tid) {
  constexpr int kChunks = kRows * D / 8;
#pragma unroll
  for (int ci = tid; ci < kChunks; ci += kThreads) {
    const int r8 = ci & 7;
    const int c = (ci >> 3) % (D / 8);
    const int rg = (ci >> 3) / (D / 8);
    const int r = rg * 8 + r8;
    const bool pred = r < valid_rows;
    const T* s = pred ? src + r * row_stride + c * 8 : src;
    CpAsync16(dst + (rg * (D / 8) + c) * 128 + r8 * 16, s, pred);
  }
}

__device__ __forceinline__ uint64_t SmemDescriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32);  // no swizzle, base offset 0
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads)
    FusedWgmmaKernel(const FusedKernelArgs a) {
#if defined(FUSETUNE_FUSED_WGMMA_ENABLED)
  using T = typename Tr::Storage;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, NTILES = BS / 8, DTILES = D / 8;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int kTileBytesPerRow = D * 2;

  extern __shared__ __align__(128) unsigned char wgmma_smem[];
  unsigned char* sQ = wgmma_smem;
  unsigned char* sK = sQ + BM * kTileBytesPerRow;
  unsigned char* sV = sK + ST * BS * kTileBytesPerRow;

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
  const int warp = tid / 32, lane = tid % 32;
  const int gr = lane / 4, tc = lane % 4;
  const int warpgroup = warp / 4;
  const int warp_row0 = warp * 16;  // rows of this warp within the block

  const int max_vis = VisibleKeys(g, causal, m0 + q_rows - 1);
  const int min_vis = VisibleKeys(g, causal, m0);
  const int n_tiles = CeilDiv(max_vis, BS);
  const int n_unmasked = min_vis / BS;

  if (n_tiles == 0) {
    constexpr int kChunksPerRow = D / 8;
    for (int c = tid; c < q_rows * kChunksPerRow; c += NT) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      *reinterpret_cast<uint4*>(o_ptr + r * a.o_row_stride + col) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  LoadCoreMatrixTileAsync<T, BM, D, NT>(sQ, q_ptr, a.q_row_stride, q_rows, tid);
  CpAsyncCommit();
  auto load_k = [&](int tile, int buf) {
    const int key0 = tile * BS;
    LoadCoreMatrixTileAsync<T, BS, D, NT>(sK + buf * BS * kTileBytesPerRow,
                                          k_ptr + key0 * a.k_row_stride, a.k_row_stride,
                                          min(BS, g.k_vis - key0), tid);
  };
  auto load_v = [&](int tile, int buf) {
    const int key0 = tile * BS;
    LoadCoreMatrixTileAsync<T, BS, D, NT>(sV + buf * BS * kTileBytesPerRow,
                                          v_ptr + key0 * a.v_row_stride, a.v_row_stride,
                                          min(BS, g.k_vis - key0), tid);
  };
  if constexpr (ST == 1) {
    load_k(0, 0);
    CpAsyncCommit();
    load_v(0, 0);
    CpAsyncCommit();
  } else {
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < n_tiles) {
        load_k(s, s);
        load_v(s, s);
      }
      CpAsyncCommit();
    }
  }

  int row_vis[2];
  float m_run[2], l_run[2];
  float acc[DTILES][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_vis[r] = VisibleKeys(g, causal, m0 + warp_row0 + gr + 8 * r);
    m_run[r] = -INFINITY;
    l_run[r] = 0.f;
  }
#pragma unroll
  for (int dt = 0; dt < DTILES; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;
  const float c_log2 = a.scale_log2;
  const uint32_t sQ_addr = SmemAddress(sQ) + warpgroup * 64 * kTileBytesPerRow;
  const uint32_t sK_addr = SmemAddress(sK);
  const uint32_t sV_addr = SmemAddress(sV);
  // K-major (Q, K): leading = next 8 columns (128 B), stride = next 8 rows (D * 16 B).
  constexpr uint32_t kLboK = 128, kSboK = D * 16;
  // MN-major V: leading = next 8 keys (the K dimension, D * 16 B), stride = next 8 columns of
  // head_dim (the N dimension, 128 B). (The swapped assignment faults: measured 2026-11-29.)
  constexpr uint32_t kLboV = D * 16, kSboV = 128;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j % ST;
    if constexpr (ST == 1) {
      if (j == 0) {
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      FenceProxyAsyncShared();
      __syncthreads();
      if (j > 0) load_v(j, 0);
      CpAsyncCommit();
    } else {
      CpAsyncWait<(ST >= 2 ? ST - 2 : 0)>();
      FenceProxyAsyncShared();
      __syncthreads();
      const int jn = j + ST - 1;
      if (jn < n_tiles) {
        load_k(jn, jn % ST);
        load_v(jn, jn % ST);
      }
      CpAsyncCommit();
    }

    // S = Q K^T on the warpgroup's 64 rows.
    float s[NTILES][4];
#pragma unroll
    for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
    const uint32_t k_tile = sK_addr + buf * BS * kTileBytesPerRow;
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      Wgmma<BS, kBf16>::SS(s, SmemDescriptor(sQ_addr + ks * 256, kLboK, kSboK),
                           SmemDescriptor(k_tile + ks * 256, kLboK, kSboK), ks > 0 ? 1 : 0);
    }
    WgmmaCommit();
    WgmmaWait<0>();

    if (j >= n_unmasked) {
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = j * BS + nt * 8 + 2 * tc + (e % 2);
          if (key >= row_vis[e / 2]) s[nt][e] = -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_scaled = m_new == -INFINITY ? 0.f : m_new * c_log2;
      const float alpha = FastExp2(m_run[r] * c_log2 - m_scaled);
      m_run[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const float p = FastExp2(fmaf(s[nt][e], c_log2, -m_scaled));
          s[nt][e] = p;
          sum += p;
        }
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < DTILES; ++dt) {
        acc[dt][2 * r] *= alpha;
        acc[dt][2 * r + 1] *= alpha;
      }
    }

    if constexpr (ST == 1) {
      CpAsyncWait<0>();
      FenceProxyAsyncShared();
      __syncthreads();
      if (j + 1 < n_tiles) load_k(j + 1, 0);
      CpAsyncCommit();
    }

    // O += P V: P from registers, V (keys x head_dim, head_dim contiguous) as MN-major B.
    const uint32_t v_tile = sV_addr + buf * BS * kTileBytesPerRow;
    uint32_t pa[BS / 16][4];
#pragma unroll
    for (int kk = 0; kk < BS / 16; ++kk) {
      pa[kk][0] = PackPair<T>(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = PackPair<T>(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < BS / 16; ++kk) {
      // 16 keys = two 8-row core-matrix groups.
      Wgmma<D, kBf16>::RSTrans(acc, pa[kk], SmemDescriptor(v_tile + kk * 2 * D * 16, kLboV, kSboV));
    }
    WgmmaCommit();
    WgmmaWait<0>();
  }
  CpAsyncWait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = warp_row0 + gr + 8 * r;
    if (row < q_rows) {
      T* out = o_ptr + row * a.o_row_stride + 2 * tc;
#pragma unroll
      for (int dt = 0; dt < DTILES; ++dt) StorePair<T>(out + dt * 8, acc[dt][2 * r] * inv, acc[dt][2 * r + 1] * inv);
    }
  }
#else
  __trap();  // never launched: LaunchMma selects this kernel only on sm_90 with sm_90a code
#endif
}

// Whether LaunchMma routes eligible configs to the wgmma kernel: only when the environment
// variable FUSETUNE_FUSED_WGMMA=1 is set and the current device is sm_90 (read once per
// process). Off by default: correct (all dev-driver checks pass) but, without producer/consumer
// overlap, slower than the mma.sync kernel on the H200 (docs/perf.md).
bool WgmmaEnabled();

template <class Tr>
cudaError_t LaunchWgmma(const FusedKernelArgs& a, cudaStream_t stream) {
  constexpr int smem = (Tr::kBlockM + 2 * Tr::kStages * Tr::kBlockS) * Tr::kHeadDim * 2;
  auto kernel = FusedWgmmaKernel<Tr>;
  if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedWgmmaKernel<Tr>>(smem); e != cudaSuccess) {
    return e;
  }
  const dim3 grid(CeilDiv(a.q_len, Tr::kBlockM), a.q_heads, a.batch);
  kernel<<<grid, Tr::kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_
