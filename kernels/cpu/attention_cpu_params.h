// Plain parameter blocks shared by the CPU backend (cpu_backend.cc) and the kernel bodies
// (attention_kernels.inc), which are compiled once per instruction set. This header must stay
// free of inline functions and standard-library templates: a kernel translation unit built
// with -mavx512f must not emit out-of-line copies of shared inline code that the linker could
// pick for the rest of the program.
//
// Thread-safety: plain data.
#ifndef FUSETUNE_KERNELS_CPU_ATTENTION_CPU_PARAMS_H_
#define FUSETUNE_KERNELS_CPU_ATTENTION_CPU_PARAMS_H_

#include <cstddef>
#include <cstdint>

namespace fusetune::cpu {

// Storage type of the tensors (the kernels decode it themselves, vectorized).
enum class StorageFormat : int { kFp32 = 0, kFp16 = 1, kBf16 = 2 };

// Rounding applied to the operands of the two products (emulates tensor-core inputs).
enum class OperandRounding : int { kNone = 0, kTf32 = 1, kFp16 = 2, kBf16 = 3 };

// Multiples the kernels' register blocking relies on: tiles are padded up to them.
inline constexpr int kLanes = 16;     // columns per vector block

struct CpuAttentionParams {
  const void* q = nullptr;  // [total_q][q_heads][head_dim], storage dtype
  const void* k = nullptr;  // [total_k][kv_heads][head_dim], or paged (below)
  const void* v = nullptr;
  void* o = nullptr;        // [total_q][q_heads][head_dim]
  StorageFormat storage = StorageFormat::kFp32;  // of q/o, and of k/v unless kv_e4m3 is set
  int storage_bytes = 4;    // bytes per element of q/o (and of k/v unless kv_e4m3 is set)
  // K/V stored as FP8 e4m3 (KvStorage::kE4m3): the value of each of the 256 bytes (exact
  // floats, NaN for 0x7f/0xff); null when K/V are in `storage`. K/V elements are then 1 byte
  // and widened through this table; their per-head scales are folded into scale_log2 (K) and
  // v_scale (V).
  const float* kv_e4m3 = nullptr;
  int kv_bytes = 4;         // bytes per element of k/v
  // Encodes `count` floats into storage (output rows; outside the hot loops).
  void (*encode)(const float* src, size_t count, void* dst) = nullptr;
  OperandRounding rounding = OperandRounding::kNone;

  int q_heads = 1;
  int kv_heads = 1;
  int heads_per_kv = 1;
  int head_dim = 64;
  int head_dim_padded = 64;  // head_dim rounded up to kLanes (row stride of Q/V/acc tiles)
  int block_m = 64;          // multiple of kLanes
  int block_s = 64;          // multiple of kLanes
  // Per KV head (kv_heads entries): softmax scale * log2(e), times the head's K scale when K
  // is e4m3; scores stay in score units and only (s - m) is multiplied by it (exp2 domain).
  const float* scale_log2 = nullptr;
  // Per KV head, the V scale applied to the normalized output (e4m3 V); null: 1.
  const float* v_scale = nullptr;

  // Per sequence b (batch entries).
  const int64_t* q_start = nullptr;  // first query token
  const int64_t* k_start = nullptr;  // first key token (contiguous K/V)
  const int32_t* q_len = nullptr;    // queries
  // Per query token (global row): keys [0, n) of its sequence are visible (causal and
  // padding masks, computed once by VisibleKeysForQuery so every variant agrees).
  const int32_t* visible_keys = nullptr;

  // Paged K/V (page_block_size > 0): K and V are [pages][page_block_size][kv_heads][head_dim]
  // and sequence b's key j is row j % page_block_size of page
  // block_table[b * block_table_width + j / page_block_size] (entries validated by the
  // backend before the launch). 0: contiguous, key j of sequence b is row k_start[b] + j.
  const int32_t* block_table = nullptr;
  int block_table_width = 0;
  int page_block_size = 0;

  // Split-KV (fused tasks with split >= 0): each split of a query row leaves its unnormalized
  // accumulator and its log-sum-exp as the running max m (score units) and sum l (exp2
  // domain); the combine merges the `splits` entries of each row. Entry (split, global query
  // token T, query head H) is e = (split * total_q + T) * q_heads + H: split_acc + e *
  // head_dim_padded, split_m[e], split_l[e].
  float* split_acc = nullptr;
  float* split_m = nullptr;
  float* split_l = nullptr;
  int64_t total_q = 0;
  int splits = 1;

  // Partial/materialized: fp32 scores/probabilities, key-major per (sequence, head) so that
  // a tile of keys x queries is contiguous per key: entry (b, h, key j, query i) is at
  // workspace + ws_offset[b] + (h * ws_keys[b] + j) * q_len[b] + i.
  float* workspace = nullptr;
  const int64_t* ws_offset = nullptr;
  const int32_t* ws_keys = nullptr;
};

// One unit of parallel work over sequence b: task rows [row0, row0 + rows) of the sequence's
// (query token, query head) rows for heads h .. h + group - 1, token-major: row g is token
// g / group, head h + g % group (group 1: one head, row = token; group heads_per_kv: the
// query heads of one KV group share each K/V tile), against the keys [key_begin, key_end)
// of the sequence. split < 0: the task writes O; split >= 0: its split-KV partial entries.
struct CpuTask {
  int b = 0;
  int h = 0;
  int row0 = 0;
  int rows = 0;  // 1..block_m
  int group = 1;
  int key_begin = 0;
  int key_end = 0x7fffffff;
  int split = -1;
};

// Per-worker scratch, 64-byte aligned, sized in cpu_backend.cc.
struct CpuScratch {
  float* qt = nullptr;    // [head_dim][block_m]        Q of the task, transposed
  float* k = nullptr;     // [block_s][head_dim_padded] K tile (when it needs converting)
  float* v = nullptr;     // [block_s][head_dim_padded] V tile (when it needs converting)
  float* st = nullptr;    // [block_s][block_m]         scores / probabilities, key-major
  float* acc = nullptr;   // [block_m][head_dim_padded] output accumulator
  float* m = nullptr;     // [block_m] running max (exp2 domain)
  float* l = nullptr;     // [block_m] running sum
  float* row = nullptr;   // [head_dim_padded] conversion staging
  float* zero = nullptr;  // [head_dim_padded] zeros (stands in for keys past a tile's end)
  int32_t* visible = nullptr;   // [block_m] visible key count of each task row
  int64_t* key_rows = nullptr;  // [block_s] K/V row of each key of the tile (paged lookups)
};

// The kernel bodies of one instruction set.
struct CpuKernelTable {
  const char* isa;  // "avx512", "avx2", "generic"
  // Fused: O rows of the task, online softmax over key tiles.
  void (*fused)(const CpuAttentionParams&, const CpuTask&, const CpuScratch&);
  // Scores of the task's rows into the workspace (exp2 domain, visible keys only); with
  // `softmax` the rows are then turned into probabilities in place (partial variant).
  void (*scores)(const CpuAttentionParams&, const CpuTask&, const CpuScratch&, bool softmax);
  // Softmax of the task's workspace rows in place (materialized variant's second pass).
  void (*softmax)(const CpuAttentionParams&, const CpuTask&, const CpuScratch&);
  // O rows = P V from the workspace probabilities.
  void (*pv)(const CpuAttentionParams&, const CpuTask&, const CpuScratch&);
  // O rows of the task (its split field ignored) from the `splits` partial entries of the
  // fused split tasks: exact, rescaled by each split's log-sum-exp.
  void (*combine)(const CpuAttentionParams&, const CpuTask&, const CpuScratch&);
};

const CpuKernelTable& GenericKernels();
const CpuKernelTable& Avx2Kernels();
const CpuKernelTable& Avx512Kernels();

}  // namespace fusetune::cpu

#endif  // FUSETUNE_KERNELS_CPU_ATTENTION_CPU_PARAMS_H_
