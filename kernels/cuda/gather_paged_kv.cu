// K and V of a paged cache gathered into the contiguous layout (gather_paged_kv.h).
#include <algorithm>

#include "gather_paged_kv.h"

namespace fusetune::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// One warp per destination row: the lanes share the row's table lookup and copy its chunks
// (16 bytes each where the row size allows) of K and V side by side.
template <typename Chunk>
__global__ void GatherPagedKVKernel(GatherPagedKVArgs a) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t chunks = a.row_bytes / static_cast<int64_t>(sizeof(Chunk));
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < a.total_rows;
       row += warps) {
    int b = 0;
    int64_t j = 0;
    int64_t keys = 0;  // the sequence's cache length
    if (a.cu_seqlens_k != nullptr) {
      // The last sequence starting at or before `row` (empty sequences start where the next does).
      int lo = 0, hi = a.batch;  // cu_seqlens_k[lo] <= row < cu_seqlens_k[hi]
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (a.cu_seqlens_k[mid] <= row) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      b = lo;
      j = row - a.cu_seqlens_k[b];
      keys = a.cu_seqlens_k[b + 1] - a.cu_seqlens_k[b];
    } else {
      b = static_cast<int>(row / a.kv_len);
      j = row - static_cast<int64_t>(b) * a.kv_len;
      keys = a.kv_valid_lens != nullptr ? a.kv_valid_lens[b] : a.kv_len;
    }
    Chunk* k_dst = reinterpret_cast<Chunk*>(static_cast<char*>(a.k_out) + row * a.row_bytes);
    Chunk* v_dst = reinterpret_cast<Chunk*>(static_cast<char*>(a.v_out) + row * a.row_bytes);
    if (j >= keys) {
      const Chunk zero{};
      for (int64_t c = lane; c < chunks; c += 32) {
        k_dst[c] = zero;
        v_dst[c] = zero;
      }
      continue;
    }
    const int64_t page = a.block_table[static_cast<int64_t>(b) * a.block_table_width + j / a.page_size];
    const int64_t src_row = page * a.page_size + j % a.page_size;
    const Chunk* k_src = reinterpret_cast<const Chunk*>(static_cast<const char*>(a.k_pool) + src_row * a.row_bytes);
    const Chunk* v_src = reinterpret_cast<const Chunk*>(static_cast<const char*>(a.v_pool) + src_row * a.row_bytes);
    for (int64_t c = lane; c < chunks; c += 32) {
      k_dst[c] = k_src[c];
      v_dst[c] = v_src[c];
    }
  }
}

template <typename Chunk>
cudaError_t Launch(const GatherPagedKVArgs& a, cudaStream_t stream) {
  // Enough blocks to fill any current GPU several times over; the warps stride over the rest.
  constexpr int64_t kMaxBlocks = 65536;
  const int64_t blocks = std::min(kMaxBlocks, (a.total_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  GatherPagedKVKernel<Chunk><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGatherPagedKV(const GatherPagedKVArgs& a, cudaStream_t stream) {
  if (a.total_rows == 0 || a.row_bytes == 0) return cudaSuccess;
  if (a.page_size < 1 || (a.cu_seqlens_k == nullptr && a.kv_len < 1)) return cudaErrorInvalidValue;
  // Rows and the pool are 16-byte aligned when the row size is (ValidateBuffers, the workspace).
  if (a.row_bytes % 16 == 0) return Launch<uint4>(a, stream);
  if (a.row_bytes % 4 == 0) return Launch<uint32_t>(a, stream);
  return Launch<unsigned char>(a, stream);
}

}  // namespace fusetune::cuda
