// Attention against a contiguous or paged KV cache (decode, and prefill over a cache), split
// over the keys (flash-decoding). Layout and rows: decode_instance.h.
//
// Block: one row block (block_m rows: the query heads of one KV group times the new tokens,
// token-major) of one sequence, one KV head and one key split. K/V tiles of block_s keys stream
// through `stages` cp.async buffers shared by every warp; a paged cache is gathered row by row
// through the block table, the page indices of the next tile loaded while the current one is
// issued. Tensor-core kernel (fp16/bf16): warps are laid out (block_m / 16) x warps_n; a warp
// owns 16 rows and block_s / warps_n keys of every tile, computes S = Q K^T and O += P V with
// mma.sync m16n8k16 and keeps its own online-softmax state; at the end the warps_n states of a
// row are merged exactly in shared memory. SIMT kernel (fp32 storage): exact fp32 FMAs, scores
// through shared memory. Both end in one epilogue: normalised O (one split), or the block's
// partial output and softmax state, which the last split block of its rows merges into O.
//
// Softmax state and exponents follow device_common.cuh (ExpShift): the max m in score units,
// the sum l relative to R(m), so extreme scales stay exact and -inf/NaN propagate as the
// reference says.
#ifndef FUSETUNE_KERNELS_CUDA_DECODE_DECODE_KERNEL_CUH_
#define FUSETUNE_KERNELS_CUDA_DECODE_DECODE_KERNEL_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_fp8.h>

#include "../fused/fused_mma.cuh"
#include "decode_instance.h"

namespace fusetune::cuda::decode {

using fused::CeilDiv;
using fused::CpAsync16;
using fused::CpAsyncCommit;
using fused::CpAsyncWait;
using fused::LdMatrixX4;
using fused::LdMatrixX4Trans;
using fused::Load4AsFloat;
using fused::Mma;
using fused::OnlineSoftmaxRow;
using fused::PackPair;
using fused::SetSharedMemoryLimitOnce;
using fused::SmemAddress;
using fused::Store4FromFloat;

template <typename T>
constexpr DecodeStorage DecodeStorageOf() {
  if constexpr (sizeof(T) == 4) {
    return DecodeStorage::kFp32;
  } else if constexpr (fused::StorageOf<T>() == fused::StorageCode::kFp16) {
    return DecodeStorage::kFp16;
  } else {
    return DecodeStorage::kBf16;
  }
}

// A sequence's geometry and its causal/padding mask are the fused kernels' (fused_common.cuh):
// one definition of where a sequence's rows are and which keys a query sees. For a paged cache
// only the key counts are used (the rows are where the block table says).
using fused::LoadSequenceGeometry;
using fused::SequenceGeometry;
using fused::VisibleKeys;

// Which work a block does: its sequence, KV head, split, row block and key range.
struct DecodeBlock {
  SequenceGeometry seq;
  int b = 0, kv_head = 0, split = 0;
  int row_block = 0;
  int row0 = 0;       // first row of the block within the sequence's rows
  int rows = 0;       // valid rows (<= block_m)
  int key_begin = 0;  // the split's keys [key_begin, key_end) (key_end <= the rows' visible keys)
  int key_end = 0;
  int n_tiles = 0;
};

// Decodes blockIdx.x = ((b * kv_heads + kv_head) * row_blocks + row_block_from_last) * splits +
// split. The row blocks of one (sequence, KV head) are neighbours in launch order, so they run
// at the same time and read the same K/V tiles: one read from memory, the others from L2
// (with the row blocks far apart, a decode step of 16 new tokens in GQA groups of 4 read its
// cache four times). Within a (sequence, KV head) the heaviest causal row block goes first.
// False when the block has no rows.
template <int BM, int BS>
__device__ __forceinline__ bool LocateDecodeBlock(const DecodeKernelArgs& a, DecodeBlock& blk) {
  int idx = blockIdx.x;
  blk.split = idx % a.splits;
  idx /= a.splits;
  const int rb = a.row_blocks - 1 - idx % a.row_blocks;
  const int bk = idx / a.row_blocks;
  blk.row_block = rb;
  blk.b = bk / a.kv_heads;
  blk.kv_head = bk % a.kv_heads;
  blk.seq = LoadSequenceGeometry(a, blk.b);
  const int n_rows = a.group * blk.seq.q_len;
  blk.row0 = rb * BM;
  if (blk.row0 >= n_rows) return false;
  blk.rows = min(BM, n_rows - blk.row0);
  // The block's last row is its last token: it sees the most keys.
  const int k_max = VisibleKeys(blk.seq, a.causal != 0, (blk.row0 + blk.rows - 1) / a.group);
  // Splits cover whole tiles of the sequence's keys; trailing splits of a short cache are empty.
  const int per_split = CeilDiv(CeilDiv(blk.seq.k_vis, a.splits), BS) * BS;
  blk.key_begin = min(blk.split * per_split, k_max);
  blk.key_end = min(blk.key_begin + per_split, k_max);
  blk.n_tiles = CeilDiv(blk.key_end - blk.key_begin, BS);
  return true;
}

// One 16-byte cp.async of K/V (zero-filled when !pred) with a 128-byte L2 prefetch: 2.0–2.6 %
// faster on every decode shape measured on an H200 (development driver, alternated builds);
// 256 bytes, with or without evict-first, changed nothing (docs/perf.md).
__device__ __forceinline__ void CpAsyncKv16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(dst)), "l"(src),
               "r"(pred ? 16 : 0));
}

// Streams the block's K/V tiles into shared memory: thread `tid` copies kPer 16-byte chunks
// per tile, the consecutive rows (tid / kChunksPerRow) * kPer + i at one column. For a paged
// cache the page of those rows is read from the block table one tile ahead, and nothing uses
// the loaded index until that tile is issued: a GPU thread stalls at the first use of a load, so
// using it at once would put a table read's latency into every tile. When every page holds whole
// runs of kPer rows (pages of a multiple of kPer tokens: 16 and up), one table read serves a
// thread's rows of a tile; otherwise each row reads its own.
template <typename T, int D, int BS, int NT>
struct DecodeKvLoader {
  static constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
  static constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  static_assert(NT % kChunksPerRow == 0, "threads must cover whole rows");
  static constexpr int kRowStep = NT / kChunksPerRow;
  static_assert(BS % kRowStep == 0, "a tile must be whole passes of the block's threads");
  static constexpr int kPer = BS / kRowStep;

  const T* k;
  const T* v;
  int64_t kv_row_stride;  // elements between consecutive key rows (kv_heads * D)
  const int32_t* table;   // this sequence's block-table row, or nullptr (contiguous)
  int page_size;
  uint32_t page_magic;    // PageDivisorMagic(page_size)
  int64_t k_start;        // contiguous cache: the sequence's first key row
  int key_begin, key_end;
  int row0, col;          // this thread's first row in a tile and its column (elements)
  int64_t head_offset;    // kv_head * D + col
  bool page_holds_run;    // paged, page_size % kPer == 0: the thread's kPer rows share a page
  int next_page[kPer];    // paged: the pages of the next tile's rows (read, not yet used)

  // Key of row i of tile `tile` for this thread (key_begin is a multiple of block_s).
  __device__ __forceinline__ int Key(int tile, int i) const { return key_begin + tile * BS + row0 + i; }
  __device__ __forceinline__ int PageOf(int j) const {
    return page_magic == 0 ? j : static_cast<int>(__umulhi(static_cast<uint32_t>(j), page_magic));
  }

  __device__ __forceinline__ void LookUp(int tile) {
    if (table == nullptr) return;
    // Only the entries of the sequence's own pages are valid (and validated): none past key_end.
    if (page_holds_run) {
      const int j = Key(tile, 0);
      next_page[0] = j < key_end ? __ldg(table + PageOf(j)) : 0;
      return;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int j = Key(tile, i);
      next_page[i] = j < key_end ? __ldg(table + PageOf(j)) : 0;
    }
  }

  // Copies tile `tile` (whose pages LookUp(tile) read) into sK/sV rows of pitch kPitch
  // elements, zero-filling rows past the split, then reads the pages of tile + 1.
  template <int kPitch>
  __device__ __forceinline__ void Issue(int tile, T* sK, T* sV) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int j = Key(tile, i);
      const bool valid = j < key_end;
      const int page = page_holds_run ? next_page[0] : next_page[i];
      const int64_t row = table != nullptr ? static_cast<int64_t>(page) * page_size + (j - PageOf(j) * page_size)
                                           : k_start + j;
      const int64_t offset = valid ? row * kv_row_stride + head_offset : 0;
      const int r = row0 + i;
      CpAsyncKv16(sK + r * kPitch + col, k + offset, valid);
      CpAsyncKv16(sV + r * kPitch + col, v + offset, valid);
    }
    LookUp(tile + 1);
  }
};

template <typename T, int D, int BS, int NT>
__device__ __forceinline__ DecodeKvLoader<T, D, BS, NT> MakeDecodeKvLoader(const DecodeKernelArgs& a,
                                                                          const DecodeBlock& blk) {
  using L = DecodeKvLoader<T, D, BS, NT>;
  L ld;
  ld.k = static_cast<const T*>(a.k);
  ld.v = static_cast<const T*>(a.v);
  ld.kv_row_stride = static_cast<int64_t>(a.kv_heads) * D;
  ld.table = a.page_size > 0 ? a.block_table + static_cast<int64_t>(blk.b) * a.block_table_width : nullptr;
  ld.page_size = a.page_size;
  ld.page_magic = a.page_magic;
  ld.k_start = blk.seq.k_start;
  ld.key_begin = blk.key_begin;
  ld.key_end = blk.key_end;
  ld.row0 = (threadIdx.x / L::kChunksPerRow) * L::kPer;
  ld.col = (threadIdx.x % L::kChunksPerRow) * L::kElemsPerChunk;
  ld.head_offset = static_cast<int64_t>(blk.kv_head) * D + ld.col;
  ld.page_holds_run = a.page_size > 0 && a.page_size % L::kPer == 0;
  ld.LookUp(0);
  return ld;
}

// Copies the block's Q rows (row r: token (row0 + r) / group, head kv_head * group +
// (row0 + r) % group) into sQ (pitch kPitch), zero-filling rows past the block's rows.
template <typename T, int D, int BM, int NT, int kPitch>
__device__ __forceinline__ void LoadDecodeQ(const DecodeKernelArgs& a, const DecodeBlock& blk, T* sQ) {
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  const T* q = static_cast<const T*>(a.q);
  for (int c = threadIdx.x; c < BM * kChunksPerRow; c += NT) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * kElemsPerChunk;
    const bool valid = r < blk.rows;
    const T* src = q;
    if (valid) {
      const int row = blk.row0 + r;
      const int64_t token = blk.seq.q_start + row / a.group;
      const int head = blk.kv_head * a.group + row % a.group;
      src = q + (token * a.q_heads + head) * D + col;
    }
    CpAsync16(sQ + r * kPitch + col, src, valid);
  }
}

// O of one (token, head) row (`row` = token * q_heads + head), columns [col, col + 4), from the
// `splits` partial entries of the row: exact, each rescaled by its log-sum-exp. The entries were
// written by other blocks of the launch: read through L2 (__ldcg), never a stale L1 line.
template <typename T>
__device__ __forceinline__ void MergeSplitsIntoO(const DecodeKernelArgs& a, int64_t row, int col) {
  const int64_t rows = a.total_q * a.q_heads;
  const float c = a.scale_log2;
  float m = -INFINITY;
  // Unrolled so the loads of several splits are in flight together: this merge runs after
  // every other block of its rows has finished, so its L2 round trips are the launch's tail
  // (one at a time they cost about 0.15 us per split).
#pragma unroll 8
  for (int s = 0; s < a.splits; ++s) m = fmaxf(m, __ldcg(a.partial_ml + 2 * (s * rows + row)));
  const ExpShift to = MakeExpShift(m, c);
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = 0; s < a.splits; ++s) {
    const int64_t e = s * rows + row;
    const float ms = __ldcg(a.partial_ml + 2 * e), ls = __ldcg(a.partial_ml + 2 * e + 1);
    // Loaded before the branches (every split block writes its entry, zeros when empty), so
    // the unrolled iterations' loads do not wait for one another.
    const float4 x = __ldcg(reinterpret_cast<const float4*>(a.partial + e * a.head_dim + col));
    if (m == -INFINITY) {
      l += ls;  // 0, or NaN from a NaN score
      continue;
    }
    if (ms == -INFINITY) continue;  // an empty split
    const float f = exp2f(RescaleExponent(MakeExpShift(ms, c), to, c));
    l += ls * f;
    acc.x += x.x * f;
    acc.y += x.y * f;
    acc.z += x.z * f;
    acc.w += x.w * f;
  }
  const float inv = InverseOfSum(l);
  Store4FromFloat<T>(static_cast<T*>(a.o) + row * a.head_dim + col,
                     make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
}

// The epilogue both kernels share: WN partial states per row (acc [WN][BM][D], m and l
// [WN][BM] in shared memory, each relative to R(its m)) merged exactly, then either normalised
// into O (one split) or written as the block's partial entry. With several splits, the last
// block of a (row block, sequence, KV head) to finish — counted on its split counter — merges
// every split's entries into O and sets the counter back to zero for the next launch, so a
// launch is one kernel (no combine launch) and CUDA-graph friendly.
template <typename T, int D, int BM, int WN, int NT>
__device__ __forceinline__ void DecodeEpilogue(const DecodeKernelArgs& a, const DecodeBlock& blk,
                                               const float* sAcc, const float* sM, const float* sL) {
  const float c = a.scale_log2;
  for (int idx = threadIdx.x; idx < BM * (D / 4); idx += NT) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    if (r >= blk.rows) continue;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < WN; ++w) m = fmaxf(m, sM[w * BM + r]);
    float l = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (m != -INFINITY) {
      const ExpShift to = MakeExpShift(m, c);
#pragma unroll
      for (int w = 0; w < WN; ++w) {
        const float mw = sM[w * BM + r];
        if (mw == -INFINITY) continue;  // an empty state: l = 0, acc = 0
        const float f = exp2f(RescaleExponent(MakeExpShift(mw, c), to, c));
        const float4 x = *reinterpret_cast<const float4*>(sAcc + (w * BM + r) * D + col);
        l += sL[w * BM + r] * f;
        acc.x += x.x * f;
        acc.y += x.y * f;
        acc.z += x.z * f;
        acc.w += x.w * f;
      }
    } else {
#pragma unroll
      for (int w = 0; w < WN; ++w) l += sL[w * BM + r];  // 0, or NaN from a NaN score
    }
    const int row = blk.row0 + r;
    const int64_t token = blk.seq.q_start + row / a.group;
    const int head = blk.kv_head * a.group + row % a.group;
    if (a.splits == 1) {
      const float inv = InverseOfSum(l);
      Store4FromFloat<T>(static_cast<T*>(a.o) + (token * a.q_heads + head) * D + col,
                         make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    } else {
      const int64_t e = (static_cast<int64_t>(blk.split) * a.total_q + token) * a.q_heads + head;
      *reinterpret_cast<float4*>(a.partial + e * D + col) = acc;
      if (col == 0) {
        a.partial_ml[2 * e] = m;
        a.partial_ml[2 * e + 1] = l;
      }
    }
  }
  if (a.splits == 1) return;
  __shared__ int last_split;
  __threadfence();  // this block's entries are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = a.split_counters +
                   (static_cast<int64_t>(blk.row_block) * a.batch + blk.b) * a.kv_heads + blk.kv_head;
    last_split = atomicAdd(counter, 1) == a.splits - 1;
    if (last_split) atomicExch(counter, 0);
  }
  __syncthreads();
  if (!last_split) return;
  __threadfence();
  for (int idx = threadIdx.x; idx < BM * (D / 4); idx += NT) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    if (r >= blk.rows) continue;
    const int row = blk.row0 + r;
    const int64_t token = blk.seq.q_start + row / a.group;
    const int head = blk.kv_head * a.group + row % a.group;
    MergeSplitsIntoO<T>(a, token * a.q_heads + head, col);
  }
}

// ---- tensor-core kernel (fp16, bf16) --------------------------------------------------------

template <typename T, int D, int BM, int BS, int W, int ST, typename KV = T>
struct DecodeMmaTraits {
  using Storage = T;  // Q and O
  using KvStorage = KV;  // K and V: T, or uint8_t for e4m3
  static constexpr int kThreads = W * 32;
  static constexpr int kWarpsM = BM / 16;
  static constexpr int kWarpsN = W / kWarpsM;
  static constexpr int kKeysPerWarp = BS / kWarpsN;
  static_assert(BM % 16 == 0 && W % kWarpsM == 0, "warps tile the rows by 16");
  static_assert(kKeysPerWarp % 16 == 0, "each warp takes whole k16 steps of every tile");
  static_assert(ST >= 2 && ST <= 4, "2 to 4 K/V stages");
  static constexpr int kPitch = D + 8;  // Q: 16 bytes of padding, conflict-free ldmatrix
  static constexpr int kRowBytes = kPitch * static_cast<int>(sizeof(T));
  // K/V rows: D elements and 16 bytes of padding (an odd number of 16-byte units per row).
  static constexpr int kKvRowBytes = D * static_cast<int>(sizeof(KV)) + 16;
  static constexpr int kKvPitch = kKvRowBytes / static_cast<int>(sizeof(KV));
  static constexpr int kKvTileElems = BS * kKvPitch;
  static constexpr int kPipeBytes = BM * kRowBytes + 2 * ST * BS * kKvRowBytes;
  static constexpr int kMergeBytes = kWarpsN * BM * (D + 2) * 4;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
};

// ---- e4m3 K/V on the fp16 tensor cores ------------------------------------------------------
//
// An e4m3 value is exactly an fp16 value, so K and V are widened in registers (one cvt per
// pair) and both products run as fp16 m16n8k16 with fp32 accumulation. The fragments are read
// from the byte tiles with the 16-bit ldmatrix, which hands each thread four consecutive bytes
// (K) or a 2 x 2 block of bytes (V, transposed): the head_dim order inside a k16 step is
// permuted to match, identically in Q and K (a dot product does not care), and in O's columns
// (undone when O is written).
//   K: thread (gr, tc) gets key gr, d 4tc..4tc+3 of a 16-wide chunk: bytes 0-1 are the mma's
//      k = 2tc, 2tc+1 (b0) and bytes 2-3 its k = 2tc+8, 2tc+9 (b1); Q's A fragment takes the
//      same d (PermutedQFragments).
//   V: thread (gr, tc) gets keys 2tc, 2tc+1 at d 2gr, 2gr+1: the even and the odd d are two n8
//      tiles of O (E4m3PairOf picks a column's two keys).

// Two e4m3 bytes (lo, hi) as an fp16 pair, exact.
__device__ __forceinline__ uint32_t E4m3x2ToHalf2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// From a transposed 2 x 2 byte block (bytes: (k0, d0), (k0, d1), (k1, d0), (k1, d1)) the fp16
// pair of column d0 (kOdd false) or d1 (kOdd true): keys k0, k1.
template <bool kOdd>
__device__ __forceinline__ uint32_t E4m3PairOf(uint32_t block) {
  return E4m3x2ToHalf2(__byte_perm(block, 0u, kOdd ? 0x0031u : 0x0020u));
}

// Q's A fragments in fp16 for the e4m3 path, rows gr and gr + 8 of the warp's 16 (`rows`:
// the warp's first row in sQ), d permuted as the K fragments: a0/a1 = d 4tc, 4tc+1 and a2/a3 =
// d 4tc+2, 4tc+3 of each 16-wide chunk. Each row is scaled by 2^e (e chosen so its largest
// finite |q| lands in [2^14, 2^15): exact, and any bf16 row fits fp16's range); `unscale[r]`
// returns 2^-e times `k_scale`, the factor that turns the row's fp16 scores into scores.
template <typename T, int D, int RB>
__device__ __forceinline__ void PermutedQFragments(const unsigned char* sQ, int rows, int gr, int tc, float k_scale,
                                                   uint32_t (&qf)[D / 16][4], float (&unscale)[2]) {
  float x[2][D / 16][4];
  float amax[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const T* row = reinterpret_cast<const T*>(sQ + (rows + gr + 8 * r) * RB);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const float4 v = Load4AsFloat<T>(row + 16 * ks + 4 * tc);
      x[r][ks][0] = v.x;
      x[r][ks][1] = v.y;
      x[r][ks][2] = v.z;
      x[r][ks][3] = v.w;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float a = fabsf(x[r][ks][e]);
        if (a <= 3.0e38f) amax[r] = fmaxf(amax[r], a);  // finite only (NaN compares false)
      }
    }
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 1));
    amax[r] = fmaxf(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], 2));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int e = amax[r] > 0.f ? 14 - ilogbf(amax[r]) : 0;
    unscale[r] = scalbnf(k_scale, -e);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) x[r][ks][i] = scalbnf(x[r][ks][i], e);
    }
  }
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    qf[ks][0] = PackPair<__half>(x[0][ks][0], x[0][ks][1]);
    qf[ks][1] = PackPair<__half>(x[1][ks][0], x[1][ks][1]);
    qf[ks][2] = PackPair<__half>(x[0][ks][2], x[0][ks][3]);
    qf[ks][3] = PackPair<__half>(x[1][ks][2], x[1][ks][3]);
  }
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) DecodeMmaKernel(const DecodeKernelArgs a) {
  using T = typename Tr::Storage;
  using KV = typename Tr::KvStorage;
  constexpr bool kE4m3 = std::is_same_v<KV, uint8_t>;
  using C = std::conditional_t<kE4m3, __half, T>;  // the products' operand type
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, P = Tr::kPitch, RB = Tr::kRowBytes;
  constexpr int KP = Tr::kKvPitch, KRB = Tr::kKvRowBytes, KTE = Tr::kKvTileElems;
  constexpr int WM = Tr::kWarpsM, WN = Tr::kWarpsN, KW = Tr::kKeysPerWarp;
  constexpr int NB = KW / 8;       // n8 tiles of S per warp
  constexpr int QKS = D / 16;      // k16 steps of QK^T
  constexpr int DT = D / 8;        // n8 tiles of O

  extern __shared__ __align__(128) unsigned char decode_smem[];
  T* sQ = reinterpret_cast<T*>(decode_smem);
  KV* sK = reinterpret_cast<KV*>(decode_smem + BM * RB);
  KV* sV = sK + ST * KTE;

  DecodeBlock blk;
  if (!LocateDecodeBlock<BM, BS>(a, blk)) return;
  const int n_tiles = blk.n_tiles;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gr = lane / 4, tc = lane % 4;
  const int wm = warp % WM, wn = warp / WM;
  const float c = a.scale_log2;

  auto kv = MakeDecodeKvLoader<KV, D, BS, NT>(a, blk);
  if (n_tiles > 0) {
    LoadDecodeQ<T, D, BM, NT, P>(a, blk, sQ);
    CpAsyncCommit();
#pragma unroll
    for (int t = 0; t < ST - 1; ++t) {
      if (t < n_tiles) kv.template Issue<KP>(t, sK + t * KTE, sV + t * KTE);
      CpAsyncCommit();
    }
  }

  // Per thread: rows gr and gr + 8 of the warp's 16.
  int lim[2];
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dt][e] = 0.f;
  int warp_min_lim = 0x7fffffff;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int br = wm * 16 + gr + 8 * r;
    const int row = blk.row0 + br;
    lim[r] = min(VisibleKeys(blk.seq, a.causal != 0, row / a.group), blk.key_end);
    // Rows past the block's rows are never written: they need no mask.
    if (br < blk.rows) warp_min_lim = min(warp_min_lim, lim[r]);
  }
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) warp_min_lim = min(warp_min_lim, __shfl_xor_sync(0xffffffffu, warp_min_lim, off));

  uint32_t qf[QKS][4];
  float unscale[2] = {1.f, 1.f};  // e4m3: k_scale x 2^-e of rows gr and gr + 8
  [[maybe_unused]] const uint32_t sQ_addr = SmemAddress(sQ);
  const uint32_t sK_addr = SmemAddress(sK);
  const uint32_t sV_addr = SmemAddress(sV);
  [[maybe_unused]] const uint32_t a_lane_off = (lane % 16) * RB + (lane / 16) * 16;
  const uint32_t b_lane_off = ((lane % 8) + 8 * (lane / 16)) * KRB + ((lane / 8) % 2) * 16;
  const uint32_t v_lane_off = ((lane % 8) + 8 * ((lane / 8) % 2)) * KRB + (lane / 16) * 16;

  for (int t = 0; t < n_tiles; ++t) {
    CpAsyncWait<ST - 2>();
    __syncthreads();
    {
      const int nt = t + ST - 1;
      const int nbuf = nt % ST;
      if (nt < n_tiles) kv.template Issue<KP>(nt, sK + nbuf * KTE, sV + nbuf * KTE);
      CpAsyncCommit();
    }
    if (t == 0) {
      if constexpr (kE4m3) {
        PermutedQFragments<T, D, RB>(decode_smem, wm * 16, gr, tc, __ldg(a.k_scale + blk.kv_head), qf, unscale);
      } else {
#pragma unroll
        for (int ks = 0; ks < QKS; ++ks) LdMatrixX4(qf[ks], sQ_addr + wm * 16 * RB + a_lane_off + ks * 32);
      }
    }
    const int buf = t % ST;
    const int key0 = blk.key_begin + t * BS + wn * KW;  // the warp's first key of this tile

    float s[NB][4];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = 0.f;
    const uint32_t k_base = sK_addr + (buf * BS + wn * KW) * KRB + b_lane_off;
    if constexpr (kE4m3) {
      // One ldmatrix: 16 keys x 32 bytes; kb[0]/kb[1] keys 0-7, d [0, 16)/[16, 32); kb[2]/kb[3]
      // keys 8-15.
#pragma unroll
      for (int kq = 0; kq < D / 32; ++kq) {
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
          uint32_t kb[4];
          LdMatrixX4(kb, k_base + np * 16 * KRB + kq * 32);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            Mma<__half>(s[2 * np + i / 2], qf[2 * kq + i % 2], E4m3x2ToHalf2(kb[i]), E4m3x2ToHalf2(kb[i] >> 16));
          }
        }
      }
      // The row's fp16 scores back to scores (before the mask: 0 x -inf would be NaN).
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nb][e] *= unscale[e / 2];
    } else {
#pragma unroll
      for (int ks = 0; ks < QKS; ++ks) {
#pragma unroll
        for (int np = 0; np < NB / 2; ++np) {
          uint32_t kb[4];
          LdMatrixX4(kb, k_base + np * 16 * KRB + ks * 32);
          Mma<T>(s[2 * np], qf[ks], kb[0], kb[1]);
          Mma<T>(s[2 * np + 1], qf[ks], kb[2], kb[3]);
        }
      }
    }
    if (key0 + KW > warp_min_lim) {  // a tile crossing some row's last visible key
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + nb * 8 + 2 * tc + (e % 2) >= lim[e / 2]) s[nb][e] = -INFINITY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float alpha = OnlineSoftmaxRow<2 * NB, 4>(
          [&](int n) -> float& { return s[n / 2][2 * r + n % 2]; }, m_run[r], l_run[r], c);
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        acc[dt][2 * r] *= alpha;
        acc[dt][2 * r + 1] *= alpha;
      }
    }
    const uint32_t v_base = sV_addr + (buf * BS + wn * KW) * KRB + v_lane_off;
#pragma unroll
    for (int kk = 0; kk < KW / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = PackPair<C>(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = PackPair<C>(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = PackPair<C>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = PackPair<C>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      if constexpr (kE4m3) {
        // One transposed ldmatrix: 16 keys x 32 bytes; vb[0]/vb[1] keys 0-7/8-15 at d [0, 16),
        // vb[2]/vb[3] at d [16, 32). O tiles 4g .. 4g+3: d 2n, 2n+1, 16+2n, 17+2n of the group.
#pragma unroll
        for (int g = 0; g < D / 32; ++g) {
          uint32_t vb[4];
          LdMatrixX4Trans(vb, v_base + kk * 16 * KRB + g * 32);
          Mma<__half>(acc[4 * g], pa, E4m3PairOf<false>(vb[0]), E4m3PairOf<false>(vb[1]));
          Mma<__half>(acc[4 * g + 1], pa, E4m3PairOf<true>(vb[0]), E4m3PairOf<true>(vb[1]));
          Mma<__half>(acc[4 * g + 2], pa, E4m3PairOf<false>(vb[2]), E4m3PairOf<false>(vb[3]));
          Mma<__half>(acc[4 * g + 3], pa, E4m3PairOf<true>(vb[2]), E4m3PairOf<true>(vb[3]));
        }
      } else {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vb[4];
          LdMatrixX4Trans(vb, v_base + kk * 16 * KRB + dp * 32);
          Mma<T>(acc[2 * dp], pa, vb[0], vb[1]);
          Mma<T>(acc[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the merge area

  float* sAcc = reinterpret_cast<float*>(decode_smem);
  float* sM = sAcc + WN * BM * D;
  float* sL = sM + WN * BM;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int br = wm * 16 + gr + 8 * r;
    float* row = sAcc + (wn * BM + br) * D;
    if constexpr (kE4m3) {
      // Undo the column permutation: d 32g + 16h + 4tc + {0, 1, 2, 3} are tiles 4g + 2h (n 2tc),
      // 4g + 2h + 1 (n 2tc), 4g + 2h (n 2tc + 1), 4g + 2h + 1 (n 2tc + 1); V's scale applied here.
      const float vs = __ldg(a.v_scale + blk.kv_head);
#pragma unroll
      for (int g = 0; g < D / 32; ++g)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float* t0 = acc[4 * g + 2 * h];
          const float* t1 = acc[4 * g + 2 * h + 1];
          *reinterpret_cast<float4*>(row + 32 * g + 16 * h + 4 * tc) =
              make_float4(t0[2 * r] * vs, t1[2 * r] * vs, t0[2 * r + 1] * vs, t1[2 * r + 1] * vs);
        }
    } else {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        *reinterpret_cast<float2*>(row + dt * 8 + 2 * tc) = make_float2(acc[dt][2 * r], acc[dt][2 * r + 1]);
    }
    if (tc == 0) {
      sM[wn * BM + br] = m_run[r];
      sL[wn * BM + br] = l;
    }
  }
  __syncthreads();
  DecodeEpilogue<T, D, BM, WN, NT>(a, blk, sAcc, sM, sL);
}

// ---- SIMT kernel (exact fp32) ---------------------------------------------------------------

template <typename T, int D, int BM, int BS, int W, int ST>
struct DecodeSimtTraits {
  using Storage = T;
  static constexpr int kThreads = W * 32;
  static_assert(BS % 32 == 0 && ST >= 2 && ST <= 4, "whole warps of keys; 2 to 4 stages");
  static_assert((BM * D / 4) % kThreads == 0, "each thread owns whole float4s of O");
  static constexpr int kPitch = D + 16 / static_cast<int>(sizeof(T));  // 16-byte padding
  static constexpr int kTileElems = BS * kPitch;
  static constexpr int kRowsPerWarp = (BM + W - 1) / W;
  static constexpr int kScorePitch = BS + 1;
  // sQ (fp32, D) | sK, sV (storage, ST tiles) | scores [BM][BS + 1] | alpha, m, l [BM]
  static constexpr int kSmemBytes = BM * D * 4 + 2 * ST * kTileElems * static_cast<int>(sizeof(T)) +
                                    BM * kScorePitch * 4 + 3 * BM * 4;
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) DecodeSimtKernel(const DecodeKernelArgs a) {
  using T = typename Tr::Storage;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, P = Tr::kPitch, W = NT / 32, RPW = Tr::kRowsPerWarp;
  constexpr int SP = Tr::kScorePitch;
  constexpr int kOut = BM * D / 4 / NT;  // float4s of O per thread

  extern __shared__ __align__(128) unsigned char decode_smem[];
  float* sQ = reinterpret_cast<float*>(decode_smem);
  T* sK = reinterpret_cast<T*>(sQ + BM * D);
  T* sV = sK + ST * Tr::kTileElems;
  float* sS = reinterpret_cast<float*>(sV + ST * Tr::kTileElems);
  float* sAlpha = sS + BM * SP;
  float* sM = sAlpha + BM;
  float* sL = sM + BM;

  DecodeBlock blk;
  if (!LocateDecodeBlock<BM, BS>(a, blk)) return;
  const int n_tiles = blk.n_tiles;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const float c = a.scale_log2;

  // Q as fp32 (through the K tile buffer 0 for the raw copy would need a barrier dance; a
  // direct load is as cheap for a few rows).
  const T* q = static_cast<const T*>(a.q);
  for (int idx = tid; idx < BM * D / 4; idx += NT) {
    const int r = idx / (D / 4), col = (idx % (D / 4)) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < blk.rows) {
      const int row = blk.row0 + r;
      const int64_t token = blk.seq.q_start + row / a.group;
      const int head = blk.kv_head * a.group + row % a.group;
      const T* src = q + (token * a.q_heads + head) * D + col;
      x = make_float4(ToFloat(src[0]), ToFloat(src[1]), ToFloat(src[2]), ToFloat(src[3]));
    }
    *reinterpret_cast<float4*>(sQ + r * D + col) = x;
  }
  auto kv = MakeDecodeKvLoader<T, D, BS, NT>(a, blk);
#pragma unroll
  for (int t = 0; t < ST - 1; ++t) {
    if (t < n_tiles) kv.template Issue<P>(t, sK + t * Tr::kTileElems, sV + t * Tr::kTileElems);
    CpAsyncCommit();
  }

  // Warp `warp` owns rows warp + i * W: their running max and this lane's part of the sum.
  float m_run[RPW], l_run[RPW];
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
  }
  float4 acc[kOut];
#pragma unroll
  for (int i = 0; i < kOut; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int t = 0; t < n_tiles; ++t) {
    CpAsyncWait<ST - 2>();
    __syncthreads();
    {
      const int nt = t + ST - 1;
      const int nbuf = nt % ST;
      if (nt < n_tiles) kv.template Issue<P>(nt, sK + nbuf * Tr::kTileElems, sV + nbuf * Tr::kTileElems);
      CpAsyncCommit();
    }
    const int buf = t % ST;
    const T* k_tile = sK + buf * Tr::kTileElems;
    const T* v_tile = sV + buf * Tr::kTileElems;
    const int tile0 = blk.key_begin + t * BS;
    // Scores: consecutive threads take consecutive keys of one row (16-byte K reads hit
    // distinct bank groups: the padded pitch is an odd number of 16-byte units).
    for (int idx = tid; idx < BM * BS; idx += NT) {
      const int r = idx / BS, j = idx % BS;
      const float* qr = sQ + r * D;
      const T* kr = k_tile + j * P;
      float sc = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; d += 4) {
        const float4 qv = *reinterpret_cast<const float4*>(qr + d);
        const float4 kv4 = Load4AsFloat<T>(kr + d);
        sc = fmaf(qv.x, kv4.x, sc);
        sc = fmaf(qv.y, kv4.y, sc);
        sc = fmaf(qv.z, kv4.z, sc);
        sc = fmaf(qv.w, kv4.w, sc);
      }
      const int row = blk.row0 + r;
      const int lim = min(VisibleKeys(blk.seq, a.causal != 0, row / a.group), blk.key_end);
      sS[r * SP + j] = tile0 + j < lim ? sc : -INFINITY;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int r = warp + i * W;
      if (r < BM) {
        float* srow = sS + r * SP;
        const float alpha = OnlineSoftmaxRow<BS / 32, 32>(
            [&](int n) -> float& { return srow[lane + 32 * n]; }, m_run[i], l_run[i], c);
        if (lane == 0) sAlpha[r] = alpha;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kOut; ++i) {
      const int g = tid + i * NT;
      const int r = g / (D / 4), col = (g % (D / 4)) * 4;
      const float alpha = sAlpha[r];
      float4 x = acc[i];
      x.x *= alpha;
      x.y *= alpha;
      x.z *= alpha;
      x.w *= alpha;
      const float* prow = sS + r * SP;
#pragma unroll 4
      for (int j = 0; j < BS; ++j) {
        const float p = prow[j];
        const float4 vv = Load4AsFloat<T>(v_tile + j * P + col);
        x.x = fmaf(p, vv.x, x.x);
        x.y = fmaf(p, vv.y, x.y);
        x.z = fmaf(p, vv.z, x.z);
        x.w = fmaf(p, vv.w, x.w);
      }
      acc[i] = x;
    }
  }
  CpAsyncWait<0>();
  __syncthreads();
  // The merge area: acc [1][BM][D] over sK (the pipeline is done), m and l beside the scores.
  float* sAcc = reinterpret_cast<float*>(sK);
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int r = warp + i * W;
    float l = l_run[i];
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    if (r < BM && lane == 0) {
      sM[r] = m_run[i];
      sL[r] = l;
    }
  }
#pragma unroll
  for (int i = 0; i < kOut; ++i) {
    const int g = tid + i * NT;
    const int r = g / (D / 4), col = (g % (D / 4)) * 4;
    *reinterpret_cast<float4*>(sAcc + r * D + col) = acc[i];
  }
  __syncthreads();
  DecodeEpilogue<T, D, BM, 1, NT>(a, blk, sAcc, sM, sL);
}

// ---- launch -------------------------------------------------------------------------------

template <typename T, int D, int BM, int BS, int W, int ST, bool kSimt, typename KV = T>
struct DecodeTraits : std::conditional_t<kSimt, DecodeSimtTraits<T, D, BM, BS, W, ST>,
                                         DecodeMmaTraits<T, D, BM, BS, W, ST, KV>> {
  static constexpr int kHeadDim = D, kBlockM = BM, kBlockS = BS, kStages = ST;
};

// The kernel of an instance: the SIMT body for exact fp32, the tensor-core one otherwise (only
// the chosen one is instantiated).
template <class Tr, bool kSimt>
constexpr auto DecodeKernelOf() {
  if constexpr (kSimt) {
    return &DecodeSimtKernel<Tr>;
  } else {
    return &DecodeMmaKernel<Tr>;
  }
}

template <class Tr, bool kSimt>
cudaError_t LaunchDecodeKernel(const DecodeKernelArgs& a, cudaStream_t stream) {
  constexpr auto kKernel = DecodeKernelOf<Tr, kSimt>();
  const int64_t blocks = static_cast<int64_t>(a.row_blocks) * a.batch * a.kv_heads * a.splits;
  if (blocks <= 0 || blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (const cudaError_t e = SetSharedMemoryLimitOnce<kKernel>(Tr::kSmemBytes); e != cudaSuccess) return e;
  kKernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

template <class Tr, bool kSimt>
int DecodeBlocksPerSm() {
  constexpr auto kKernel = DecodeKernelOf<Tr, kSimt>();
  int blocks = 0;
  cudaError_t e = SetSharedMemoryLimitOnce<kKernel>(Tr::kSmemBytes);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, Tr::kThreads, Tr::kSmemBytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return blocks;
}

template <typename T, int D, int BM, int BS, int W, int ST, typename KV = T>
DecodeInstance DecodeMmaInstance() {
  using Tr = DecodeTraits<T, D, BM, BS, W, ST, false, KV>;
  return DecodeInstance{D, DecodeStorageOf<T>(), std::is_same_v<KV, uint8_t>, BM, BS, Tr::kThreads, ST,
                        Tr::kSmemBytes, &LaunchDecodeKernel<Tr, false>, &DecodeBlocksPerSm<Tr, false>};
}

template <typename T, int D, int BM, int BS, int W, int ST>
DecodeInstance DecodeSimtInstance() {
  using Tr = DecodeTraits<T, D, BM, BS, W, ST, true>;
  return DecodeInstance{D, DecodeStorageOf<T>(), false, BM, BS, Tr::kThreads, ST, Tr::kSmemBytes,
                        &LaunchDecodeKernel<Tr, true>, &DecodeBlocksPerSm<Tr, true>};
}

// The tensor-core tables, one per storage type (each .cu instantiates one, so they compile in
// parallel). block_m 16: decode (a KV group's heads x up to 16 / group tokens in one block;
// the warps split each tile's keys). block_m 64: prefill over a cache (the warps split rows).
template <typename T>
DecodeInstanceList DecodeMmaTable() {
  static const DecodeInstance kInstances[] = {
      // head_dim, block_m, block_s, warps, stages
      DecodeMmaInstance<T, 64, 16, 64, 4, 2>(),   DecodeMmaInstance<T, 64, 16, 64, 4, 3>(),
      DecodeMmaInstance<T, 64, 16, 128, 4, 2>(),  DecodeMmaInstance<T, 64, 16, 128, 8, 3>(),
      DecodeMmaInstance<T, 64, 64, 64, 4, 2>(),   DecodeMmaInstance<T, 64, 64, 64, 4, 3>(),
      DecodeMmaInstance<T, 128, 16, 64, 4, 2>(),  DecodeMmaInstance<T, 128, 16, 64, 4, 3>(),
      DecodeMmaInstance<T, 128, 16, 64, 4, 4>(),  DecodeMmaInstance<T, 128, 16, 128, 4, 2>(),
      DecodeMmaInstance<T, 128, 16, 128, 8, 2>(), DecodeMmaInstance<T, 128, 16, 128, 8, 3>(),
      DecodeMmaInstance<T, 128, 16, 32, 2, 4>(),
      DecodeMmaInstance<T, 128, 64, 64, 4, 2>(),  DecodeMmaInstance<T, 128, 64, 32, 4, 3>(),
  };
  return DecodeListOf(kInstances);
}

// The e4m3-K/V tables (Q/O in T): a tile is half the bytes of a 16-bit one, so longer tiles
// (block_s 256) fit three stages; block_m 64 for a prefill over an e4m3 cache.
template <typename T>
DecodeInstanceList DecodeE4m3Table() {
  using E4m3 = uint8_t;
  static const DecodeInstance kInstances[] = {
      // head_dim, block_m, block_s, warps, stages
      DecodeMmaInstance<T, 64, 16, 64, 4, 3, E4m3>(),   DecodeMmaInstance<T, 64, 16, 128, 8, 3, E4m3>(),
      DecodeMmaInstance<T, 64, 64, 64, 4, 2, E4m3>(),
      DecodeMmaInstance<T, 128, 16, 64, 4, 3, E4m3>(),  DecodeMmaInstance<T, 128, 16, 64, 4, 4, E4m3>(),
      DecodeMmaInstance<T, 128, 16, 128, 8, 2, E4m3>(), DecodeMmaInstance<T, 128, 16, 128, 8, 3, E4m3>(),
      DecodeMmaInstance<T, 128, 16, 256, 8, 2, E4m3>(), DecodeMmaInstance<T, 128, 16, 256, 8, 3, E4m3>(),
      DecodeMmaInstance<T, 128, 64, 64, 4, 2, E4m3>(),
  };
  return DecodeListOf(kInstances);
}

}  // namespace fusetune::cuda::decode

#endif  // FUSETUNE_KERNELS_CUDA_DECODE_DECODE_KERNEL_CUH_
