// The CUDA decode kernel family's argument block and compiled instance table, shared by the
// kernel sources (.cu), the host dispatch (decode_dispatch.cc) and the standalone development
// driver (decode_dev.cu).
//
// Like fused/fused_instance.h this header has no absl and no fusetune/kernels includes, so nvcc
// compiles the kernels and the development driver without third-party headers.
//
// The family computes attention of a few query tokens per sequence against a KV cache that is
// contiguous or paged (vLLM's block tables): one thread block per (row block, KV split,
// sequence, KV head). The rows of a block are the query heads of one KV group times the
// sequence's query tokens, token-major (row r is token r / group, query head
// kv_head * group + r % group), so every K/V tile is read from memory once per KV head and
// serves all the group's query heads on the tensor cores. Each split covers a contiguous range
// of whole key tiles of the sequence; with more than one split, every block leaves its
// unnormalised partial output and its softmax state (max in score units, sum) in the workspace,
// and the last block of a (row block, sequence, KV head) to finish merges them exactly (by
// their log-sum-exp) into O: one kernel per launch.
//
// Thread-safety: the tables are immutable after static initialisation.
#ifndef FUSETUNE_KERNELS_CUDA_DECODE_DECODE_INSTANCE_H_
#define FUSETUNE_KERNELS_CUDA_DECODE_DECODE_INSTANCE_H_

#include <cstdint>

#include "../../gpu/gpu_runtime.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::decode {

// Same numbering as fusetune::DType (static_assert'ed in decode_dispatch.cc).
enum class DecodeStorage : int { kFp32 = 0, kFp16 = 1, kBf16 = 2 };

// Everything a decode launch needs, already validated by the host (block table included).
struct DecodeKernelArgs {
  // Q, O: [total_q][q_heads][head_dim]; K, V: [total_k][kv_heads][head_dim] (contiguous) or
  // [pages][page_size][kv_heads][head_dim] (paged), storage dtype (K/V: the instance's, e4m3
  // bytes for a kv_e4m3 instance), 16-byte aligned.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // kv_e4m3 instances: kv_heads fp32 scales each (key j of head h = e4m3 value * k_scale[h]).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int batch = 0, q_heads = 0, kv_heads = 0;
  int group = 1;   // q_heads / kv_heads
  int head_dim = 0;
  int q_len = 0;   // uniform query tokens per sequence (the maximum for varlen)
  int kv_len = 0;  // uniform stored keys per sequence (the maximum for varlen)
  // Varlen: batch + 1 prefix sums, or nullptr for a uniform batch. For a paged varlen batch,
  // cu_seqlens_k gives only the key counts (the keys live where the block table says).
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // Uniform batch: visible keys per sequence (key padding; a paged cache's lengths), or nullptr.
  const int32_t* kv_valid_lens = nullptr;
  int causal = 0;           // bottom-right aligned
  float scale_log2 = 1.0f;  // softmax scale * log2(e)
  // Paged cache: page_size > 0; key j of sequence b is row j % page_size of page
  // block_table[b * block_table_width + j / page_size]. page_size 0: contiguous.
  const int32_t* block_table = nullptr;
  int block_table_width = 0;
  int page_size = 0;
  uint32_t page_magic = 0;  // PageDivisorMagic(page_size): j / page_size as one multiply-high
  // Key splits per sequence (>= 1). With more than one, the blocks write `partial` (fp32,
  // entry e = (split * total_q + token) * q_heads + head: head_dim accumulators at
  // partial + e * head_dim, then max and sum at partial_ml + 2 * e) and count themselves on
  // split_counters (row_blocks * batch * kv_heads ints, entry (row_block * batch + b) *
  // kv_heads + kv_head): zero before the first launch, left zero by every completed launch.
  int splits = 1;
  float* partial = nullptr;
  float* partial_ml = nullptr;
  int* split_counters = nullptr;
  int64_t total_q = 0;  // query tokens in all (rows of Q)
  int row_blocks = 1;   // ceil(group * q_len / block_m): blocks per (sequence, KV head, split)
};

// Floats of workspace a launch with `splits` > 1 needs (0 for one split).
inline int64_t DecodeWorkspaceFloats(int64_t total_q, int q_heads, int head_dim, int splits) {
  return splits > 1 ? static_cast<int64_t>(splits) * total_q * q_heads * (head_dim + 2) : 0;
}

// The multiplier that turns a key index j (< 2^20, kMaxSeqLen) into j / page_size with one
// multiply-high: ceil(2^32 / page_size), exact for j < 2^20 and page sizes 2..256 (the error
// j * (m - 2^32 / p) / 2^32 < 2^-12 never crosses an integer, since frac(j / p) <= 1 - 1 / p and
// 1 / p >= 2^-8). 0 for page size 1 (j itself). A runtime division per gathered row costs more
// instructions than the rest of a tile's work.
inline uint32_t PageDivisorMagic(int page_size) {
  if (page_size <= 1) return 0;
  return static_cast<uint32_t>(((uint64_t{1} << 32) + static_cast<uint64_t>(page_size) - 1) /
                               static_cast<uint64_t>(page_size));
}

// Split counters a launch with `splits` > 1 needs: one per (row block, sequence, KV head).
inline int64_t DecodeSplitCounterCount(int row_blocks, int batch, int kv_heads) {
  return static_cast<int64_t>(row_blocks) * batch * kv_heads;
}

using DecodeLaunchFn = cudaError_t (*)(const DecodeKernelArgs&, cudaStream_t);
// Blocks of the instance one multiprocessor of the current device holds at once (0 on error).
using DecodeOccupancyFn = int (*)();

// One compiled instantiation. block_m: rows per block (a multiple of 16 on the tensor cores);
// block_s: keys per K/V tile; threads: per block; stages: K/V tiles in flight (cp.async).
// Precision: the storage type's own on the tensor cores (fp16, bf16); fp32 storage runs exact
// fp32 FMAs (SIMT). kv_e4m3: K/V stored as e4m3 bytes, widened exactly to fp16 in registers,
// the products in fp16 whatever Q's storage (Q rows scaled by a power of two into fp16 range).
struct DecodeInstance {
  int head_dim;
  DecodeStorage storage;  // Q and O
  bool kv_e4m3;
  int block_m;
  int block_s;
  int threads;
  int stages;
  int smem_bytes;  // dynamic shared memory per block
  DecodeLaunchFn launch;
  DecodeOccupancyFn blocks_per_sm;
};

struct DecodeInstanceList {
  const DecodeInstance* data;
  int size;
};

template <int N>
constexpr DecodeInstanceList DecodeListOf(const DecodeInstance (&table)[N]) {
  return {table, N};
}

// One function per source file, so the families compile in parallel.
DecodeInstanceList DecodeBf16Instances();  // decode_bf16.cu
DecodeInstanceList DecodeFp16Instances();  // decode_fp16.cu
DecodeInstanceList DecodeFp32Instances();  // decode_fp32.cu
DecodeInstanceList DecodeE4m3Instances();  // decode_e4m3.cu: K/V e4m3, Q/O fp16 and bf16

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::decode

#endif  // FUSETUNE_KERNELS_CUDA_DECODE_DECODE_INSTANCE_H_
