// Fused attention forward on CUDA cores in exact fp32 (every product and sum is an fp32 FMA;
// storage of any dtype is converted to fp32 on load). Two kernels: FusedSimtKernel (row-major
// Q and P, below; head_dim 128 and fp16/bf16 storage) and FusedSimtOuterKernel (transposed Q
// and P, further down; head_dim 64 with fp32 storage, where its best config per seed shape
// measured 4-11 % faster on the H200).
//
// FusedSimtKernel block: block_m query rows of one (sequence, head); TX x TY threads (TX = 8
// or 16 threads per row, chosen so a thread owns 8 rows where possible). Thread (tx, ty) owns
// query rows ty + TY*i (i < TM) and, for S = Q K^T, keys tx + TX*j (j < TN); for O it owns
// column chunks tx*4 + 4*TX*c. The TX lanes of a row are consecutive, so row max/sum
// reductions are shuffles within TX lanes. P goes through shared memory between the two
// products. K/V tiles stream through `stages` cp.async buffers (zero-filled tails);
// Q is converted to fp32 once. Strided key ownership + padded rows keep shared-memory reads
// free of bank conflicts (see README.md).
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_

#include <cmath>
#include <type_traits>

#include "fused_common.cuh"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused {

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

  QueryBlock<T> blk;
  if (!LocateQueryBlock<T, BM, BS>(a, blk)) return;
  const int n_tiles = blk.n_tiles, n_unmasked = blk.n_unmasked;

  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  if (n_tiles == 0) {
    ZeroBlockOutput<T, D, NT>(blk, a.o_row_stride);
    return;
  }

  const KvTileLoader<T, BS, D, KP, NT, ST> kv{sK, sV, blk.k, blk.v, a.k_row_stride,
                                             a.v_row_stride, blk.g.k_vis, tid};
  kv.Prologue(n_tiles);

  // Q -> fp32 shared memory (rows past the sequence are zeros).
  for (int c = tid; c < BM * (D / 4); c += NT) {
    const int r = c / (D / 4), col = (c % (D / 4)) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < blk.q_rows) val = Load4AsFloat<T>(blk.q + r * a.q_row_stride + col);
    *reinterpret_cast<float4*>(sQ + r * QP + col) = val;
  }

  int row_vis[TM];
  float m_run[TM], l_run[TM], acc[TM][DC * 4];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    row_vis[i] = VisibleKeys(blk.g, blk.causal, blk.m0 + ty + TY * i);
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
#pragma unroll
    for (int d = 0; d < DC * 4; ++d) acc[i][d] = 0.f;
  }
  const float c_log2 = a.scale_log2;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j % ST;
    KvPipelineEnterTile<ST>(kv, j, n_tiles);
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
      const float alpha =
          OnlineSoftmaxRow<TN, TX>([&](int n) -> float& { return s[i][n]; }, m_run[i], l_run[i], c_log2);
#pragma unroll
      for (int n = 0; n < TN; ++n) sP[(ty + TY * i) * PP + tx + TX * n] = s[i][n];
#pragma unroll
      for (int d = 0; d < DC * 4; ++d) acc[i][d] *= alpha;
    }
    KvPipelineBetweenProducts<ST>(kv, j, n_tiles);
    if constexpr (ST > 1) __syncthreads();  // P complete

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
    for (int off = TX / 2; off >= 1; off >>= 1) l += gpu::ShflXor(l, off);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int r = ty + TY * i;
    if (r < blk.q_rows) {
#pragma unroll
      for (int c = 0; c < DC; ++c) {
        Store4FromFloat<T>(blk.o + r * a.o_row_stride + tx * 4 + 4 * TX * c,
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

// K/V copies of the outer-product kernel. A whole tile (every key visible) is copied with
// per-thread source pointers that only advance by a fixed stride and compile-time shared-memory
// offsets: about 3 instructions per 16-byte cp.async instead of the ~12 of the generic
// predicated loader (KvTileLoader), which still copies the last, partial tile (zero fill).
template <typename T, int BS, int D, int KP, int NT, int ST>
struct SimtKvStream {
  static constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
  static constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  static constexpr int kRowStep = NT / kChunksPerRow;
  static constexpr int kPerThread = BS / kRowStep;
  static constexpr bool kUniform = NT % kChunksPerRow == 0 && BS % kRowStep == 0;
  KvTileLoader<T, BS, D, KP, NT, ST> edge;  // partial tiles
  const T* k_src;                           // this thread's first chunk of tile 0
  const T* v_src;
  gpu::SharedAddress k_dst, v_dst;          // shared addresses of that chunk in buffer 0

  __device__ __forceinline__ SimtKvStream(T* sK, T* sV, const T* k, const T* v, int64_t k_stride,
                                          int64_t v_stride, int k_vis, int tid)
      : edge{sK, sV, k, v, k_stride, v_stride, k_vis, tid} {
    const int row0 = tid / kChunksPerRow, col = (tid % kChunksPerRow) * kElemsPerChunk;
    k_src = k + row0 * k_stride + col;
    v_src = v + row0 * v_stride + col;
    k_dst = SmemAddress(sK + row0 * KP + col);
    v_dst = SmemAddress(sV + row0 * KP + col);
  }
  __device__ __forceinline__ static void Copy(gpu::SharedAddress dst, const T* src, int64_t stride) {
    const int64_t step = kRowStep * stride;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      gpu::CpAsync16(dst + static_cast<uint32_t>(i * kRowStep * KP * static_cast<int>(sizeof(T))), src);
      src += step;
    }
  }
  __device__ __forceinline__ void LoadK(int tile, int buf) const {
    if (IsWholeTile(tile)) {
      Copy(k_dst + BufferOffset(buf), k_src + tile * (BS * edge.k_row_stride), edge.k_row_stride);
    } else {
      edge.LoadK(tile, buf);
    }
  }
  __device__ __forceinline__ void LoadV(int tile, int buf) const {
    if (IsWholeTile(tile)) {
      Copy(v_dst + BufferOffset(buf), v_src + tile * (BS * edge.v_row_stride), edge.v_row_stride);
    } else {
      edge.LoadV(tile, buf);
    }
  }
  __device__ __forceinline__ bool IsWholeTile(int tile) const {
    return kUniform && (tile + 1) * BS <= edge.k_vis;
  }
  __device__ __forceinline__ static uint32_t BufferOffset(int buf) {
    return static_cast<uint32_t>(buf * BS * KP * static_cast<int>(sizeof(T)));
  }
  __device__ __forceinline__ void Prologue(int n_tiles) const {
    KvPipelinePrologue<ST>(*this, n_tiles);
  }
};

// ---- Outer-product variant -------------------------------------------------------------
//
// Same arithmetic (every product and sum an fp32 FMA), different data layout:
// * Q is stored transposed in shared memory (Qt[d][row]) and P likewise (Pt[key][row]); a
//   thread owns rows in groups of 4 consecutive ones (4*ty + 4*TY*q + e), so one 16-byte load
//   gives 4 of its rows for one d (or one key): S and PV become rank-1 updates with few operand
//   registers, which lets a thread hold 8 x 8 tiles without spilling.
// * The TX lanes that share a row group are consecutive lanes of one warp, and a row group's P
//   is written and read only by them: the P round trip needs __syncwarp, not __syncthreads.
// * G = 2 splits every key tile between two warp groups (each keeps its own m, l and O for all
//   BM rows); they are merged through shared memory at the end. This doubles the threads per
//   row block (better latency hiding) while each thread keeps an 8 x 8 output tile.
// Code-generation options of an outer-product instance (bit flags; measured per config on the
// H200, docs/perf.md "CUDA fused kernel, exact fp32 (SIMT), round 2"):
// kSimtStreamCopies: whole K/V tiles through SimtKvStream (~3 instead of ~12 instructions per
//   16-byte copy); kSimtPvValueOuter: PV FMAs ordered value column outer, rows inner (one V
//   operand register shared by TM consecutive FMAs instead of one P register by 4*TC).
inline constexpr int kSimtStreamCopies = 1;
inline constexpr int kSimtPvValueOuter = 2;
// kSimtLazyRescale: a tile that raises no row's max by more than 2^8 keeps the running max
//   (no row-max shuffles, alpha or O rescale; SimtOuterThread::AnyRowMaxGrows).
inline constexpr int kSimtLazyRescale = 4;

template <typename T, int D, int BM, int BS, int W, int ST, int TX, int G, int Options = 0>
struct SimtOuterTraits {
  static constexpr bool kStreamCopies = (Options & kSimtStreamCopies) != 0;
  static constexpr bool kPvValueOuter = (Options & kSimtPvValueOuter) != 0;
  static constexpr bool kLazyRescale = (Options & kSimtLazyRescale) != 0;
  using Storage = T;
  static constexpr int kHeadDim = D, kBlockM = BM, kBlockS = BS, kWarps = W, kStages = ST;
  static constexpr int kThreads = 32 * W;
  static constexpr int kGroups = G;
  static constexpr int kGroupThreads = kThreads / G;
  static constexpr int kTx = TX;                          // lanes per row group
  static constexpr int kTy = kGroupThreads / TX;          // row groups per warp group
  static constexpr int kTm = BM / kTy;                    // rows per thread
  static constexpr int kGroupKeys = BS / G;               // keys of a tile per warp group
  static constexpr int kTn = kGroupKeys / TX;             // keys per thread (S)
  static constexpr int kTd = D / TX;                      // output columns per thread
  static constexpr int kQtPitch = BM + 4;                 // fp32; rows = d
  static constexpr int kPtPitch = BM + 4;                 // fp32; rows = keys
  static constexpr int kKvPitch = D + 16 / static_cast<int>(sizeof(T));
  static constexpr int kKvBytes = 2 * ST * BS * kKvPitch * static_cast<int>(sizeof(T));
  // Per-thread values handed from group 1 to group 0 at the end (O tile, m, l).
  static constexpr int kMergeValues = kTm * kTd + 2 * kTm;
  static constexpr int kMergeBytes = G == 2 ? kMergeValues * kGroupThreads * 4 : 0;
  static constexpr int kSmemBytes = D * kQtPitch * 4 + (kKvBytes > kMergeBytes ? kKvBytes : kMergeBytes) +
                                    BS * kPtPitch * 4;
  // Blocks that fit one SM by shared memory (227 KiB, 1 KiB reserved per block): the register
  // budget is capped so that as many fit by registers, but never below 168 per thread.
  static constexpr int kSmemBlocks = 232448 / (kSmemBytes + 1024);
  static constexpr int kRegBlocks = 65536 / (kThreads * 168);  // never below 168 registers
  static constexpr int kMinBlocks =
      (kSmemBlocks < kRegBlocks ? kSmemBlocks : kRegBlocks) < 1 ? 1 : (kSmemBlocks < kRegBlocks ? kSmemBlocks : kRegBlocks);
  static_assert(G == 1 || G == 2, "one or two key groups");
  static_assert(kGroupThreads % 32 == 0, "a key group is whole warps");
  static_assert(32 % TX == 0 && kGroupThreads % TX == 0, "row groups inside one warp");
  static_assert(BM % (4 * kTy) == 0 && kTm % 4 == 0, "rows per thread a multiple of 4");
  static_assert(BS % (G * TX) == 0 && kTn >= 1, "block_s a multiple of groups * lanes");
  static_assert(D % (4 * TX) == 0, "head_dim a multiple of 4 * lanes");
  static_assert(ST >= 1 && ST <= 4, "stages in [1, 4]");
  static_assert((D & (D - 1)) == 0 && (kGroupKeys & (kGroupKeys - 1)) == 0,
                "head_dim and keys per group powers of two (operand prefetch wraps with a mask)");
};

// Per-thread steps of the outer-product kernel (layout above): the two products, the mask,
// the softmax variants and the P store.
template <class Tr>
struct SimtOuterThread {
  using T = typename Tr::Storage;
  static constexpr int D = Tr::kHeadDim;
  static constexpr int TX = Tr::kTx, TY = Tr::kTy, TM = Tr::kTm, TN = Tr::kTn, TD = Tr::kTd;
  static constexpr int BSG = Tr::kGroupKeys, QP = Tr::kQtPitch, PP = Tr::kPtPitch, KP = Tr::kKvPitch;
  static constexpr int TQ = TM / 4, TC = TD / 4;  // float4 row groups / column chunks per thread

  // s = Q K^T for rows 4*ty + 4*TY*q + e (qt_base = Qt + 4*ty) and keys tx + TX*n of the tile
  // (k_s = the tile's row of key tx). Operands of the next step are loaded before this step's
  // FMAs (register double buffer: K four d ahead, Q one d ahead; the last loads wrap to d = 0
  // and are unused).
  static __device__ __forceinline__ void Scores(const float* qt_base, const T* k_s, float (&s)[TM][TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int n = 0; n < TN; ++n) s[i][n] = 0.f;
    float4 kc[TN], kn[TN], qc[TQ], qn[TQ];
#pragma unroll
    for (int n = 0; n < TN; ++n) kc[n] = Load4AsFloat<T>(k_s + TX * n * KP);
#pragma unroll
    for (int q = 0; q < TQ; ++q) qc[q] = *reinterpret_cast<const float4*>(qt_base + 4 * TY * q);
#pragma unroll 2
    for (int kk = 0; kk < D; kk += 4) {
      const int k_next = (kk + 4) & (D - 1);
#pragma unroll
      for (int n = 0; n < TN; ++n) kn[n] = Load4AsFloat<T>(k_s + TX * n * KP + k_next);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int d_next = (kk + u + 1) & (D - 1);
#pragma unroll
        for (int q = 0; q < TQ; ++q)
          qn[q] = *reinterpret_cast<const float4*>(qt_base + d_next * QP + 4 * TY * q);
#pragma unroll
        for (int q = 0; q < TQ; ++q)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float qx = e == 0 ? qc[q].x : e == 1 ? qc[q].y : e == 2 ? qc[q].z : qc[q].w;
#pragma unroll
            for (int n = 0; n < TN; ++n) {
              const float kx = u == 0 ? kc[n].x : u == 1 ? kc[n].y : u == 2 ? kc[n].z : kc[n].w;
              s[4 * q + e][n] = fmaf(qx, kx, s[4 * q + e][n]);
            }
          }
#pragma unroll
        for (int q = 0; q < TQ; ++q) qc[q] = qn[q];
      }
#pragma unroll
      for (int n = 0; n < TN; ++n) kc[n] = kn[n];
    }
  }

  // -inf for the keys a row cannot see; row0 = the thread's first row (block row m0 + 4*ty),
  // key0 = its first key (tile start + group offset + tx). Only diagonal / padded tail tiles.
  static __device__ __forceinline__ void MaskScores(const SequenceGeometry& geo, bool causal, int row0,
                                                    int key0, float (&s)[TM][TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int vis = VisibleKeys(geo, causal, row0 + 4 * TY * (i / 4) + (i % 4));
#pragma unroll
      for (int n = 0; n < TN; ++n)
        if (key0 + TX * n >= vis) s[i][n] = -INFINITY;
    }
  }

  // Lazy rescaling (FlashAttention-4's conditional rescale): a tile whose scores exceed no row's
  // running max m by more than 2^kLazyRescaleLog2 (after exp2) keeps m, so the row-max shuffle
  // tree, the alpha ex2 and the O rescale are skipped; P is then at most 2^kLazyRescaleLog2
  // instead of 1, which fp32 O and l hold without loss (the softmax is shift-invariant: O/l is
  // the same quantity). Warp-uniform: true when any row of this warp needs the full update
  // (also every row that has seen no key yet, m = -inf).
  static constexpr float kLazyRescaleLog2 = 8.f;
  static __device__ __forceinline__ bool AnyRowMaxGrows(const float (&s)[TM][TN], const float (&m_run)[TM],
                                                        float c_log2) {
    bool grows = false;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float mx = s[i][0];
#pragma unroll
      for (int n = 1; n < TN; ++n) mx = fmaxf(mx, s[i][n]);
      // NaN (m = -inf, mx = -inf) and +inf (m = -inf) compare false: the full update.
      grows |= !(ShiftedExponent(mx, MakeExpShift(m_run[i], c_log2), c_log2) <= kLazyRescaleLog2);
    }
    return gpu::AnyInWarp(grows);
  }
  // The softmax step of a tile that keeps every row's m (AnyRowMaxGrows was false).
  static __device__ __forceinline__ void SoftmaxKeepingMax(float (&s)[TM][TN], const float (&m_run)[TM],
                                                           float (&l_run)[TM], float c_log2) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
      l_run[i] += ExpShiftedAndSum<TN>([&](int n) -> float& { return s[i][n]; }, MakeExpShift(m_run[i], c_log2), c_log2);
  }

  // P (the softmaxed s) to this row group's transposed tile: Pt[key][row] (pt_base = Pt + 4*ty).
  static __device__ __forceinline__ void StoreP(float* pt_base, int tx, const float (&s)[TM][TN]) {
#pragma unroll
    for (int n = 0; n < TN; ++n)
#pragma unroll
      for (int q = 0; q < TQ; ++q)
        *reinterpret_cast<float4*>(pt_base + (tx + TX * n) * PP + 4 * TY * q) =
            make_float4(s[4 * q][n], s[4 * q + 1][n], s[4 * q + 2][n], s[4 * q + 3][n]);
  }

  // acc += P V over the group's BSG keys (v_s = the tile's group start + column 4*tx), next
  // key's P and V loaded ahead (as in Scores).
  static __device__ __forceinline__ void AccumulatePv(const float* pt_base, const T* v_s, float (&acc)[TM][TD]) {
    float4 pc[TQ], pn[TQ], vc[TC], vn[TC];
#pragma unroll
    for (int q = 0; q < TQ; ++q) pc[q] = *reinterpret_cast<const float4*>(pt_base + 4 * TY * q);
#pragma unroll
    for (int c = 0; c < TC; ++c) vc[c] = Load4AsFloat<T>(v_s + 4 * TX * c);
#pragma unroll 8
    for (int k = 0; k < BSG; ++k) {
      const int k_next = (k + 1) & (BSG - 1);
#pragma unroll
      for (int q = 0; q < TQ; ++q) pn[q] = *reinterpret_cast<const float4*>(pt_base + k_next * PP + 4 * TY * q);
#pragma unroll
      for (int c = 0; c < TC; ++c) vn[c] = Load4AsFloat<T>(v_s + k_next * KP + 4 * TX * c);
      if constexpr (Tr::kPvValueOuter) {
#pragma unroll
        for (int c = 0; c < TC; ++c)
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const float vx = w == 0 ? vc[c].x : w == 1 ? vc[c].y : w == 2 ? vc[c].z : vc[c].w;
#pragma unroll
            for (int q = 0; q < TQ; ++q)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const float p = e == 0 ? pc[q].x : e == 1 ? pc[q].y : e == 2 ? pc[q].z : pc[q].w;
                acc[4 * q + e][4 * c + w] = fmaf(p, vx, acc[4 * q + e][4 * c + w]);
              }
          }
      } else {
#pragma unroll
        for (int q = 0; q < TQ; ++q)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = e == 0 ? pc[q].x : e == 1 ? pc[q].y : e == 2 ? pc[q].z : pc[q].w;
#pragma unroll
            for (int c = 0; c < TC; ++c) {
              acc[4 * q + e][4 * c + 0] = fmaf(p, vc[c].x, acc[4 * q + e][4 * c + 0]);
              acc[4 * q + e][4 * c + 1] = fmaf(p, vc[c].y, acc[4 * q + e][4 * c + 1]);
              acc[4 * q + e][4 * c + 2] = fmaf(p, vc[c].z, acc[4 * q + e][4 * c + 2]);
              acc[4 * q + e][4 * c + 3] = fmaf(p, vc[c].w, acc[4 * q + e][4 * c + 3]);
            }
          }
      }
#pragma unroll
      for (int q = 0; q < TQ; ++q) pc[q] = pn[q];
#pragma unroll
      for (int c = 0; c < TC; ++c) vc[c] = vn[c];
    }
  }
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    FusedSimtOuterKernel(const FusedKernelArgs a) {
  using T = typename Tr::Storage;
  using Th = SimtOuterThread<Tr>;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, G = Tr::kGroups, NTG = Tr::kGroupThreads;
  constexpr int TX = Tr::kTx, TY = Tr::kTy, TM = Tr::kTm, TN = Tr::kTn, TD = Tr::kTd;
  constexpr int BSG = Tr::kGroupKeys, QP = Tr::kQtPitch, PP = Tr::kPtPitch, KP = Tr::kKvPitch;
  constexpr int TC = TD / 4;

  extern __shared__ __align__(16) unsigned char simt_smem[];
  float* sQt = reinterpret_cast<float*>(simt_smem);
  T* sK = reinterpret_cast<T*>(sQt + D * QP);
  T* sV = sK + ST * BS * KP;
  float* sPt = reinterpret_cast<float*>(simt_smem + D * QP * 4 +
                                        (Tr::kKvBytes > Tr::kMergeBytes ? Tr::kKvBytes : Tr::kMergeBytes));

  QueryBlock<T> blk;
  if (!LocateQueryBlock<T, BM, BS>(a, blk)) return;
  const SequenceGeometry& geo = blk.g;
  const int n_tiles = blk.n_tiles, n_unmasked = blk.n_unmasked;

  const int tid = threadIdx.x;
  const int grp = tid / NTG, lt = tid % NTG;
  const int tx = lt % TX, ty = lt / TX;
  if (n_tiles == 0) {
    ZeroBlockOutput<T, D, NT>(blk, a.o_row_stride);
    return;
  }

  using KvCopier = std::conditional_t<Tr::kStreamCopies, SimtKvStream<T, BS, D, KP, NT, ST>,
                                      KvTileLoader<T, BS, D, KP, NT, ST>>;
  const KvCopier kv{sK, sV, blk.k, blk.v, a.k_row_stride, a.v_row_stride, geo.k_vis, tid};
  kv.Prologue(n_tiles);

  // Q -> transposed fp32 shared memory; consecutive threads take consecutive rows so the
  // transposed stores are conflict-free (rows past the sequence are zeros).
  for (int c = tid; c < BM * (D / 4); c += NT) {
    const int r = c % BM, col = (c / BM) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < blk.q_rows) val = Load4AsFloat<T>(blk.q + r * a.q_row_stride + col);
    sQt[(col + 0) * QP + r] = val.x;
    sQt[(col + 1) * QP + r] = val.y;
    sQt[(col + 2) * QP + r] = val.z;
    sQt[(col + 3) * QP + r] = val.w;
  }

  float m_run[TM], l_run[TM], acc[TM][TD];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
#pragma unroll
    for (int c = 0; c < TD; ++c) acc[i][c] = 0.f;
  }
  const float c_log2 = a.scale_log2;
  const float* qt_base = sQt + 4 * ty;
  float* pt_base = sPt + grp * BSG * PP + 4 * ty;
  const int row0 = blk.m0 + 4 * ty;
  const int key_offset = grp * BSG + tx;  // the thread's first key within a tile

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j % ST;
    KvPipelineEnterTile<ST>(kv, j, n_tiles);
    float s[TM][TN];
    Th::Scores(qt_base, sK + buf * BS * KP + key_offset * KP, s);
    if (j >= n_unmasked) Th::MaskScores(geo, blk.causal, row0, j * BS + key_offset, s);

    // Online softmax over this group's keys; a row's TX lanes are consecutive.
    if (!Tr::kLazyRescale || Th::AnyRowMaxGrows(s, m_run, c_log2)) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float alpha =
            OnlineSoftmaxRow<TN, TX>([&](int n) -> float& { return s[i][n]; }, m_run[i], l_run[i], c_log2);
#pragma unroll
        for (int c = 0; c < TD; ++c) acc[i][c] *= alpha;
      }
    } else {
      Th::SoftmaxKeepingMax(s, m_run, l_run, c_log2);
    }
    Th::StoreP(pt_base, tx, s);

    KvPipelineBetweenProducts<ST>(kv, j, n_tiles);
    if constexpr (ST > 1) gpu::SyncWarp();  // P of this warp's rows complete (only this warp reads it)
    Th::AccumulatePv(pt_base, sV + buf * BS * KP + grp * BSG * KP + 4 * tx, acc);
    if constexpr (ST > 1) gpu::SyncWarp();  // P reads done before the next tile's P writes
  }
  CpAsyncWait<0>();

  if constexpr (G == 2) {
    // Group 1 hands its O tile, m and (per-lane partial) l to group 0 through the K/V buffers.
    float* scratch = reinterpret_cast<float*>(sK);
    constexpr int kAccValues = TM * TD;
    __syncthreads();  // every warp is done with K/V
    if (grp == 1) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int c = 0; c < TD; ++c) scratch[(i * TD + c) * NTG + lt] = acc[i][c];
        scratch[(kAccValues + i) * NTG + lt] = m_run[i];
        scratch[(kAccValues + TM + i) * NTG + lt] = l_run[i];
      }
    }
    __syncthreads();
    if (grp == 1) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const float m1 = scratch[(kAccValues + i) * NTG + lt];
      const float l1 = scratch[(kAccValues + TM + i) * NTG + lt];
      const float mm = fmaxf(m_run[i], m1);
      const ExpShift to = ExpShiftOfMax(mm, c_log2);
      const float a0 = FastExp2(RescaleExponent(MakeExpShift(m_run[i], c_log2), to, c_log2));
      const float a1 = FastExp2(RescaleExponent(MakeExpShift(m1, c_log2), to, c_log2));
      l_run[i] = fmaf(l1, a1, l_run[i] * a0);
#pragma unroll
      for (int c = 0; c < TD; ++c) acc[i][c] = fmaf(scratch[(i * TD + c) * NTG + lt], a1, acc[i][c] * a0);
    }
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float l = l_run[i];
#pragma unroll
    for (int off = TX / 2; off >= 1; off >>= 1) l += gpu::ShflXor(l, off);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int r = 4 * ty + 4 * TY * (i / 4) + (i % 4);
    if (r < blk.q_rows) {
#pragma unroll
      for (int c = 0; c < TC; ++c) {
        Store4FromFloat<T>(blk.o + r * a.o_row_stride + 4 * tx + 4 * TX * c,
                           make_float4(acc[i][4 * c + 0] * inv, acc[i][4 * c + 1] * inv,
                                       acc[i][4 * c + 2] * inv, acc[i][4 * c + 3] * inv));
      }
    }
  }
}

template <class Tr>
cudaError_t LaunchSimtOuter(const FusedKernelArgs& a, cudaStream_t stream) {
  auto kernel = FusedSimtOuterKernel<Tr>;
  if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedSimtOuterKernel<Tr>>(Tr::kSmemBytes);
      e != cudaSuccess) {
    return e;
  }
  const dim3 grid(CeilDiv(a.q_len, Tr::kBlockM), a.q_heads, a.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

// TX lanes per row group, G key groups, Options = kSimt* flags (see SimtOuterTraits).
template <typename T, int D, int BM, int BS, int W, int ST, int TX, int G, int Options = 0>
FusedInstance SimtOuterInstance() {
  using Tr = SimtOuterTraits<T, D, BM, BS, W, ST, TX, G, Options>;
  return FusedInstance{D,  StorageOf<T>(), PrecisionCode::kFp32, BM, BS, Tr::kThreads, ST,
                       Tr::kSmemBytes, &LaunchSimtOuter<Tr>};
}

template <typename T, int D, int BM, int BS, int W, int ST>
FusedInstance SimtInstance() {
  using Tr = SimtTraits<T, D, BM, BS, W, ST>;
  return FusedInstance{D,  StorageOf<T>(), PrecisionCode::kFp32, BM, BS, Tr::kThreads, ST,
                       Tr::kSmemBytes, &LaunchSimt<Tr>};
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_SIMT_CUH_
