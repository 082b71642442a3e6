// The table of compiled fused-kernel instantiations, shared by the kernel sources (.cu) and
// the host dispatch (fused_dispatch.cc).
//
// This header deliberately has no absl and no fusetune/kernels includes, so nvcc compiles the
// kernel sources without third-party headers; fused_dispatch.cc converts the public
// AttentionParams into FusedKernelArgs and picks an entry of the table.
//
// Thread-safety: the tables are immutable after static initialisation.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_INSTANCE_H_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_INSTANCE_H_

#include <cstdint>

#include "../../gpu/gpu_runtime.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused {

// Same numbering as fusetune::DType and fusetune::Precision (static_assert'ed in
// fused_dispatch.cc).
enum class StorageCode : int { kFp32 = 0, kFp16 = 1, kBf16 = 2 };
enum class PrecisionCode : int { kFp32 = 0, kTf32 = 1, kFp16 = 2, kBf16 = 3 };

// The tile order of a persistent Hopper launch under a causal mask (PersistentTileOrder,
// persistent_tile_order.h): the launcher's choice (PairsPay), longest first, or pairs of query
// blocks (sequences of equal lengths only: a launch that asks for pairs otherwise is refused
// with cudaErrorInvalidValue). The backend always leaves the choice to the launcher; the other
// two are for tests and measurements of the orders themselves.
enum class CausalTileOrder : int { kAuto = 0, kLongestFirst = 1, kPairs = 2 };

// Everything a kernel needs, already validated by the backend. AttentionParams (the host's
// parameter block, ../attention_params.h) derives from it, so the backend fills it once.
struct FusedKernelArgs {
  // Tensors in the layout of problem.h ([tokens][heads][head_dim]), storage dtype.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Row strides in elements (tokens dimension) and head strides.
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, o_row_stride = 0;
  int q_head_stride = 0, k_head_stride = 0, v_head_stride = 0, o_head_stride = 0;
  int batch = 0, q_heads = 0, kv_heads = 0;
  int heads_per_kv = 1;       // q_heads / kv_heads; LaunchFused sets it
  int q_len = 0, kv_len = 0;  // uniform lengths, or the maxima for varlen
  // Device arrays of batch+1 prefix sums (varlen), or nullptr for a uniform batch.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // Device array of batch visible key counts (key padding), or nullptr.
  const int32_t* kv_valid_lens = nullptr;
  int causal = 0;             // bottom-right aligned causal mask when nonzero
  float scale_log2 = 1.0f;    // softmax scale * log2(e), > 0
  // Rows of Q/O and of K/V in memory (sum of the sequence lengths); 0 = unknown. The Hopper
  // TMA kernel needs them as tensor bounds and refuses to launch (cudaErrorNotSupported) at 0.
  int64_t q_total_rows = 0, kv_total_rows = 0;
  // Paged K/V (a prefill over a cache; the Hopper kernel only): key j of sequence b is row
  // j % page_size of page block_table[b * block_table_width + j / page_size] of the pool, whose
  // rows kv_total_rows counts. page_size 0: contiguous K/V.
  const int32_t* block_table = nullptr;
  int block_table_width = 0;
  int page_size = 0;
  // The split last round of a persistent Hopper launch (SplitTail, persistent_tile_order.h):
  // device memory for the pieces' partial states and one arrival counter per split tile and
  // consumer warp (zero before a launch; a completed launch leaves them zero), with their sizes
  // in floats and in counters. The launcher splits only where the plan fits them; nullptr: never.
  float* split_partials = nullptr;
  int64_t split_partial_floats = 0;
  int32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
  // Host-only (the launcher reads it; no kernel does). Last, so the fields every kernel reads
  // keep the offsets they had before the persistent schedule, and its kernels their code.
  CausalTileOrder causal_order = CausalTileOrder::kAuto;  // persistent Hopper launches (above)
};

// Whether every sequence of the launch has q_len queries and sees all kv_len keys: no varlen
// prefix sums, no key padding (the persistent schedules' tile order and split depend on it).
inline bool UniformLengths(const FusedKernelArgs& a) {
  return a.cu_seqlens_q == nullptr && a.cu_seqlens_k == nullptr && a.kv_valid_lens == nullptr;
}

// The shapes, strides and exp2 scale of `batch` sequences of (at most) q_len queries and kv_len
// keys in the layout of problem.h (rows of heads x head_dim, contiguous): the one filling of
// these fields (AttentionParamsFor, and the Hopper dev library that has no AttentionProblem).
// Pointers, length arrays, total rows, pages and heads_per_kv stay the caller's.
inline void SetContiguousGeometry(FusedKernelArgs& a, int batch, int q_heads, int kv_heads, int head_dim, int q_len,
                                  int kv_len, int causal, float scale) {
  a.q_row_stride = a.o_row_stride = static_cast<int64_t>(q_heads) * head_dim;
  a.k_row_stride = a.v_row_stride = static_cast<int64_t>(kv_heads) * head_dim;
  a.q_head_stride = a.k_head_stride = a.v_head_stride = a.o_head_stride = head_dim;
  a.batch = batch;
  a.q_heads = q_heads;
  a.kv_heads = kv_heads;
  a.q_len = q_len;
  a.kv_len = kv_len;
  a.causal = causal;
  a.scale_log2 = scale * 1.4426950408889634f;  // log2(e)
}

using FusedLaunchFn = cudaError_t (*)(const FusedKernelArgs&, cudaStream_t);

// One compiled instantiation: the config it implements and its launcher.
struct FusedInstance {
  int head_dim;
  StorageCode storage;
  PrecisionCode precision;
  int block_m;
  int block_s;
  int threads;
  int stages;
  int smem_bytes;  // dynamic shared memory per block
  FusedLaunchFn launch;
  // Hopper-only kernel (wgmma + TMA, compiled for sm_90a): FusedCanImplement rejects it on
  // other GPUs.
  bool needs_sm90 = false;
  // The Hopper kernel's schedules (KernelConfig's axes of the same names): the two consumer
  // warpgroups issue their GEMMs in alternation; one block per multiprocessor walks the tiles.
  bool pingpong = false;
  bool persistent = false;
  // A persistent instance that splits its last round along the keys where that pays (SplitTail),
  // given the workspace; its consumer warps are (threads - 128) / 32. tail_launch: as a launch of
  // its own after the whole rounds' (SplitTail::ForLaunch's tail_launch).
  bool split_tail = false;
  bool tail_launch = false;

  // Whether this instance is the one compiled for that config: the one test of a config
  // against the table (the dispatch's, and the Hopper dev library's, which has no KernelConfig).
  bool Implements(int head_dim_, StorageCode storage_, PrecisionCode precision_, int block_m_, int block_s_,
                  int threads_, int stages_, bool pingpong_, bool persistent_) const {
    return head_dim == head_dim_ && storage == storage_ && precision == precision_ && block_m == block_m_ &&
           block_s == block_s_ && threads == threads_ && stages == stages_ && pingpong == pingpong_ &&
           persistent == persistent_;
  }
};

struct FusedInstanceList {
  const FusedInstance* data;
  int size;
};

// The list view of a static instance table.
template <int N>
constexpr FusedInstanceList ListOf(const FusedInstance (&table)[N]) {
  return {table, N};
}

// One function per source file, so the families compile in parallel.
FusedInstanceList SimtFp32StorageInstances();    // fused_simt_fp32.cu
FusedInstanceList SimtHalfStorageInstances();    // fused_simt_half.cu (fp16 + bf16 storage)
FusedInstanceList MmaFp16D64Instances();         // fused_mma_fp16_d64.cu
FusedInstanceList MmaFp16D128Instances();        // fused_mma_fp16_d128.cu
FusedInstanceList MmaBf16D64Instances();         // fused_mma_bf16_d64.cu
FusedInstanceList MmaBf16D128Instances();        // fused_mma_bf16_d128.cu
FusedInstanceList MmaTf32Instances();            // fused_mma_tf32.cu
FusedInstanceList WgmmaFp16Instances();          // fused_wgmma_fp16.cu (sm_90a)
FusedInstanceList WgmmaBf16Instances();          // fused_wgmma_bf16.cu (sm_90a)

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_INSTANCE_H_
