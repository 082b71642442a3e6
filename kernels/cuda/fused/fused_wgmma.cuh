// Hopper (sm_90a) fused kernel for fp16/bf16: warp-specialized, TMA-fed, asynchronous wgmma
// (FlashAttention-3's structure, written from the PTX ISA).
//
// Block = `block_m / 64` consumer warpgroups (64 query rows each) + one producer warpgroup,
// of which one warp works. setmaxnreg moves registers from the producer to the consumers
// (ptxas budgets a block in whole warpgroups, so a lone producer warp would cost as much).
//  - The producer warp streams K and V tiles with TMA (cp.async.bulk.tensor, 128-byte swizzle)
//    into `stages` buffers (one more V buffer in persistent blocks with two Q buffers at head_dim
//    128: kStagesV); per buffer a "full" mbarrier (transaction count) and an "empty"
//    mbarrier (one arrival per consumer warp) hand it back and forth, so consumers never wait
//    on a block-wide barrier. Left alone, the two warpgroups drift apart and their GEMMs
//    contend for the tensor cores; the ping-pong schedule (config axis `pingpong`) orders them
//    with two named barriers, so one's softmax runs while the other's GEMMs do.
//  - Persistent schedule (config axis `persistent`): one block per multiprocessor walks its
//    share of the query tiles (PersistentTileOrder); the producer loads the next tile's Q (its own
//    full/empty pair) and K/V while the consumers finish the current one, and the barrier
//    phases run on across tiles. Without ping-pong it holds two Q buffers where shared memory
//    allows, so the next tile's Q loads while the current tile runs.
//  - Split last round (two Q buffers; FusedWgmmaKernel<Tr, true>): where the tiles leave the
//    last round partly filled, its tiles' key tiles are spread over every block (SplitTail); the
//    pieces of a tile write partial states and the last merges them. At head_dim 64 in the same
//    launch; at 128 as a second launch after the unsplit kernel's whole rounds (kTailLaunch).
//  - Epilogue: each consumer warpgroup stages its 64 rows of O in its rows of the Q buffer
//    (stmatrix) and one thread writes them with a TMA store; a warpgroup whose rows end inside
//    the tile copies them out with 16-byte stores. Persistent blocks with one Q buffer (released
//    after the last Q K^T) store O from registers.
//  - Each consumer warpgroup overlaps inside itself too: it issues S_j = Q K_j^T and
//    O += P_{j-1} V_{j-1} back to back, waits only for S_j, runs the softmax of tile j while
//    the PV product is still in flight; O takes the softmax's factor under the next S = Q K^T
//    at head_dim 128, after P V completes at 64 (kRescaleUnderQk).
//  - S = Q K^T is an SS wgmma (both operands K-major SW128 from descriptors); O += P V is an
//    RS wgmma with P in registers (the S accumulator layout per warp is the mma.sync one, so P
//    packs as in fused_mma.cuh) and V as an MN-major SW128 descriptor.
//  - A key tile that ends inside the sequence (k_vis % block_s != 0) is loaded by the producer
//    warp with zero-filling cp.async instead of TMA: rows past the visible keys may hold padding
//    (even NaN), and 0 * NaN would leak into O through the PV product.
//  - A paged cache (a prefill over cached keys): each tile is min(page, block_s)-row TMA boxes,
//    one per page, at the rows the block table names; a box past the sequence's pages is
//    aimed past the pool, which TMA fills with zeros (its bytes still count on the barrier).
// Needs the total row counts of Q and K/V (tensor bounds for TMA); LaunchWgmma returns
// cudaErrorNotSupported without them. On the sm_80 build the kernel body is empty and
// FusedCanImplement never selects it (FusedInstance::needs_sm90).
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_

#include <cuda.h>

#include <atomic>
#include <cmath>
#include <type_traits>

#include "fused/fused_tensor_map.h"
#include "fused/persistent_tile_order.h"
#include "fused_common.cuh"
#include "fused_wgmma_ops.cuh"
#include "../mbarrier.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSETUNE_FUSED_WGMMA_ENABLED 1
#endif

namespace fusetune::cuda::fused {

template <typename T, int D, int BM, int BS, int ST, bool PingPong = false, bool Persistent = false>
struct WgmmaTraits {
  using Storage = T;
  static constexpr int kHeadDim = D, kBlockM = BM, kBlockS = BS, kStages = ST;
  static constexpr bool kPingPong = PingPong, kPersistent = Persistent;
  static constexpr int kConsumerGroups = BM / 64;
  static constexpr int kConsumerWarps = 4 * kConsumerGroups;
  static constexpr int kThreads = 32 * kConsumerWarps + 128;  // + the producer warpgroup
  // Registers per thread after setmaxnreg (0 = leave the compiler's allocation): the consumers
  // take only what the producer gives back, since the block keeps the allocation it launched with
  // (__launch_bounds__(threads, 1): 65536 / threads, at most 255, in whole multiples of 8);
  // asking for more makes setmaxnreg.inc wait forever. The persistent producer without ping-pong
  // walks two Q buffers and spills at 72; its consumers fit in 208.
  static constexpr bool kProducerKeepsMore = Persistent && !PingPong;
  // The fp16 d128 two-stage persistent kernels decode their tiles in 32 bits
  // (PersistentTileOrder::Decode<uint32_t>; LaunchWgmma checks the tile count) and give their
  // consumers 200 registers: with the narrow decode at 208, ptxas takes both rows' maxima before
  // the exponentials in the key loop, the schedule that runs 3 % slower; at 200 it interleaves
  // them as before. Measured on an H100: fp16 b8 h16 S1024 0.5 % faster; the bf16 kernels, whose
  // flagships run at the power cap, 0.3-0.5 % slower, so they keep the 64-bit decode and 208
  // (docs/perf.md, "full rounds on fewer blocks and a 32-bit tile decode").
  static constexpr bool kNarrowDecode =
      Persistent && !PingPong && D == 128 && BM == 128 && ST == 2 && std::is_same_v<T, __half>;
  using TileIndex = std::conditional_t<kNarrowDecode, uint32_t, int64_t>;
  static constexpr int kProducerRegs = kConsumerGroups == 1 ? 0 : (kConsumerGroups == 2 ? (kProducerKeepsMore ? 88 : 72) : 56);
  static constexpr int kConsumerRegs =
      kConsumerGroups == 1 ? 0 : (kConsumerGroups == 2 ? (kProducerKeepsMore ? (kNarrowDecode ? 200 : 208) : 216) : 152);
  static constexpr int kLaunchRegs = (65536 / kThreads < 255 ? 65536 / kThreads : 255) & ~7;
  static constexpr int kChunks = D / 64;                     // 128-byte swizzle rows per row
  static constexpr int kQBytes = kChunks * BM * 128;
  static constexpr int kTileBytes = kChunks * BS * 128;  // one K or one V tile
  // Shared memory with `q_buffers` Q buffers: 1024 bytes of slack (the swizzle atoms start on
  // 1024-byte boundaries), Q, K and V stages, a full/empty mbarrier pair per buffer.
  static constexpr int SmemBytesWith(int q_buffers, int k_stages = ST, int v_stages = ST) {
    return 1024 + q_buffers * kQBytes + (k_stages + v_stages) * kTileBytes + 8 * (2 * q_buffers + 2 * k_stages + 2 * v_stages);
  }
  static constexpr int kSmemLimit = 232448;  // sm_90's opt-in shared memory per block
  // Persistent blocks take a second Q buffer where it fits: the next tile's Q loads while the
  // current tile runs, not after its last Q K^T. Not with ping-pong (its consumers spill at
  // 216 registers with it) nor with one consumer warpgroup (no split to give the producer more).
  static constexpr int kQBuffers =
      Persistent && !PingPong && kConsumerGroups == 2 && SmemBytesWith(2) <= kSmemLimit ? 2 : 1;
  // The epilogue stages O in this warpgroup's rows of its Q buffer and writes them with one TMA
  // store (16-byte stores for a warpgroup whose rows end inside the tile), where that buffer is
  // free once the tile's last Q K^T is done: always in a one-tile block, and in a persistent one
  // with two Q buffers (released after the epilogue). With one, it is released after the last
  // Q K^T and O is stored from registers.
  static constexpr bool kStageO = !Persistent || kQBuffers == 2;
  // Persistent blocks with two Q buffers at head_dim 64 split the last round along the keys
  // where that pays (SplitTail), in a kernel of their own (FusedWgmmaKernel<Tr, true>), so a
  // launch that does not split runs the same code as without the split. Not at head_dim 128,
  // where the split kernel's whole rounds ran 2.7 % slower than the unsplit kernel's and ate the
  // gain; nor with one Q buffer, whose producer warp, at 72 registers, spilled 100 bytes with the
  // split's loop state (docs/perf.md).
  static constexpr bool kSplitTail = Persistent && kQBuffers == 2 && D == 64;
  // At head_dim 128 (two Q buffers) the split round is a launch of its own (a tail launch): the
  // unsplit kernel runs the whole rounds and leaves the last p.split_tail tiles, then the split
  // kernel runs only their pieces, launched as a programmatic dependent of the first. The
  // unsplit kernel's code stays that of the base (one comparison differs), where the one-kernel
  // split's loop state cost its whole rounds 2.7 %; planned only after enough whole rounds
  // (SplitTail::TailLaunchPays; docs/perf.md).
  static constexpr bool kTailLaunch = Persistent && kQBuffers == 2 && D == 128;
  // Where O takes the softmax's factor: between the issue of the next S = Q K^T and of P V (under
  // the product) at head_dim 128; after P V completes at head_dim 64, where that placement was
  // measured 1.5-3.5 % slower for ping-pong and three consumer warpgroups (docs/perf.md).
  static constexpr bool kRescaleUnderQk = D == 128;
  // V stages: `stages` (K's count, kStages), except that persistent blocks with two Q buffers at
  // head_dim 128 hold one more where it fits. V_{j+1} can load only once both warpgroups have
  // released V_{j-1}, at the end of step j, and is read at the start of step j + 1: with two
  // stages it has about one step, with three two (K_{j+2} already has about one and a half,
  // from the release of K_j after S_j). Measured on the H200: fp16 b8 S1024 1.8-1.9 % faster, bf16
  // S4096 0.5-1.6 %; one more K stage instead, and either at head_dim 64, changed nothing
  // (docs/perf.md).
  static constexpr int kStagesV =
      D == 128 && kQBuffers == 2 && SmemBytesWith(2, ST, ST + 1) <= kSmemLimit ? ST + 1 : ST;
  static constexpr int kBarriers = 2 * kQBuffers + 2 * ST + 2 * kStagesV;
  static constexpr int kSmemBytes = SmemBytesWith(kQBuffers, ST, kStagesV);
  static_assert(sizeof(T) == 2, "wgmma kernel is for 16-bit storage");
  static_assert(BM % 64 == 0 && BM >= 64 && BM <= 256, "block_m: 64..256 rows, whole warpgroups");
  static_assert(BS == 64 || BS == 128, "block_s 64 or 128 (wgmma N)");
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(ST >= 1 && ST <= 4, "stages in [1, 4]");
  static_assert(kStagesV >= ST, "the kernel initialises the K/V barriers in one loop over the V stages");
  static_assert(!PingPong || kConsumerGroups == 2, "ping-pong alternates two consumer warpgroups");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory past sm_90's opt-in limit");
  static_assert(128 * kProducerRegs + 128 * kConsumerGroups * kConsumerRegs <= kThreads * kLaunchRegs,
                "setmaxnreg: the consumers may take only the registers the producer gives back");
};

// Everything the kernel reads from its parameter space: the TMA descriptors must live there
// (or in constant/global memory) for cp.async.bulk.tensor.
struct WgmmaLaunchParams {
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  CUtensorMap o_map;  // 64-row boxes: one consumer warpgroup's rows (kStageO)
  FusedKernelArgs a;
  // The split kernel: 1, the last round is split along the keys (SplitTail). The unsplit kernel of
  // a tail launch (kTailLaunch): the last tiles it leaves to the split kernel's launch (0: none).
  int split_tail;
};

// Which key tiles of a query tile a block computes: all of them, or one piece of a split tile
// (slot >= 0: SplitTail's slot, piece `piece` of `pieces`).
struct TileKeys {
  int begin = 0, end = 0;  // key tiles [begin, end)
  int slot = -1, piece = 0, pieces = 1;
  int max_pieces = 1;  // SplitTail::MaxPieces, the slots' stride in the partial states
};

// ---- mbarrier / TMA / descriptor helpers (sm_90) -------------------------------------------

__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                          int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegistersIncrease() {
  if constexpr (kRegs > 0) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegistersDecrease() {
  if constexpr (kRegs > 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// O from shared memory to global by TMA (the box's rows past the tensor are not written);
// completes as one bulk group of the issuing thread.
__device__ __forceinline__ void TmaStore3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void BulkCommitGroup() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until this thread's bulk groups have read their shared-memory sources.
__device__ __forceinline__ void BulkWaitGroupRead0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Four 8x8 16-bit matrices from the mma.sync C fragment layout (thread (g, t) holds row g,
// columns 2t and 2t+1 of each) to shared memory; lane 8m + i names row i of matrix m.
__device__ __forceinline__ void StMatrixX4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ uint4 LdShared128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void CpAsync16Shared(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0));
}
// wgmma descriptor, 128-byte swizzle, base offset 0 (atoms are 1024-byte aligned).
__device__ __forceinline__ uint64_t Sw128Descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}
// Keeps the compiler from moving reads/writes of wgmma operand registers across the
// asynchronous region (the asm statements above do not name them).
template <int N>
__device__ __forceinline__ void FenceOperands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// Named barriers 1 and 2 order the two consumer warpgroups' GEMM issue in ping-pong (barrier 0
// is __syncthreads). Each counts 256 threads: the 128 of the warpgroup that waits for its turn
// and the 128 of the other one, which arrive when they have issued theirs.
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The end of one consumer warp's piece of a split tile (SplitTail): writes its rows' partial
// state (acc, O unnormalised relative to R(m); m, the row maxima; l, the row sums) to the
// piece's entries, then counts the warp in on its counter. False: a piece of the tile is still
// running. True: this was the last, the counter is zero again for the next launch, and acc, m
// and l are the merge of every piece's state. Entries are laid out by consumer thread (a float4
// per 8-column accumulator group, then m and l), so each thread reads back just the values it
// would have held itself.
template <class Tr, int N>
__device__ __forceinline__ bool MergeSplitPieces(const FusedKernelArgs& a, const TileKeys& keys, float (&acc)[N][4],
                                                 float (&m)[2], float (&l)[2]) {
  constexpr int kThreads = 32 * Tr::kConsumerWarps;
  constexpr int kEntries = N + 1;
  const int ct = static_cast<int>(threadIdx.x), warp = ct / 32, lane = ct % 32;
  float4* const entries = reinterpret_cast<float4*>(a.split_partials);
  auto entry = [&](int piece, int e) {
    return entries + ((static_cast<int64_t>(keys.slot) * keys.max_pieces + piece) * kEntries + e) * kThreads + ct;
  };
#pragma unroll
  for (int e = 0; e < N; ++e) *entry(keys.piece, e) = make_float4(acc[e][0], acc[e][1], acc[e][2], acc[e][3]);
  *entry(keys.piece, N) = make_float4(m[0], m[1], l[0], l[1]);
  __threadfence();  // the entries are visible device-wide before the warp is counted
  __syncwarp();
  int last = 0;
  if (lane == 0) {
    int* counter = a.split_counters + static_cast<int64_t>(keys.slot) * Tr::kConsumerWarps + warp;
    last = atomicAdd(counter, 1) == keys.pieces - 1;
    if (last) atomicExch(counter, 0);
  }
  if (__shfl_sync(0xffffffffu, last, 0) == 0) return false;
  __threadfence();
  const float c = a.scale_log2;
  for (int q = 0; q < keys.pieces; ++q) {
    if (q == keys.piece) continue;
    const float4 ml = __ldcg(entry(q, N));
    const float mq[2] = {ml.x, ml.y}, lq[2] = {ml.z, ml.w};
    float f_own[2], f_q[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], mq[r]);
      if (m_new == -INFINITY) {  // both empty: zeros (or NaN from a NaN score) add up as they are
        f_own[r] = f_q[r] = 1.f;
      } else {
        const ExpShift to = MakeExpShift(m_new, c);
        f_own[r] = m[r] == -INFINITY ? 0.f : exp2f(RescaleExponent(MakeExpShift(m[r], c), to, c));
        f_q[r] = mq[r] == -INFINITY ? 0.f : exp2f(RescaleExponent(MakeExpShift(mq[r], c), to, c));
      }
      l[r] = l[r] * f_own[r] + lq[r] * f_q[r];
      m[r] = m_new;
    }
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float4 x = __ldcg(entry(q, e));
      acc[e][0] = acc[e][0] * f_own[0] + x.x * f_q[0];
      acc[e][1] = acc[e][1] * f_own[0] + x.y * f_q[0];
      acc[e][2] = acc[e][2] * f_own[1] + x.z * f_q[1];
      acc[e][3] = acc[e][3] * f_own[1] + x.w * f_q[1];
    }
  }
  return true;
}

// kSplit: the split kernel of a persistent instance (Tr::kSplitTail), launched with an active
// plan (gridDim.x blocks, p.split_tail = 1). kPaired: a persistent kernel under a causal mask
// that walks pairs of query blocks (PersistentTileOrder; the launcher decides, PairsPay), a
// kernel of its own so that the others' code stays as it was.
template <class Tr, bool kSplit = false, bool kPaired = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    FusedWgmmaKernel(const __grid_constant__ WgmmaLaunchParams p) {
#if defined(FUSETUNE_FUSED_WGMMA_ENABLED)
  using T = typename Tr::Storage;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages, STV = Tr::kStagesV;
  constexpr int NCH = Tr::kChunks, NTILES = BS / 8, DTILES = D / 8;
  constexpr int kConsumerWarps = Tr::kConsumerWarps;
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const FusedKernelArgs& a = p.a;

  extern __shared__ unsigned char wgmma_smem[];
  const uint32_t sQ = (SmemAddress(wgmma_smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + Tr::kQBuffers * Tr::kQBytes;
  const uint32_t sV = sK + ST * Tr::kTileBytes;
  const uint32_t bars = sV + STV * Tr::kTileBytes;  // after the Q buffers and K/V stages
  constexpr int QB = Tr::kQBuffers;
  auto q_buffer = [&](int b) { return sQ + b * Tr::kQBytes; };
  auto full_q = [&](int b) { return bars + 8u * b; };
  auto empty_q = [&](int b) { return bars + 8u * (QB + b); };
  auto full_k = [&](int s) { return bars + 8u * (2 * QB + s); };
  auto full_v = [&](int s) { return bars + 8u * (2 * QB + ST + s); };
  auto empty_k = [&](int s) { return bars + 8u * (2 * QB + ST + STV + s); };
  auto empty_v = [&](int s) { return bars + 8u * (2 * QB + 2 * ST + STV + s); };

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;

  // The tiles this block computes, in order, each located as a QueryBlock: its grid position
  // (located once, here: a block without keys writes its zeros and leaves before any setup),
  // or a persistent block's share of PersistentTileOrder (one tile per round), skipping tiles
  // past a sequence's queries, then its pieces of a split last round. Every role walks the same
  // sequence; fn(blk, keys).
  QueryBlock<T> grid_block;
  if constexpr (!Tr::kPersistent) {
    // The indexed form with the grid's indices, not the grid form: that order is the one these
    // kernels were measured with (the grid form's order is the SIMT and mma.sync kernels').
    if (!LocateQueryBlock<T, BM, BS>(a, QueryBlockIndex(a.causal != 0), blockIdx.y, blockIdx.z, grid_block)) return;
    if (grid_block.n_tiles == 0) {
      ZeroBlockOutput<T, D, Tr::kThreads>(grid_block, a.o_row_stride);
      return;
    }
  }
  auto for_each_tile = [&](auto&& fn) {
    if constexpr (kSplit) {
      const PersistentTileOrder order = PersistentTileOrder::Of(a.q_len, BM, a.q_heads, a.batch, a.causal != 0);
      const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
      const SplitTail split = p.split_tail ? SplitTail::Plan(order, CeilDiv(a.kv_len, BS), blocks) : SplitTail{};
      const int64_t whole = split.active() ? split.first_tile : order.total;  // whole rounds when split
      const int64_t rounds = Tr::kTailLaunch ? 0 : (whole + blocks - 1) / blocks;  // a tail launch: pieces only
      // One call of fn, so the tile body is compiled once: rounds of whole tiles, then pieces.
      for (int64_t w = 0;; ++w) {
        int64_t t;
        TileKeys keys;
        keys.end = -1;  // every key tile
        if (w < rounds) {
          t = order.TileOf(w, block, blocks);
          if (t >= whole) continue;
        } else {
          if (!split.active() || !split.Piece(block, static_cast<int>(w - rounds), keys.slot, keys.begin, keys.end,
                                              keys.piece, keys.pieces)) {
            break;
          }
          keys.max_pieces = split.MaxPieces();
          t = split.first_tile + keys.slot;
        }
        int query_block, head, seq;
        order.Decode<typename Tr::TileIndex>(t, query_block, head, seq);
        QueryBlock<T> blk;
        if (!LocateQueryBlock<T, BM, BS>(a, query_block, head, seq, blk)) continue;
        if (keys.end < 0) keys.end = blk.n_tiles;
        fn(blk, keys);
      }
    } else if constexpr (Tr::kPersistent) {
      const PersistentTileOrder order =
          PersistentTileOrder::Of(a.q_len, BM, a.q_heads, a.batch, a.causal != 0, kPaired);
      // The pairs' decode in 32 bits (the launcher checks the count): in 64 the ping-pong
      // kernels with pairs spilled 36 bytes, in 32 they spill 20, as many as without pairs.
      using Index = std::conditional_t<kPaired, uint32_t, typename Tr::TileIndex>;
      const int blocks = static_cast<int>(gridDim.x);
      const int64_t rounds = order.Rounds(blocks);
      for (int64_t round = 0; round < rounds; ++round) {
        const int64_t t = order.TileOf(round, static_cast<int>(blockIdx.x), blocks);
        if constexpr (Tr::kTailLaunch) {
          if (t >= order.total - p.split_tail) continue;
        } else {
          if (t >= order.total) continue;
        }
        int query_block, head, seq;
        order.Decode<Index>(t, query_block, head, seq);
        QueryBlock<T> blk;
        if (LocateQueryBlock<T, BM, BS>(a, query_block, head, seq, blk)) fn(blk, TileKeys{0, blk.n_tiles});
      }
    } else {
      fn(grid_block, TileKeys{0, grid_block.n_tiles});
    }
  };

  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < QB; ++b) {
      MbarInit(full_q(b), 1);
      if constexpr (Tr::kPersistent) MbarInit(empty_q(b), kConsumerWarps);
    }
#pragma unroll
    for (int s = 0; s < STV; ++s) {  // STV >= ST
      if (s < ST) MbarInit(full_k(s), 1);
      MbarInit(full_v(s), 1);
      if (s < ST) MbarInit(empty_k(s), kConsumerWarps);
      MbarInit(empty_v(s), kConsumerWarps);
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {
    // ---- producer warpgroup: its first warp loads, the others only hand back registers ----
    SetMaxRegistersDecrease<Tr::kProducerRegs>();
    if (warp != kConsumerWarps) return;
    // Key tiles and query tiles loaded so far: K buffer s of key tile i is i % ST, its use count
    // i / ST picks the barrier parity (V: i % STV, i / STV); query tile i's Q buffer is i % QB,
    // the same way.
    int kv_loaded = 0, q_loaded = 0;
    for_each_tile([&](const QueryBlock<T>& blk, const TileKeys& keys) {
      if (blk.n_tiles == 0) return;  // persistent only: the consumers write its zeros
      const int n_tiles = keys.end - keys.begin, key_first = keys.begin * BS;
      const T* v_heads = static_cast<const T*>(a.v) + static_cast<int64_t>(blk.kv_head) * a.v_head_stride;
      // Persistent: the consumers release a Q buffer once its tile no longer needs it (a fresh
      // barrier counts as released).
      const int qb = q_loaded % QB;
      if constexpr (Tr::kPersistent) MbarWait(empty_q(qb), ((q_loaded / QB) & 1) ^ 1);
      if (lane == 0) {
        MbarExpectTx(full_q(qb), Tr::kQBytes);
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
          TmaLoad3d(q_buffer(qb) + c * BM * 128, &p.q_map, full_q(qb), 64 * c, blk.head,
                    static_cast<int>(blk.g.q_start + blk.m0));
        }
      }
      ++q_loaded;
      // The tile loop, compiled once per cache layout, so a contiguous cache's issue path
      // carries none of the paged one's bookkeeping (the table reads a tile ahead, the row
      // shuffles).
      auto produce = [&](auto paged_layout) {
        constexpr bool kPaged = decltype(paged_layout)::value;
        // Row of key `key` in K/V memory: contiguous, the sequence's own rows; paged, through
        // the block table, and past the pool (zero-filled by TMA) for a key past the sequence's
        // pages, whose table entries may hold anything.
        const int32_t* table = kPaged ? a.block_table + static_cast<int64_t>(blk.seq) * a.block_table_width : nullptr;
        const int n_pages = kPaged ? CeilDiv(blk.g.k_vis, a.page_size) : 0;
        auto key_row = [&](int key) -> int {
          if constexpr (!kPaged) {
            return static_cast<int>(blk.g.k_start + key);
          } else {
            const int page = key / a.page_size;
            return page < n_pages ? __ldg(table + page) * a.page_size + key % a.page_size
                                  : static_cast<int>(a.kv_total_rows);
          }
        };
        const int box = kPaged ? min(a.page_size, BS) : BS;  // rows per TMA box (the maps' box)
        constexpr int kMaxBoxes = kPaged ? BS / 16 : 1;       // pages are a multiple of 16 tokens
        // Paged: the row of box `lane` of tile j (lanes past the tile's boxes hold nothing),
        // read a tile ahead: the table reads of a tile are in flight together, while the warp
        // waits for the buffers, and not one after another on the path of every TMA issue.
        auto box_rows_of = [&](int j) { return lane * box < BS ? key_row(key_first + j * BS + lane * box) : 0; };
        int next_rows = kPaged ? box_rows_of(0) : 0;
        for (int j = 0; j < n_tiles; ++j) {
          const int i = kv_loaded + j;
          const int s = i % ST, sv = i % STV;
          const uint32_t free_parity = ((i / ST) & 1) ^ 1;  // a fresh barrier counts as released
          const uint32_t free_parity_v = ((i / STV) & 1) ^ 1;
          const int key0 = key_first + j * BS;
          int rows[kMaxBoxes];
          if constexpr (kPaged) {
#pragma unroll
            for (int b = 0; b < kMaxBoxes; ++b) rows[b] = __shfl_sync(0xffffffffu, next_rows, b);
            if (j + 1 < n_tiles) next_rows = box_rows_of(j + 1);
          } else {
            rows[0] = key_row(key0);
          }
          const uint32_t k_dst = sK + s * Tr::kTileBytes, v_dst = sV + sv * Tr::kTileBytes;
          // One K or V tile by TMA: its boxes (one per page, or the whole tile), 64 columns each.
          auto load_tile = [&](uint32_t dst, const CUtensorMap* map, uint32_t full) {
            if (lane != 0) return;
            MbarExpectTx(full, Tr::kTileBytes);
#pragma unroll
            for (int b = 0; b < kMaxBoxes; ++b) {
              if (b * box >= BS) break;
#pragma unroll
              for (int c = 0; c < NCH; ++c) {
                TmaLoad3d(dst + c * BS * 128 + b * box * 128, map, full, 64 * c, blk.kv_head, rows[b]);
              }
            }
          };
          MbarWait(empty_k(s), free_parity);
          load_tile(k_dst, &p.k_map, full_k(s));
          MbarWait(empty_v(sv), free_parity_v);
          const int valid = min(BS, blk.g.k_vis - key0);
          if (valid == BS) {
            load_tile(v_dst, &p.v_map, full_v(sv));
          } else {
            // Tail tile: zero-fill rows >= valid, write the SW128 layout TMA would have written
            // (16-byte unit u of row r lands at unit u ^ (r % 8)).
            for (int ci = lane; ci < BS * NCH * 8; ci += 32) {
              const int u = ci % 8, c = (ci / 8) % NCH, r = ci / (8 * NCH);
              const bool pred = r < valid;
              const uint32_t dst = v_dst + c * BS * 128 + r * 128 + ((u ^ (r & 7)) << 4);
              const T* src = pred ? v_heads + static_cast<int64_t>(key_row(key0 + r)) * a.v_row_stride + c * 64 + u * 8
                                  : v_heads;
              CpAsync16Shared(dst, src, pred);
            }
            CpAsyncCommit();
            CpAsyncWait<0>();
            FenceProxyAsyncShared();  // generic-proxy writes -> visible to wgmma (async proxy)
            __syncwarp();
            if (lane == 0) MbarArrive(full_v(sv));
          }
        }
      };
      if (a.page_size > 0) {
        produce(std::true_type{});
      } else {
        produce(std::false_type{});
      }
      kv_loaded += n_tiles;
    });
    if constexpr (kSplit && Tr::kTailLaunch) {
      // A tail launch may start before the whole rounds' launch has ended (programmatic
      // dependent launch); it ends after it, so what follows on the stream sees both.
      asm volatile("griddepcontrol.wait;\n" ::: "memory");
    }
    return;
  }

  // ---- consumer warpgroups ----
  SetMaxRegistersIncrease<Tr::kConsumerRegs>();
  const int wg = warp / 4;
  const int gr = lane / 4, tc = lane % 4;
  const int row0 = wg * 64 + (warp % 4) * 16 + gr;  // this thread's rows: row0 and row0 + 8
  const float c_log2 = a.scale_log2;
  // K-major SW128: leading offset unused (encoded 1), 8-row groups 1024 B apart.
  // MN-major SW128 (V): leading = next 64 head_dim columns (the other chunk), stride = next 8 keys.
  constexpr uint32_t kLboK = 16, kSboK = 1024, kLboV = BS * 128, kSboV = 1024;
  // Ping-pong: warpgroup w waits on barrier 1 + w before issuing its GEMMs of a step and then
  // lets the other one go (the other's barrier), so the tensor cores run one warpgroup's GEMMs
  // while the other computes its softmax. Per query tile, warpgroup 1 first gives warpgroup 0 the
  // first turn and skips its hand-over after its last step: each barrier then sees exactly as
  // many arrivals as waits, tile after tile.
  auto turn_wait = [&]() {
    if constexpr (Tr::kPingPong) NamedBarrierSync(1 + wg, 256);
  };
  auto turn_pass = [&]() {
    if constexpr (Tr::kPingPong) NamedBarrierArrive(1 + (wg ^ 1), 256);
  };

  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) MbarArrive(bar);
  };
  int kv_used = 0, q_used = 0;  // as the producer's counts
  for_each_tile([&](const QueryBlock<T>& blk, const TileKeys& keys) {
    // Steps j = 0 .. n_tiles - 1 visit key tiles keys.begin + j.
    const int n_tiles = keys.end - keys.begin, n_unmasked = blk.n_unmasked - keys.begin;
    if (blk.n_tiles == 0) {  // persistent only: the one-tile grid left above
      ZeroBlockOutput<T, D, 32 * kConsumerWarps>(blk, a.o_row_stride, tid);
      return;
    }
    int row_vis[2];
    float m_run[2], l_run[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_vis[r] = VisibleKeys(blk.g, blk.causal, blk.m0 + row0 + 8 * r);
      m_run[r] = -INFINITY;
      l_run[r] = 0.f;
    }
    float acc[DTILES][4];
#pragma unroll
    for (int dt = 0; dt < DTILES; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;
    float s[NTILES][4];
    uint32_t pa[BS / 16][4];
    const int qb = q_used % QB;
    const uint32_t q_base = q_buffer(qb) + wg * 64 * 128;  // this warpgroup's 64 rows

    auto issue_qk = [&](int j) {
      const int i = kv_used + j, st = i % ST;
      MbarWait(full_k(st), (i / ST) & 1);
      const uint32_t k_base = sK + st * Tr::kTileBytes;
      FenceOperands(s);
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t col = (ks % 4) * 32;  // 16 columns = 32 bytes inside the swizzle row
        Wgmma<BS, kBf16>::SS(s, Sw128Descriptor(q_base + (ks / 4) * BM * 128 + col, kLboK, kSboK),
                             Sw128Descriptor(k_base + (ks / 4) * BS * 128 + col, kLboK, kSboK),
                             ks > 0 ? 1 : 0);
      }
      WgmmaCommit();
    };
    auto issue_pv = [&](int j) {
      const int i = kv_used + j, st = i % STV;
      MbarWait(full_v(st), (i / STV) & 1);
      const uint32_t v_base = sV + st * Tr::kTileBytes;
      FenceOperands(acc);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        Wgmma<D, kBf16>::RSTrans(acc, pa[kk], Sw128Descriptor(v_base + kk * 16 * 128, kLboV, kSboV));
      }
      WgmmaCommit();
    };
    // Masks tile j, updates the running max/sum and turns s into probabilities; alpha = the
    // factor O must be rescaled by.
    auto softmax = [&](int j, float (&alpha)[2]) {
      FenceOperands(s);
      if (j >= n_unmasked) {
#pragma unroll
        for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = (keys.begin + j) * BS + nt * 8 + 2 * tc + (e % 2);
            if (key >= row_vis[e / 2]) s[nt][e] = -INFINITY;
          }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        alpha[r] = OnlineSoftmaxRow<2 * NTILES, 4>([&](int n) -> float& { return s[n / 2][2 * r + n % 2]; },
                                                   m_run[r], l_run[r], c_log2);
      }
    };
    auto pack = [&]() {
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        pa[kk][0] = PackPair<T>(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = PackPair<T>(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    };
    // After step j's GEMMs are issued: hand the turn over (warpgroup 1 not after its last step).
    auto pass_after = [&](int j) {
      if (wg == 0 || j + 1 < n_tiles) turn_pass();
    };

    if constexpr (Tr::kPingPong) {
      if (wg == 1) turn_pass();  // warpgroup 0 goes first
    }
    MbarWait(full_q(qb), (q_used / QB) & 1);
    ++q_used;
    turn_wait();
    issue_qk(0);
    pass_after(0);
    WgmmaWait<0>();
    release(empty_k(kv_used % ST));
    if constexpr (Tr::kPersistent && QB == 1) {
      if (n_tiles == 1) release(empty_q(qb));
    }
    // O's factor from the last softmax (kRescaleUnderQk: applied while the next S = Q K^T runs,
    // O being final up to the previous tile then; the first one scales zeros).
    float alpha[2];
    softmax(0, alpha);
    pack();
    auto rescale_o = [&]() {
      FenceOperands(acc);
#pragma unroll
      for (int dt = 0; dt < DTILES; ++dt) {
        acc[dt][0] *= alpha[0];
        acc[dt][1] *= alpha[0];
        acc[dt][2] *= alpha[1];
        acc[dt][3] *= alpha[1];
      }
    };
    for (int j = 1; j < n_tiles; ++j) {
      turn_wait();
      issue_qk(j);
      if constexpr (Tr::kRescaleUnderQk) rescale_o();
      issue_pv(j - 1);
      pass_after(j);
      WgmmaWait<1>();  // S_j is ready; P_{j-1} V_{j-1} may still run
      release(empty_k((kv_used + j) % ST));
      if constexpr (Tr::kPersistent && QB == 1) {
        if (j == n_tiles - 1) release(empty_q(qb));  // the tile's last read of Q is done
      }
      softmax(j, alpha);
      WgmmaWait<0>();
      release(empty_v((kv_used + j - 1) % STV));
      if constexpr (!Tr::kRescaleUnderQk) rescale_o();
      pack();
    }
    if constexpr (Tr::kRescaleUnderQk) rescale_o();
    issue_pv(n_tiles - 1);
    WgmmaWait<0>();
    if constexpr (Tr::kPersistent) release(empty_v((kv_used + n_tiles - 1) % STV));  // a next tile reuses it
    FenceOperands(acc);
    kv_used += n_tiles;

    float inv[2];
    bool split_piece = false;
    if constexpr (!kSplit) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[r] = l > 0.f ? 1.f / l : 0.f;
      }
    } else {
      float l_row[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l_row[r] = l_run[r];
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 1);
        l_row[r] += __shfl_xor_sync(0xffffffffu, l_row[r], 2);
      }
      // A piece of a split tile: each warp writes its rows' partial state, and the warp of the
      // last piece to finish merges the others' into its own and stores those rows of O.
      split_piece = keys.slot >= 0;
      if (split_piece && !MergeSplitPieces<Tr>(a, keys, acc, m_run, l_row)) {
        release(empty_q(qb));  // two Q buffers: released after the tile's epilogue
        return;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) inv[r] = l_row[r] > 0.f ? 1.f / l_row[r] : 0.f;
    }
    if (Tr::kStageO && !split_piece) {
      // O through shared memory: stmatrix into this warpgroup's rows of its Q buffer (the SW128
      // layout Q came in: 16-byte unit u of row r at u ^ (r % 8)), then whole rows out.
      const uint32_t o_stage = q_base;  // chunk c of row r at + c * BM * 128 + r * 128
      const int m = lane / 8, i = lane % 8;
      const int stage_row = (warp % 4) * 16 + (m % 2) * 8 + i;  // lane's row for stmatrix
#pragma unroll
      for (int dt = 0; dt < DTILES; dt += 2) {
        const int unit = dt + m / 2;  // 8-column group of matrix m
        StMatrixX4(o_stage + (unit / 8) * BM * 128 + stage_row * 128 + (((unit % 8) ^ i) << 4),
                   PackPair<T>(acc[dt][0] * inv[0], acc[dt][1] * inv[0]),
                   PackPair<T>(acc[dt][2] * inv[1], acc[dt][3] * inv[1]),
                   PackPair<T>(acc[dt + 1][0] * inv[0], acc[dt + 1][1] * inv[0]),
                   PackPair<T>(acc[dt + 1][2] * inv[1], acc[dt + 1][3] * inv[1]));
      }
      const int wg_tid = tid % 128;
      const int wg_rows = min(64, blk.q_rows - wg * 64);  // this warpgroup's rows in the tile
      const bool by_tma = wg_rows == 64;  // else rows past the tile may be another sequence's
      if (by_tma) FenceProxyAsyncShared();  // generic writes -> the TMA store's reads
      NamedBarrierSync(3 + wg, 128);        // the warpgroup's rows are staged
      if (by_tma) {
        if (wg_tid == 0) {
#pragma unroll
          for (int c = 0; c < NCH; ++c) {
            TmaStore3d(&p.o_map, o_stage + c * BM * 128, 64 * c, blk.head,
                       static_cast<int>(blk.g.q_start + blk.m0 + wg * 64));
          }
          BulkCommitGroup();
          BulkWaitGroupRead0();  // the buffer is reused (next Q) or freed (block exit) after this
        }
      } else {
        T* out = blk.o + static_cast<int64_t>(wg * 64) * a.o_row_stride;
#pragma unroll
        for (int it = 0; it < 64 * NCH * 8 / 128; ++it) {
          const int ci = it * 128 + wg_tid;
          const int u = ci % 8, c = (ci / 8) % NCH, r = ci / (8 * NCH);
          if (r < wg_rows) {
            *reinterpret_cast<uint4*>(out + r * a.o_row_stride + c * 64 + u * 8) =
                LdShared128(o_stage + c * BM * 128 + r * 128 + ((u ^ (r & 7)) << 4));
          }
        }
      }
      if constexpr (Tr::kPersistent) {
        FenceProxyAsyncShared();  // these reads before the next Q's TMA writes to the buffer
        release(empty_q(qb));
      }
    } else {
      if constexpr (Tr::kPersistent && QB == 2) release(empty_q(qb));  // a split piece's: Q's reads are done
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        if (row < blk.q_rows) {
          T* out = blk.o + row * a.o_row_stride + 2 * tc;
#pragma unroll
          for (int dt = 0; dt < DTILES; ++dt) {
            StorePair<T>(out + dt * 8, acc[dt][2 * r] * inv[r], acc[dt][2 * r + 1] * inv[r]);
          }
        }
      }
    }
  });
#else
  __trap();  // never launched: FusedCanImplement admits needs_sm90 instances only on sm_90
#endif
}

// An attribute of the current device (> 0), read once per device; 0 where it cannot be read.
// Thread-safe: launches from several threads may read it first together and store the same value.
template <cudaDeviceAttr kAttribute>
inline int DeviceAttributeOnce() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> values[kMaxDevices] = {};  // 0 = not read yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return 0;
  if (device < kMaxDevices) {
    if (const int known = values[device].load(std::memory_order_relaxed); known > 0) return known;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, kAttribute, device) != cudaSuccess || n < 0) return 0;
  if (device < kMaxDevices) values[device].store(n, std::memory_order_relaxed);
  return n;
}
// The persistent grid's size, and the L2 that decides its causal tile order.
inline int MultiprocessorCount() { return DeviceAttributeOnce<cudaDevAttrMultiProcessorCount>(); }
inline int L2CacheBytes() { return DeviceAttributeOnce<cudaDevAttrL2CacheSize>(); }

template <class Tr>
cudaError_t LaunchWgmma(const FusedKernelArgs& a, cudaStream_t stream) {
  using T = typename Tr::Storage;
  if (a.q_total_rows <= 0 || a.kv_total_rows <= 0) return cudaErrorNotSupported;
  WgmmaLaunchParams p{};
  p.a = a;
  constexpr StorageCode kStorage = StorageOf<T>();
  if (cudaError_t e = EncodeRowTileMap(&p.q_map, a.q, kStorage, Tr::kHeadDim, a.q_heads,
                                       a.q_total_rows, a.q_row_stride, a.q_head_stride, Tr::kBlockM);
      e != cudaSuccess) {
    return e;
  }
  // A paged cache is loaded one page (or block_s rows of one) per box.
  if (a.page_size > 0 && (a.page_size % 16 != 0 || (Tr::kBlockS % a.page_size != 0 && a.page_size % Tr::kBlockS != 0))) {
    return cudaErrorNotSupported;
  }
  const int box = a.page_size > 0 ? (a.page_size < Tr::kBlockS ? a.page_size : Tr::kBlockS) : Tr::kBlockS;
  if (cudaError_t e = EncodeRowTileMap(&p.k_map, a.k, kStorage, Tr::kHeadDim, a.kv_heads,
                                       a.kv_total_rows, a.k_row_stride, a.k_head_stride, box);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = EncodeRowTileMap(&p.v_map, a.v, kStorage, Tr::kHeadDim, a.kv_heads,
                                       a.kv_total_rows, a.v_row_stride, a.v_head_stride, box);
      e != cudaSuccess) {
    return e;
  }
  if constexpr (Tr::kStageO) {
    if (cudaError_t e = EncodeRowTileMap(&p.o_map, a.o, kStorage, Tr::kHeadDim, a.q_heads, a.q_total_rows,
                                         a.o_row_stride, a.o_head_stride, 64);
        e != cudaSuccess) {
      return e;
    }
  }
  dim3 grid(CeilDiv(a.q_len, Tr::kBlockM), a.q_heads, a.batch);
  p.split_tail = 0;
  SplitTail split;
  bool paired = false;
  if constexpr (Tr::kPersistent) {
    // At most one block per multiprocessor (a block fills one: __launch_bounds__(..., 1) and its
    // shared memory): PersistentTileOrder::Blocks, or every multiprocessor where the last round
    // is split.
    const int sms = MultiprocessorCount();
    if (sms <= 0) return cudaErrorNoDevice;
    const bool uniform = UniformLengths(a);
    if constexpr (Tr::kSplitTail || Tr::kTailLaunch) {
      // Planned only where the caller gave the workspace: a launch without it runs unsplit.
      if (a.split_partials != nullptr && a.split_counters != nullptr) {
        split = SplitTail::ForLaunch(a.q_len, a.kv_len, a.q_heads, a.batch, a.causal != 0, uniform, Tr::kBlockM,
                                     Tr::kBlockS, sms, Tr::kTailLaunch);
        if (split.active() && split.PartialFloats(32 * Tr::kConsumerWarps, Tr::kHeadDim) <= a.split_partial_floats &&
            split.Counters(Tr::kConsumerWarps) <= a.split_counter_count) {
          p.split_tail = 1;
        }
      }
    }
    // Under a causal mask, pairs of query blocks or longest first (PersistentTileOrder::PairsPay,
    // on the K/V's bytes: K and V of every sequence and KV head).
    const int64_t kv_bytes = 2 * static_cast<int64_t>(a.batch) * a.kv_heads * a.kv_len * Tr::kHeadDim *
                             static_cast<int64_t>(sizeof(T));
    if (a.causal_order == CausalTileOrder::kPairs && !uniform) return cudaErrorInvalidValue;
    paired = a.causal != 0 && !p.split_tail &&
             (a.causal_order == CausalTileOrder::kPairs ||
              (a.causal_order == CausalTileOrder::kAuto &&
               PersistentTileOrder::PairsPay(a.causal != 0, uniform, kv_bytes, L2CacheBytes())));
    // A split launch takes every multiprocessor (its last round is spread over them all).
    const PersistentTileOrder order =
        PersistentTileOrder::Of(a.q_len, Tr::kBlockM, a.q_heads, a.batch, a.causal != 0, paired);
    if ((Tr::kNarrowDecode || paired) && order.total > INT32_MAX) return cudaErrorNotSupported;  // Decode<uint32_t>
    grid = dim3(static_cast<unsigned>(p.split_tail ? sms : order.Blocks(sms, uniform)), 1, 1);
  }
  // The unsplit kernel: the whole launch, or (kTailLaunch) the whole rounds before the split round.
  const bool split_launch = p.split_tail != 0;
  if (!split_launch || Tr::kTailLaunch) {
    WgmmaLaunchParams unsplit = p;
    unsplit.split_tail = split_launch ? split.tiles : 0;  // the tiles left to the split launch
    if constexpr (Tr::kPersistent) {
      if (paired) {
        if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedWgmmaKernel<Tr, false, true>>(Tr::kSmemBytes);
            e != cudaSuccess) {
          return e;
        }
        FusedWgmmaKernel<Tr, false, true><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(unsplit);
        return cudaGetLastError();
      }
    }
    if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedWgmmaKernel<Tr>>(Tr::kSmemBytes); e != cudaSuccess) {
      return e;
    }
    FusedWgmmaKernel<Tr><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(unsplit);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess || !split_launch) return e;
  }
  // The split kernel: the whole launch (head_dim 64), or the split round alone (kTailLaunch) as a
  // programmatic dependent launch, whose blocks may start as the whole rounds' leave (they read
  // nothing those write; the split kernel waits for the first launch to end before it ends).
  if constexpr (Tr::kSplitTail || Tr::kTailLaunch) {
    if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedWgmmaKernel<Tr, true>>(Tr::kSmemBytes);
        e != cudaSuccess) {
      return e;
    }
    cudaLaunchAttribute dependent{};
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(Tr::kThreads, 1, 1);
    config.dynamicSmemBytes = Tr::kSmemBytes;
    config.stream = stream;
    config.attrs = &dependent;
    config.numAttrs = Tr::kTailLaunch ? 1 : 0;
    if (const cudaError_t e = cudaLaunchKernelEx(&config, FusedWgmmaKernel<Tr, true>, p); e != cudaSuccess) return e;
  }
  return cudaGetLastError();
}

template <typename T, int D, int BM, int BS, int ST, bool PingPong = false, bool Persistent = false>
FusedInstance WgmmaInstance() {
  using Tr = WgmmaTraits<T, D, BM, BS, ST, PingPong, Persistent>;
  FusedInstance inst{D,  StorageOf<T>(), std::is_same_v<T, __nv_bfloat16> ? PrecisionCode::kBf16 : PrecisionCode::kFp16,
                     BM, BS, Tr::kThreads, ST, Tr::kSmemBytes, &LaunchWgmma<Tr>, /*needs_sm90=*/true};
  inst.pingpong = PingPong;
  inst.persistent = Persistent;
  inst.split_tail = Tr::kSplitTail || Tr::kTailLaunch;
  inst.tail_launch = Tr::kTailLaunch;
  return inst;
}

// The instance table, shared by the fp16 and bf16 files.
template <typename T>
FusedInstanceList WgmmaTable() {
  constexpr bool kPingPong = true, kPersistent = true;
  static const FusedInstance kInstances[] = {
      // head_dim, block_m (64 rows per consumer warpgroup), block_s, stages[, ping-pong, persistent]
      WgmmaInstance<T, 64, 64, 128, 2>(),   WgmmaInstance<T, 64, 128, 128, 2>(),
      WgmmaInstance<T, 64, 192, 64, 2>(),   WgmmaInstance<T, 64, 128, 64, 3>(),
      WgmmaInstance<T, 64, 192, 64, 3>(),
      WgmmaInstance<T, 128, 64, 128, 2>(),  WgmmaInstance<T, 128, 128, 128, 2>(),
      WgmmaInstance<T, 128, 128, 128, 3>(), WgmmaInstance<T, 128, 128, 64, 3>(),
      // The warpgroup schedules: two consumer warpgroups in ping-pong, persistent blocks, both.
      WgmmaInstance<T, 64, 128, 128, 2, kPingPong>(),
      WgmmaInstance<T, 64, 128, 128, 2, false, kPersistent>(),
      WgmmaInstance<T, 64, 128, 128, 2, kPingPong, kPersistent>(),
      WgmmaInstance<T, 128, 128, 128, 2, kPingPong>(),
      WgmmaInstance<T, 128, 128, 128, 2, false, kPersistent>(),
      WgmmaInstance<T, 128, 128, 128, 2, kPingPong, kPersistent>(),
      WgmmaInstance<T, 128, 64, 128, 2, false, kPersistent>(),
      // Three K/V stages (230 KB of shared memory at d128) with each schedule: a load may take
      // two steps of the consumers before they wait for it.
      WgmmaInstance<T, 128, 128, 128, 3, kPingPong>(),
      WgmmaInstance<T, 128, 128, 128, 3, false, kPersistent>(),
      WgmmaInstance<T, 128, 128, 128, 3, kPingPong, kPersistent>(),
  };
  return ListOf(kInstances);
}

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_WGMMA_CUH_
