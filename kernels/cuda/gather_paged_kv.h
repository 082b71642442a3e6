// The gather the partial and materialized variants run before their passes on a paged KV
// cache: K and V read through the block table into the contiguous layout of
// problem.Unpaged() (GatherPagedKV in fusetune/kernels/reference.h is its host twin). cuBLAS
// takes one pointer and one leading dimension per GEMM operand, so a baseline cannot read
// keys scattered over pages; a baseline over a paged cache pays for this copy, and the
// backend times it as part of the variant.
//
// CUDA-only (no HIP twin: the HIP backend refuses paged caches). No absl, so nvcc compiles
// the kernel without third-party headers.
#ifndef FUSETUNE_KERNELS_CUDA_GATHER_PAGED_KV_H_
#define FUSETUNE_KERNELS_CUDA_GATHER_PAGED_KV_H_

#include <cstdint>

#include <cuda_runtime.h>

namespace fusetune::cuda {

// One gather of K and V. Destination row r of the contiguous layout is key j of sequence b:
// a uniform batch has kv_len rows per sequence (r = b * kv_len + j), a varlen batch the rows
// [cu_seqlens_k[b], cu_seqlens_k[b + 1]). A row whose key is past the sequence's cache length
// (kv_valid_lens[b], uniform batches) is zeros; every other row is copied from row j % page_size
// of page block_table[b * block_table_width + j / page_size] of the pool.
struct GatherPagedKVArgs {
  const void* k_pool = nullptr;  // [pool pages][page_size][kv_heads][head_dim], 16-byte aligned
  const void* v_pool = nullptr;
  void* k_out = nullptr;  // [total_rows][kv_heads][head_dim], 16-byte aligned
  void* v_out = nullptr;
  const int32_t* block_table = nullptr;  // device memory, validated (ValidateBlockTable)
  int block_table_width = 0;
  int page_size = 0;
  int batch = 0;
  int kv_len = 0;                          // uniform batch: rows per sequence
  const int32_t* kv_valid_lens = nullptr;  // uniform batch: cache lengths, or nullptr (all kv_len)
  const int32_t* cu_seqlens_k = nullptr;   // varlen batch: batch + 1 prefix sums, or nullptr
  int64_t total_rows = 0;                  // rows of k_out and v_out
  int64_t row_bytes = 0;                   // kv_heads * head_dim * element bytes
};

// Enqueues the gather on `stream`; returns the launch error (cudaSuccess when launched or
// when there is nothing to copy). Arguments are trusted: the backend validated them.
cudaError_t LaunchGatherPagedKV(const GatherPagedKVArgs& args, cudaStream_t stream);

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_GATHER_PAGED_KV_H_
