// Device helpers shared by the SIMT and tensor-core fused kernels: sequence geometry and masks,
// cp.async tile loads with zero-filled tails, storage-type conversions.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_COMMON_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_COMMON_CUH_

#include <atomic>
#include <cstdint>

#include "../../gpu/gpu_runtime.h"
#include "device_common.cuh"  // ToFloat/FromFloat, shared with the baselines
#include "fused_instance.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused {

// Geometry of one sequence of the batch (uniform or varlen), with key padding applied.
struct SequenceGeometry {
  int64_t q_start = 0;  // first query token (row of Q/O)
  int64_t k_start = 0;  // first key token (row of K/V)
  int q_len = 0;
  int k_len = 0;   // keys stored
  int k_vis = 0;   // keys visible (k_len minus padding)
};

// `Args` is any kernel argument block with the fields below (FusedKernelArgs; the decode
// family's DecodeKernelArgs).
template <class Args>
__device__ __forceinline__ SequenceGeometry LoadSequenceGeometry(const Args& a, int b) {
  SequenceGeometry g;
  if (a.cu_seqlens_q != nullptr) {
    const int q0 = a.cu_seqlens_q[b], q1 = a.cu_seqlens_q[b + 1];
    const int k0 = a.cu_seqlens_k[b], k1 = a.cu_seqlens_k[b + 1];
    g.q_start = q0;
    g.q_len = q1 - q0;
    g.k_start = k0;
    g.k_len = k1 - k0;
  } else {
    g.q_start = static_cast<int64_t>(b) * a.q_len;
    g.q_len = a.q_len;
    g.k_start = static_cast<int64_t>(b) * a.kv_len;
    g.k_len = a.kv_len;
  }
  g.k_vis = g.k_len;
  if (a.kv_valid_lens != nullptr) g.k_vis = max(0, min(a.kv_valid_lens[b], g.k_len));
  return g;
}

// Keys [0, result) are visible to query i of the sequence (problem.h: causal is bottom-right
// aligned, query i sees keys j <= i + (k - q)).
__device__ __forceinline__ int VisibleKeys(const SequenceGeometry& g, bool causal, int i) {
  if (!causal) return g.k_vis;
  return max(0, min(g.k_vis, i + g.k_vis - g.q_len + 1));
}

using gpu::FastExp2;

// score(n) = exp2(e(score(n))) for n < kN, e relative to the row's shift `e` (ExpShift in
// device_common.cuh: one FFMA per score in the common folded mode); returns their sum. The exact
// mode first subtracts m in place and then runs the same FFMA with r = 0, fmaf(s - m, c, 0) =
// (s - m) * c, so the hot loop exists once.
template <int kN, class ScoreRef>
__device__ __forceinline__ float ExpShiftedAndSum(ScoreRef&& score, const ExpShift& e, float c_log2) {
  if (!e.folded) {
#pragma unroll
    for (int n = 0; n < kN; ++n) score(n) -= e.m;
  }
  const float r = e.folded ? e.r : 0.f;
  float sum = 0.f;
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    float& x = score(n);
    x = FastExp2(fmaf(x, c_log2, -r));
    sum += x;
  }
  return sum;
}

// One row's online-softmax step for a key tile (FlashAttention's update in the exp2 domain, the
// running max m kept in score units): the kN scores score(0..kN-1) this thread holds for the
// row (masked ones already -inf) become probabilities exp2(e(s)); the row max is reduced over
// the kLanes consecutive lanes that share the row (xor shuffles); m and this thread's partial l
// are updated. Returns alpha = exp2(R(m_old) - R(m_new)), the factor the row's O must be scaled
// by. A row that has seen no key keeps m = -inf and gets p = 0 and alpha = 0, never NaN.
// `score(n)` returns a float& into the caller's accumulator layout.
template <int kN, int kLanes, class ScoreRef>
__device__ __forceinline__ float OnlineSoftmaxRow(ScoreRef&& score, float& m_run, float& l_run,
                                                  float c_log2) {
  float mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < kN; ++n) mx = fmaxf(mx, score(n));
#pragma unroll
  for (int off = kLanes / 2; off >= 1; off >>= 1) mx = fmaxf(mx, gpu::ShflXor(mx, off));
  const float m_new = fmaxf(m_run, mx);
  const ExpShift to = ExpShiftOfMax(m_new, c_log2);
  const float alpha = FastExp2(RescaleExponent(MakeExpShift(m_run, c_log2), to, c_log2));
  m_run = m_new;
  l_run = l_run * alpha + ExpShiftedAndSum<kN>(score, to, c_log2);
  return alpha;
}

// ---- cp.async (sm_80+; a plain copy on HIP: gpu_runtime.h) ----------------------------------

using gpu::CpAsyncCommit;
using gpu::CpAsyncWait;
using gpu::SmemAddress;

// Copies 16 bytes global -> shared, or writes 16 zero bytes when !pred (the source is then
// not read; `src` must still be a valid address).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool pred) {
  gpu::CpAsync16(SmemAddress(dst), src, pred);
}

// Loads `kRows` rows of `kCols` elements (row r at `src + r * row_stride`) into shared memory
// with row pitch `kPitch` elements; rows >= valid_rows are zero-filled (tails, masked keys).
template <typename T, int kRows, int kCols, int kPitch, int kThreads>
__device__ __forceinline__ void LoadTileAsync(T* dst, const T* src, int64_t row_stride,
                                              int valid_rows, int tid) {
  constexpr int kChunksPerRow = kCols * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
  for (int c = tid; c < kChunks; c += kThreads) {
    const int r = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * kElemsPerChunk;
    const bool pred = r < valid_rows;
    const T* s = pred ? src + r * row_stride + col : src;
    CpAsync16(dst + r * kPitch + col, s, pred);
  }
}

// cp.async copy of a kRows x kCols tile with a compile-time trip count: thread t copies rows
// t / kChunksPerRow + i * kRowStep at one fixed column (LoadTileAsync's runtime-bounded loop
// costs more integer instructions per tile than the copies themselves). Rows >= valid_rows are
// zero-filled.
template <typename T, int kRows, int kCols, int kPitch, int kThreads>
__device__ __forceinline__ void CopyTileAsync(T* dst, const T* src, int64_t row_stride, int valid_rows,
                                              int tid) {
  constexpr int kChunksPerRow = kCols * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  if constexpr (kThreads % kChunksPerRow != 0 || (kRows * kChunksPerRow) % kThreads != 0) {
    LoadTileAsync<T, kRows, kCols, kPitch, kThreads>(dst, src, row_stride, valid_rows, tid);
  } else {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    constexpr int kPerThread = kRows / kRowStep;
    const int row0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * kElemsPerChunk;
    const T* s = src + row0 * row_stride + col;
    T* d = dst + row0 * kPitch + col;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const bool pred = row0 + i * kRowStep < valid_rows;
      CpAsync16(d + i * kRowStep * kPitch, pred ? s + i * kRowStep * row_stride : src, pred);
    }
  }
}

// Pipeline prologue for any K/V loader with LoadK(tile, buf) / LoadV(tile, buf). ST == 1: K_0
// and V_0 as two commit groups (FlashAttention-2 order: V_j streams in during S_j and the
// softmax, K_{j+1} during PV_j). ST >= 2: the first ST - 1 tiles, one commit group each (empty
// groups past the last tile keep the counts uniform).
template <int ST, class Loader>
__device__ __forceinline__ void KvPipelinePrologue(const Loader& loader, int n_tiles) {
  if constexpr (ST == 1) {
    loader.LoadK(0, 0);
    CpAsyncCommit();
    loader.LoadV(0, 0);
    CpAsyncCommit();
  } else {
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
      if (s < n_tiles) {
        loader.LoadK(s, s);
        loader.LoadV(s, s);
      }
      CpAsyncCommit();
    }
  }
}

// Top of key tile j, before its first product: waits until K_j (ST == 1) or tile j (ST >= 2)
// is resident, a block barrier (Q is resident too and every warp is done with the buffers about
// to be refilled), then the next loads: V_j (ST == 1) or tile j + ST - 1 (ST >= 2).
template <int ST, class Loader>
__device__ __forceinline__ void KvPipelineEnterTile(const Loader& loader, int j, int n_tiles) {
  if constexpr (ST == 1) {
    if (j == 0) {
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (j > 0) loader.LoadV(j, 0);
    CpAsyncCommit();
  } else {
    CpAsyncWait<ST - 2>();
    __syncthreads();
    const int jn = j + ST - 1;
    if (jn < n_tiles) {
      loader.LoadK(jn, jn % ST);
      loader.LoadV(jn, jn % ST);
    }
    CpAsyncCommit();
  }
}

// Between the two products of tile j, for ST == 1 only (one K and one V buffer): waits for V_j,
// a block barrier (every warp is done with K_j; shared-memory P, where a kernel keeps it, is
// complete), then K_{j+1}. With ST >= 2 it does nothing: the kernel syncs its P itself.
template <int ST, class Loader>
__device__ __forceinline__ void KvPipelineBetweenProducts(const Loader& loader, int j, int n_tiles) {
  if constexpr (ST == 1) {
    CpAsyncWait<0>();
    __syncthreads();
    if (j + 1 < n_tiles) loader.LoadK(j + 1, 0);
    CpAsyncCommit();
  }
}

// The K/V side of the cp.async pipeline shared by the SIMT and mma.sync kernels: `ST` buffers
// of BS keys x D columns (row pitch kPitch elements) for K and for V, filled from the block's
// K/V head; keys past the visible ones are zero-filled (never garbage or padding NaN).
template <typename T, int BS, int D, int kPitch, int kThreads, int ST>
struct KvTileLoader {
  T* sK;
  T* sV;
  const T* k;  // key 0 of the block's K head (QueryBlock::k)
  const T* v;
  int64_t k_row_stride, v_row_stride;
  int k_vis;
  int tid;

  __device__ __forceinline__ void LoadK(int tile, int buf) const {
    const int key0 = tile * BS;
    CopyTileAsync<T, BS, D, kPitch, kThreads>(sK + buf * BS * kPitch, k + key0 * k_row_stride,
                                              k_row_stride, min(BS, k_vis - key0), tid);
  }
  __device__ __forceinline__ void LoadV(int tile, int buf) const {
    const int key0 = tile * BS;
    CopyTileAsync<T, BS, D, kPitch, kThreads>(sV + buf * BS * kPitch, v + key0 * v_row_stride,
                                              v_row_stride, min(BS, k_vis - key0), tid);
  }
  __device__ __forceinline__ void Prologue(int n_tiles) const {
    KvPipelinePrologue<ST>(*this, n_tiles);
  }
};

// ---- storage conversions: ToFloat / FromFloat come from device_common.cuh -------------------

// Four consecutive elements from shared memory as floats (16-byte or 8-byte load).
template <typename T>
__device__ __forceinline__ float4 Load4AsFloat(const T* p);
template <>
__device__ __forceinline__ float4 Load4AsFloat<float>(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
template <>
__device__ __forceinline__ float4 Load4AsFloat<__half>(const __half* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <>
__device__ __forceinline__ float4 Load4AsFloat<gpu::Bf16>(const gpu::Bf16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = gpu::Bf16x2ToFloat2(*reinterpret_cast<const gpu::Bf16x2*>(&raw.x));
  const float2 b = gpu::Bf16x2ToFloat2(*reinterpret_cast<const gpu::Bf16x2*>(&raw.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

// Stores four floats as four consecutive storage elements to global memory.
template <typename T>
__device__ __forceinline__ void Store4FromFloat(T* p, float4 v);
template <>
__device__ __forceinline__ void Store4FromFloat<float>(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
template <>
__device__ __forceinline__ void Store4FromFloat<__half>(__half* p, float4 v) {
  __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&a);
  raw.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}
template <>
__device__ __forceinline__ void Store4FromFloat<gpu::Bf16>(gpu::Bf16* p, float4 v) {
  gpu::Bf16x2 a = gpu::FloatsToBf16x2(v.x, v.y), b = gpu::FloatsToBf16x2(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&a);
  raw.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}

// Two floats as one packed 16-bit pair (lo in the low half), and a pair store.
template <typename T>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t PackPair<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t PackPair<gpu::Bf16>(float lo, float hi) {
  gpu::Bf16x2 h = gpu::FloatsToBf16x2(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T>
__device__ __forceinline__ void StorePair(T* p, float x, float y);
template <>
__device__ __forceinline__ void StorePair<float>(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
template <>
__device__ __forceinline__ void StorePair<__half>(__half* p, float x, float y) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
template <>
__device__ __forceinline__ void StorePair<gpu::Bf16>(gpu::Bf16* p, float x, float y) {
  *reinterpret_cast<gpu::Bf16x2*>(p) = gpu::FloatsToBf16x2(x, y);
}

template <typename T>
constexpr StorageCode StorageOf();
template <>
constexpr StorageCode StorageOf<float>() { return StorageCode::kFp32; }
template <>
constexpr StorageCode StorageOf<__half>() { return StorageCode::kFp16; }
template <>
constexpr StorageCode StorageOf<gpu::Bf16>() { return StorageCode::kBf16; }

// Grid: x = query blocks (the longest ones first when causal, so the tail of the grid holds
// the cheap blocks), y = query heads, z = sequences.
__host__ __device__ constexpr int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// Raises `kKernel`'s dynamic shared-memory limit to `smem_bytes` once per device (the
// attribute is per device; devices 0-63 are remembered, others set it at every launch).
// A failure is returned and retried at the next launch.
template <auto kKernel>
inline cudaError_t SetSharedMemoryLimitOnce(int smem_bytes) {
  static std::atomic<uint64_t> done{0};
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const uint64_t bit = device >= 0 && device < 64 ? (uint64_t{1} << device) : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e == cudaSuccess && bit != 0) done.fetch_or(bit, std::memory_order_release);
  return e;
}

__device__ __forceinline__ int QueryBlockIndex(bool causal) {
  return causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
}

// One block's share of the problem: query rows [m0, m0 + q_rows) of one (sequence, head), the
// bases of its Q/O rows and of its K/V head, and the key tiles it visits. Every fused kernel
// starts from this (grid: x = query blocks, y = query heads, z = sequences).
template <typename T>
struct QueryBlock {
  SequenceGeometry g;
  bool causal = false;
  int m0 = 0, q_rows = 0, head = 0, kv_head = 0, seq = 0;
  const T* q = nullptr;  // row m0 of this head
  const T* k = nullptr;  // key 0 of the kv head
  const T* v = nullptr;
  T* o = nullptr;        // row m0 of this head
  int n_tiles = 0;       // key tiles of `block_s` holding a key some row of the block sees
  int n_unmasked = 0;    // leading tiles every row sees completely (no per-element mask)
};

// The rest of a QueryBlock whose causal, g and m0 are set: its rows, head, bases and key tiles;
// false when the block starts past its sequence's queries.
template <typename T, int BM, int BS>
__device__ __forceinline__ bool LocateQueryRows(const FusedKernelArgs& a, int head, QueryBlock<T>& b) {
  if (b.m0 >= b.g.q_len) return false;
  b.q_rows = min(BM, b.g.q_len - b.m0);
  b.head = head;
  b.kv_head = b.head / a.heads_per_kv;
  b.q = static_cast<const T*>(a.q) + (b.g.q_start + b.m0) * a.q_row_stride +
        static_cast<int64_t>(b.head) * a.q_head_stride;
  b.k = static_cast<const T*>(a.k) + b.g.k_start * a.k_row_stride +
        static_cast<int64_t>(b.kv_head) * a.k_head_stride;
  b.v = static_cast<const T*>(a.v) + b.g.k_start * a.v_row_stride +
        static_cast<int64_t>(b.kv_head) * a.v_head_stride;
  b.o = static_cast<T*>(a.o) + (b.g.q_start + b.m0) * a.o_row_stride +
        static_cast<int64_t>(b.head) * a.o_head_stride;
  const int max_vis = VisibleKeys(b.g, b.causal, b.m0 + b.q_rows - 1);
  const int min_vis = VisibleKeys(b.g, b.causal, b.m0);
  b.n_tiles = CeilDiv(max_vis, BS);
  b.n_unmasked = min_vis / BS;
  return true;
}

// Fills `b` for query block `query_block` of head `head` of sequence `seq`; false when the
// block starts past its sequence's queries.
template <typename T, int BM, int BS>
__device__ __forceinline__ bool LocateQueryBlock(const FusedKernelArgs& a, int query_block, int head, int seq,
                                                 QueryBlock<T>& b) {
  b.causal = a.causal != 0;
  b.seq = seq;
  b.g = LoadSequenceGeometry(a, seq);
  b.m0 = query_block * BM;
  return LocateQueryRows<T, BM, BS>(a, head, b);
}

// The block of this thread block in the one-block-per-tile grid (x = query blocks, y = query
// heads, z = sequences). It reads the sequence's geometry before the query block's index, in
// that order, so the SIMT and mma.sync kernels compile to the code they had before the
// persistent schedule gave the form above (byte for byte, with FusedKernelArgs' field order);
// the form above, called with the grid's indices, changed their code and moved their times by
// up to 1.6 % either way (docs/perf.md).
template <typename T, int BM, int BS>
__device__ __forceinline__ bool LocateQueryBlock(const FusedKernelArgs& a, QueryBlock<T>& b) {
  b.causal = a.causal != 0;
  b.seq = static_cast<int>(blockIdx.z);
  b.g = LoadSequenceGeometry(a, b.seq);
  b.m0 = QueryBlockIndex(b.causal) * BM;
  return LocateQueryRows<T, BM, BS>(a, static_cast<int>(blockIdx.y), b);
}

// Writes zeros to the block's rows: for a block none of whose rows sees a key (zeros, never
// NaN), without loading anything. 16-byte stores; rows are 16-byte aligned (LaunchFused).
// Threads [0, kThreads) of the block share the rows (`tid`: this thread's index among them).
template <typename T, int D, int kThreads>
__device__ __forceinline__ void ZeroBlockOutput(const QueryBlock<T>& b, int64_t o_row_stride,
                                                int tid = static_cast<int>(threadIdx.x)) {
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  for (int c = tid; c < b.q_rows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * kElemsPerChunk;
    *reinterpret_cast<uint4*>(b.o + r * o_row_stride + col) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_COMMON_CUH_
