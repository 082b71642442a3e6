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
//  - Under a causal mask, paired (the launcher's choice, PairsPay: every sequence of the same
//    lengths, and more K/V than the L2 holds): query block k and query block m_blocks - 1 - k of
//    one (sequence, head) cost k + 1 and m_blocks - k key tiles, m_blocks + 1 together whatever
//    k, so slots 2u and 2u + 1 are that pair (the longer first) of unit u, which counts the pairs
//    of a (sequence, head) innermost, like the tiles above. The units cost the same, and the
//    blocks in flight at a time read a few heads' K/V. With an odd m_blocks the middle query
//    blocks have no partner: they come after every pair, one unit per (sequence, head), whose
//    second slot is query block m_blocks, past every sequence's queries, which the kernel skips
//    like any tile past a sequence's end; they make a last round of units at half cost.
//  - Under a causal mask otherwise, longest first over the whole launch: band t / (heads *
//    sequences) of query blocks counted from the last, (sequence, head) inside the band, heads
//    inner. Single tiles even out the blocks more finely than pairs, but every (sequence, head)
//    is in flight at once, which reads all of the K/V at every band: where that does not stay in
//    L2 the pairs run faster (docs/perf.md, "causal pairs").
// Block b takes one tile (one pair when paired, its two slots in consecutive rounds) per round of
// gridDim.x: position b in even rounds, gridDim.x - 1 - b in odd ones. A plain stride would give
// block 0 the costliest tile of every round (and, with query blocks innermost, one residue of the
// blocks modulo the stride); alternating keeps every block's sum within one round's spread of
// the others.
struct PersistentTileOrder {
  int m_blocks = 0, heads = 0, sequences = 0;
  bool causal = false;
  bool paired = false;  // causal, in pairs of query blocks (above)
  int64_t total = 0;    // slots: tiles, or 2 per unit when paired

  // The tiles of `sequences` x `heads` query rows of (at most) q_len rows, block_m a tile;
  // `paired` (under a causal mask only): in pairs of query blocks, the order for sequences of
  // equal lengths (PairsPay).
  static FUSETUNE_HOST_DEVICE PersistentTileOrder Of(int q_len, int block_m, int heads, int sequences, bool causal,
                                                     bool paired = false) {
    PersistentTileOrder order;
    order.m_blocks = (q_len + block_m - 1) / block_m;
    order.heads = heads;
    order.sequences = sequences;
    order.causal = causal;
    order.paired = causal && paired;
    const int64_t per_sequence_head = order.paired ? 2 * ((order.m_blocks + 1) / 2) : order.m_blocks;
    order.total = per_sequence_head * heads * sequences;
    return order;
  }
  // Whether a causal launch walks pairs: every sequence has the launch's lengths and sees all its
  // keys (`uniform`; pairs of a shorter sequence would not cost the same), and its K/V (kv_bytes:
  // every sequence and KV head, K and V) is more than the L2 holds (l2_bytes). Where the K/V stays
  // in L2, longest first loses nothing to L2 misses and keeps every multiprocessor busy where
  // the pairs' equal units leave some idle. Measured on an H100 (50 MiB of L2), interleaved:
  // bf16 d128 b4 h16 S4096 (128 MiB of K/V) 4-8 % faster in pairs, GQA 32/8 b2 S4096 (32 MiB)
  // 3-5 % slower.
  static bool PairsPay(bool causal, bool uniform, int64_t kv_bytes, int64_t l2_bytes) {
    return causal && uniform && l2_bytes > 0 && kv_bytes > l2_bytes;
  }
  // What a block takes per round: tiles, or units of two slots when paired.
  FUSETUNE_HOST_DEVICE int64_t Units() const { return paired ? total / 2 : total; }
  // Pairs of one (sequence, head) when paired, and the units that are pairs (the middle query
  // blocks of an odd m_blocks come after them).
  FUSETUNE_HOST_DEVICE int Pairs() const { return m_blocks >> 1; }
  FUSETUNE_HOST_DEVICE int64_t PairUnits() const { return static_cast<int64_t>(Pairs()) * heads * sequences; }
  // Rounds (a paired unit takes two) of `blocks` units that hold every slot.
  FUSETUNE_HOST_DEVICE int64_t Rounds(int blocks) const {
    const int64_t unit_rounds = (Units() + blocks - 1) / blocks;
    return paired ? 2 * unit_rounds : unit_rounds;
  }
  // Blocks of a launch on `sms` multiprocessors (> 0), one block each, never more than units.
  // Where every unit costs the same (`uniform`: every sequence of the same lengths; tiles
  // without a causal mask, pairs with it), the fewest that take the units in as many rounds as
  // `sms` would, so every round is full, where that leaves at most one multiprocessor in eight
  // without a block: fp16 d128 b8 h16 S1024 (1024 tiles) ran 1.2 % faster on 128 blocks of an
  // H100's 132 than on 132 with 32 idle through the last round (docs/perf.md). With more left
  // idle a nearly empty last round, whose few blocks run alone, costs less than spreading its
  // units over every round. Tiles of unequal cost (causal longest first, varlen) keep every
  // multiprocessor, whose blocks even out the longer tiles.
  FUSETUNE_HOST_DEVICE int64_t Blocks(int sms, bool uniform) const {
    const int64_t units = Units();
    if (units <= sms) return units;
    if (!uniform || (causal && !paired)) return sms;
    const int64_t rounds = (units + sms - 1) / sms;
    const int64_t even = (units + rounds - 1) / rounds;
    return 8 * even >= 7 * static_cast<int64_t>(sms) ? even : sms;
  }
  // Slot t's query block (m_blocks for the empty partner of an odd m_blocks' middle block), head
  // and sequence. `Index` is the width of the arithmetic: 64 bits, or 32 (uint32_t) for a launch
  // of fewer than 2^31 slots, where the divisions are cheaper (the d128 two-stage persistent
  // kernels, fused_wgmma.cuh, whose launcher checks the count).
  template <typename Index = int64_t>
  FUSETUNE_HOST_DEVICE void Decode(int64_t t, int& query_block, int& head, int& seq) const {
    const Index tile = static_cast<Index>(t);
    Index sequence_head;
    if (paired) {
      const Index unit = tile >> 1, per_head = static_cast<Index>(Pairs());
      const Index pair_units = static_cast<Index>(PairUnits());
      if (unit < pair_units) {
        const int k = static_cast<int>(unit % per_head);
        query_block = (tile & 1) == 0 ? m_blocks - 1 - k : k;
        sequence_head = unit / per_head;
      } else {  // the middle query block of an odd m_blocks, then its empty partner
        query_block = (tile & 1) == 0 ? Pairs() : m_blocks;
        sequence_head = unit - pair_units;
      }
    } else if (causal) {
      const Index per_band = static_cast<Index>(heads) * static_cast<Index>(sequences);
      query_block = m_blocks - 1 - static_cast<int>(tile / per_band);
      sequence_head = tile % per_band;
    } else {
      query_block = static_cast<int>(tile % static_cast<Index>(m_blocks));
      sequence_head = tile / static_cast<Index>(m_blocks);
    }
    head = static_cast<int>(sequence_head % static_cast<Index>(heads));
    seq = static_cast<int>(sequence_head / static_cast<Index>(heads));
  }
  // Slot of block `block` in round `round` (>= total when the last round has none for it).
  FUSETUNE_HOST_DEVICE int64_t TileOf(int64_t round, int block, int blocks) const {
    const int64_t unit_round = paired ? round >> 1 : round;
    const int64_t unit = unit_round * blocks + ((unit_round & 1) == 0 ? block : blocks - 1 - block);
    return paired ? 2 * unit + (round & 1) : unit;
  }
};

// The last round of a persistent launch without a causal mask, spread along the keys. With R =
// total % blocks > 0 tiles left after the whole rounds, blocks - R multiprocessors would idle
// through that round; instead the R tiles' key tiles (R * key_tiles steps, in tile order) are
// dealt out in equal spans, block b taking steps [b * span, (b + 1) * span). A block's span is
// one or more pieces (a key range of one tile); a tile cut into pieces has each write its
// partial state (O unnormalised, the row maxima and sums) and the last piece to finish merges
// them (fused_wgmma.cuh). The last round then takes span key tiles of time instead of
// key_tiles, for about two steps of a piece's start, its partial state and the merge; a split
// is planned only where it saves at least a quarter of the round.
struct SplitTail {
  int64_t first_tile = 0;  // tiles [first_tile, total) are split; those before run whole
  int tiles = 0;           // R, the split tiles (slot t is tile first_tile + t)
  int key_tiles = 0;       // key tiles of every tile (uniform lengths)
  int span = 0;            // key tiles per block; 0: no split

  // The split of `order` on `blocks` blocks for tiles of `key_tiles` key tiles each; inactive
  // (span 0) under a causal mask (the last tiles are the cheapest ones there), with no partial
  // round, or where it would save less than a quarter of the round.
  static FUSETUNE_HOST_DEVICE SplitTail Plan(const PersistentTileOrder& order, int key_tiles, int blocks) {
    SplitTail split;
    if (order.causal || blocks <= 0 || key_tiles < 4) return split;
    const int64_t rest = order.total % blocks;
    if (rest == 0) return split;
    const int64_t span = (rest * key_tiles + blocks - 1) / blocks;
    if (4 * span > 3 * static_cast<int64_t>(key_tiles)) return split;
    split.first_tile = order.total - rest;
    split.tiles = static_cast<int>(rest);
    split.key_tiles = key_tiles;
    split.span = static_cast<int>(span);
    return split;
  }
  // The split of a persistent launch over `batch` sequences of q_len queries and kv_len keys,
  // block_m x block_s tiles, on `blocks` blocks. `uniform`: every sequence has those lengths and
  // sees all its keys; a varlen or padded batch's tiles differ in keys and are never split.
  // `tail_launch`: the split round is a launch of its own, planned only where TailLaunchPays.
  static FUSETUNE_HOST_DEVICE SplitTail ForLaunch(int q_len, int kv_len, int q_heads, int batch, bool causal,
                                                  bool uniform, int block_m, int block_s, int blocks,
                                                  bool tail_launch = false) {
    if (!uniform || q_len <= 0 || kv_len <= 0) return SplitTail{};
    const SplitTail split = Plan(PersistentTileOrder::Of(q_len, block_m, q_heads, batch, causal),
                                 (kv_len + block_s - 1) / block_s, blocks);
    return !tail_launch || split.TailLaunchPays(blocks) ? split : SplitTail{};
  }
  FUSETUNE_HOST_DEVICE bool active() const { return span > 0; }
  // Whole rounds a tail launch (the split round as a second launch, fused_wgmma.cuh) needs before
  // its split pays: the second launch has a fixed cost, and on a power-capped GPU the busy
  // multiprocessors of a partly idle round run faster, so that round costs less than its share
  // of the blocks says. Measured on an H100 at head_dim 128: 15 whole rounds 0.7 % faster, one
  // whole round 0.8 % slower; 8 lies between. Without a tail launch, a launch of 8 or more whole
  // rounds would take the fewest blocks for the same rounds (Blocks: 128 for bf16 b4 h16 S4096),
  // which ran 0.6 % slower than the tail launch on that flagship.
  static constexpr int kTailMinWholeRounds = 8;
  FUSETUNE_HOST_DEVICE bool TailLaunchPays(int blocks) const {
    return active() && blocks > 0 && first_tile >= static_cast<int64_t>(kTailMinWholeRounds) * blocks;
  }
  // A bound on the blocks that share one tile (a span may start inside a tile and end inside the
  // next), which sizes the partial states.
  FUSETUNE_HOST_DEVICE int MaxPieces() const {
    if (!active()) return 0;
    const int whole = (key_tiles + span - 1) / span + 1;
    return whole < key_tiles ? whole : key_tiles;
  }
  // Blocks [FirstBlock(t), LastBlock(t)] hold the pieces of slot t, in key order.
  FUSETUNE_HOST_DEVICE int FirstBlock(int t) const {
    return static_cast<int>(static_cast<int64_t>(t) * key_tiles / span);
  }
  FUSETUNE_HOST_DEVICE int LastBlock(int t) const {
    return static_cast<int>((static_cast<int64_t>(t + 1) * key_tiles - 1) / span);
  }
  // Piece i of block `block`'s span, in order: key tiles [key_begin, key_end) of slot `slot`,
  // piece `piece` of its `pieces`; false past the span's last piece.
  FUSETUNE_HOST_DEVICE bool Piece(int block, int i, int& slot, int& key_begin, int& key_end, int& piece,
                                  int& pieces) const {
    const int64_t steps = static_cast<int64_t>(tiles) * key_tiles;
    const int64_t begin = static_cast<int64_t>(block) * span;
    const int64_t end = begin + span < steps ? begin + span : steps;
    if (begin >= end) return false;
    const int64_t t = begin / key_tiles + i;
    const int64_t tile_begin = t * key_tiles, tile_end = tile_begin + key_tiles;
    const int64_t s0 = begin > tile_begin ? begin : tile_begin, s1 = end < tile_end ? end : tile_end;
    if (s0 >= s1) return false;
    slot = static_cast<int>(t);
    key_begin = static_cast<int>(s0 - tile_begin);
    key_end = static_cast<int>(s1 - tile_begin);
    piece = block - FirstBlock(slot);
    pieces = LastBlock(slot) - FirstBlock(slot) + 1;
    return true;
  }
  // Floats of the partial states, for `consumer_threads` threads of a block holding D / 2
  // accumulators and a row (max, max, sum, sum) quadruple each per piece; and the arrival
  // counters, one per slot and consumer warp.
  FUSETUNE_HOST_DEVICE int64_t PartialFloats(int consumer_threads, int head_dim) const {
    return static_cast<int64_t>(tiles) * MaxPieces() * consumer_threads * (head_dim / 2 + 4);
  }
  FUSETUNE_HOST_DEVICE int64_t Counters(int consumer_warps) const {
    return static_cast<int64_t>(tiles) * consumer_warps;
  }
};

// The workspace a launcher gives a split launch of blocks of `threads` threads (the producer
// warpgroup's 128 among them, the rest consumers) at head_dim: the partial states' floats and
// the arrival counters; both 0 when `split` is inactive.
struct SplitWorkspaceSize {
  int64_t partial_floats = 0;
  int64_t counters = 0;
};
inline SplitWorkspaceSize SplitWorkspaceOf(const SplitTail& split, int threads, int head_dim) {
  if (!split.active()) return {};
  const int consumer_threads = threads - 128;
  return {split.PartialFloats(consumer_threads, head_dim), split.Counters(consumer_threads / 32)};
}

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_PERSISTENT_TILE_ORDER_H_
