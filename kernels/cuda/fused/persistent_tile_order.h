// The tile order of the Hopper prefill kernel's persistent schedule (fused_wgmma.cuh), in a
// header of its own so the host tests check it without a GPU.
//
// Thread-safety: a plain value type.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_PERSISTENT_TILE_ORDER_H_
#define FUSETUNE_KERNELS_CUDA_FUSED_PERSISTENT_TILE_ORDER_H_

#include <cstdint>

#if defined(__CUDACC__)
#define FUSETUNE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FUSETUNE_HOST_DEVICE inline
#endif

namespace fusetune::cuda::fused {

// The query tiles of a launch and the share of them a persistent block walks.
//  - Without a causal mask every tile costs the same: tile t is query block t % m_blocks of
//    (sequence, head) t / m_blocks, heads inner, so the tiles in flight at a time cover a few
//    neighbouring heads, which read the same K/V through L2 (all of it for the query heads of
//    one KV head under GQA).
//  - Under a causal mask a tile's cost grows with its query block, so the order is longest
//    first over the whole launch: band t / (heads * sequences) of query blocks counted from the
//    last, (sequence, head) inside the band, heads inner (the tiles in flight then share a few
//    bands of every head, which sweep the same keys at about the same time).
// Block b takes one tile per round of gridDim.x tiles: position b in even rounds, gridDim.x - 1
// - b in odd ones. A plain stride would give block 0 the costliest tile of every round (and,
// with query blocks innermost, one residue of the blocks modulo the stride); alternating keeps
// every block's sum within one round's spread of the others.
struct PersistentTileOrder {
  int m_blocks = 0, heads = 0, sequences = 0;
  bool causal = false;
  int64_t total = 0;

  // The tiles of `sequences` x `heads` query rows of (at most) q_len rows, block_m a tile.
  static FUSETUNE_HOST_DEVICE PersistentTileOrder Of(int q_len, int block_m, int heads, int sequences, bool causal) {
    PersistentTileOrder order;
    order.m_blocks = (q_len + block_m - 1) / block_m;
    order.heads = heads;
    order.sequences = sequences;
    order.causal = causal;
    order.total = static_cast<int64_t>(order.m_blocks) * heads * sequences;
    return order;
  }
  // Rounds of `blocks` tiles that hold every tile.
  FUSETUNE_HOST_DEVICE int64_t Rounds(int blocks) const { return (total + blocks - 1) / blocks; }
  FUSETUNE_HOST_DEVICE void Decode(int64_t t, int& query_block, int& head, int& seq) const {
    int64_t sequence_head;
    if (causal) {
      const int64_t per_band = static_cast<int64_t>(heads) * sequences;
      query_block = m_blocks - 1 - static_cast<int>(t / per_band);
      sequence_head = t % per_band;
    } else {
      query_block = static_cast<int>(t % m_blocks);
      sequence_head = t / m_blocks;
    }
    head = static_cast<int>(sequence_head % heads);
    seq = static_cast<int>(sequence_head / heads);
  }
  // Tile of block `block` in round `round` (>= total when the last round has none for it).
  FUSETUNE_HOST_DEVICE int64_t TileOf(int64_t round, int block, int blocks) const {
    return round * blocks + ((round & 1) == 0 ? block : blocks - 1 - block);
  }
};

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_PERSISTENT_TILE_ORDER_H_
