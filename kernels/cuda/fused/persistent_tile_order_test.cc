#include "fused/persistent_tile_order.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::cuda::fused {
namespace {

struct Share {
  std::vector<std::tuple<int, int, int>> tiles;  // (query block, head, sequence), in walk order
  int64_t cost = 0;                              // key tiles visited under the causal mask
  int64_t slots = 0;                             // rounds with a slot, empty ones included
};

// The tiles each of `blocks` persistent blocks walks, as the kernel's loop does (a slot past
// every sequence's queries is skipped); a tile's cost is its query block + 1 key tiles when
// causal (q_len == kv_len), 1 otherwise.
std::vector<Share> Walk(const PersistentTileOrder& order, int blocks) {
  std::vector<Share> shares(blocks);
  for (int b = 0; b < blocks; ++b) {
    for (int64_t round = 0; round < order.Rounds(blocks); ++round) {
      const int64_t t = order.TileOf(round, b, blocks);
      if (t >= order.total) continue;
      ++shares[b].slots;
      int query_block = 0, head = 0, seq = 0;
      order.Decode(t, query_block, head, seq);
      if (query_block == order.m_blocks) continue;
      shares[b].tiles.emplace_back(query_block, head, seq);
      shares[b].cost += order.causal ? query_block + 1 : 1;
    }
  }
  return shares;
}

// The costliest share over the mean: the launch's time over that of a perfect split.
double Imbalance(const std::vector<Share>& shares) {
  int64_t hi = 0, sum = 0;
  for (const Share& s : shares) {
    hi = std::max(hi, s.cost);
    sum += s.cost;
  }
  return static_cast<double>(hi) * static_cast<double>(shares.size()) / static_cast<double>(sum);
}

TEST(PersistentTileOrder, EveryTileIsWalkedOnceByOneBlock) {
  for (auto [q_len, heads, sequences, causal, blocks] :
       std::vector<std::tuple<int, int, int, bool, int>>{{300, 64, 4, true, 132},   {300, 64, 4, false, 132},
                                                        {16384, 16, 1, true, 132}, {1024, 16, 8, false, 7},
                                                        {129, 3, 2, true, 1},      {128, 2, 1, true, 132},
                                                        {640, 5, 3, true, 9}}) {
    for (const bool paired : {true, false}) {
      const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, causal, paired);
      EXPECT_EQ(order.paired, causal && paired);
      const int grid = static_cast<int>(order.Blocks(blocks, /*uniform=*/paired));  // as LaunchWgmma sizes it
      std::set<std::tuple<int, int, int>> seen;
      int64_t walked = 0, slots = 0;
      for (const Share& s : Walk(order, grid)) {
        slots += s.slots;
        for (const auto& tile : s.tiles) {
          const auto [query_block, head, seq] = tile;
          EXPECT_GE(query_block, 0);
          EXPECT_LT(query_block, order.m_blocks);
          EXPECT_LT(head, heads);
          EXPECT_LT(seq, sequences);
          EXPECT_TRUE(seen.insert(tile).second) << "tile walked twice: q" << query_block << " h" << head << " s" << seq;
          ++walked;
        }
      }
      const std::string where = "q_len " + std::to_string(q_len) + " heads " + std::to_string(heads) + " sequences " +
                                std::to_string(sequences) + " causal " + std::to_string(causal) + " paired " +
                                std::to_string(paired);
      EXPECT_EQ(slots, order.total) << where;
      EXPECT_EQ(walked, int64_t{order.m_blocks} * heads * sequences) << where;
    }
  }
}

// Under a causal mask the costliest block's share is within 2 % of the mean, in both orders:
// a stride over tiles with query blocks innermost gave one block 3.6x another's key tiles at
// S=16384 (1 x 16 heads, 132 blocks), which ran 1.6x slower than the one-tile grid on an H200.
TEST(PersistentTileOrder, CausalSharesAreBalanced) {
  for (auto [q_len, heads, sequences, both] : std::vector<std::tuple<int, int, int, bool>>{
           {16384, 16, 1, true}, {4096, 16, 4, true}, {4096, 32, 2, true}, {8192, 8, 3, true},
           {4000, 12, 3, false}, {1920, 16, 8, false}}) {  // the last two: pairs only (longest first: 1.03)
    for (const bool paired : {true, false}) {
      if (!paired && !both) continue;
      const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, /*causal=*/true, paired);
      EXPECT_LE(Imbalance(Walk(order, static_cast<int>(order.Blocks(132, /*uniform=*/true)))), 1.02)
          << "S=" << q_len << " heads " << heads << " sequences " << sequences << " paired " << paired;
    }
  }
}

// Uniform lengths: a block walks query blocks k and m_blocks - 1 - k of one (sequence, head) in
// consecutive rounds, the longer first, so every pair costs m_blocks + 1 key tiles; and the pairs
// of a (sequence, head) are consecutive, so the blocks in flight together read a few heads' K/V.
TEST(PersistentTileOrder, CausalPairsCostTheSameAndShareAHead) {
  for (auto [q_len, heads, sequences] :
       std::vector<std::tuple<int, int, int>>{{4096, 16, 4}, {4096, 32, 2}, {640, 7, 3}, {128, 3, 1}}) {
    const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, true, true);
    ASSERT_TRUE(order.paired);
    for (int64_t u = 0; u < order.Units(); ++u) {
      int long_block = 0, long_head = 0, long_seq = 0, short_block = 0, short_head = 0, short_seq = 0;
      order.Decode(2 * u, long_block, long_head, long_seq);
      order.Decode(2 * u + 1, short_block, short_head, short_seq);
      EXPECT_EQ(std::tie(long_head, long_seq), std::tie(short_head, short_seq)) << u;
      if (u < order.PairUnits()) {
        EXPECT_EQ(long_block + short_block, order.m_blocks - 1) << u;
        EXPECT_GT(long_block, short_block) << u;
        EXPECT_EQ(int64_t{long_seq} * heads + long_head, u / order.Pairs()) << u;
      } else {  // the middle query blocks of an odd count, alone, after every pair
        EXPECT_EQ(2 * long_block + 1, order.m_blocks) << u;
        EXPECT_EQ(short_block, order.m_blocks) << u;
        EXPECT_EQ(int64_t{long_seq} * heads + long_head, u - order.PairUnits()) << u;
      }
    }
    const int blocks = static_cast<int>(order.Blocks(132, true));
    for (int b = 0; b < blocks; ++b) {
      for (int64_t round = 0; round + 1 < order.Rounds(blocks); round += 2) {
        const int64_t first = order.TileOf(round, b, blocks), second = order.TileOf(round + 1, b, blocks);
        if (first >= order.total) continue;
        EXPECT_EQ(second, first + 1) << "block " << b << " round " << round;
        EXPECT_EQ(first % 2, 0);
      }
    }
  }
}

// Not paired (sequences of different lengths, or K/V that stays in L2): longest first over the
// whole launch.
TEST(PersistentTileOrder, CausalUnpairedWalksLongestFirst) {
  const PersistentTileOrder order = PersistentTileOrder::Of(4096, 128, 16, 4, /*causal=*/true);
  ASSERT_FALSE(order.paired);
  for (const Share& s : Walk(order, 132)) {
    // Each block's tiles come from bands of ever shorter query blocks.
    for (size_t i = 1; i < s.tiles.size(); ++i) EXPECT_LE(std::get<0>(s.tiles[i]), std::get<0>(s.tiles[i - 1]));
  }
}

// Without a mask, tiles t .. t + m_blocks - 1 are one (sequence, head): the blocks in flight
// together read a few heads' K/V, the query heads of one KV head side by side.
TEST(PersistentTileOrder, WithoutAMaskConsecutiveTilesShareAHead) {
  for (const bool paired : {true, false}) {  // no mask, no pairs
    const PersistentTileOrder order = PersistentTileOrder::Of(1024, 128, 32, 2, /*causal=*/false, paired);
    ASSERT_FALSE(order.paired);
    for (int64_t t = 0; t < order.total; ++t) {
      int query_block = 0, head = 0, seq = 0;
      order.Decode(t, query_block, head, seq);
      EXPECT_EQ(query_block, t % 8);
      EXPECT_EQ(head, (t / 8) % 32);
      EXPECT_EQ(seq, t / (8 * 32));
    }
  }
}

TEST(PersistentTileOrder, UniformUnitsTakeTheFewestBlocksForTheirRounds) {
  const PersistentTileOrder mid = PersistentTileOrder::Of(1024, 128, 16, 8, false);  // 1024 tiles
  EXPECT_EQ(mid.Blocks(132, true), 128);
  EXPECT_EQ(mid.Rounds(128), mid.Rounds(132));
  // Every block walks one tile a round, so each of the 128 walks 8 and no round has an idle block.
  for (const Share& s : Walk(mid, static_cast<int>(mid.Blocks(132, true)))) EXPECT_EQ(s.tiles.size(), 8u);
  // Causal, uniform: b4 h16 S4096 is 1024 pairs, 8 on each of 128 blocks, 33 key tiles a pair.
  const PersistentTileOrder causal = PersistentTileOrder::Of(4096, 128, 16, 4, true, true);
  EXPECT_EQ(causal.Units(), 1024);
  EXPECT_EQ(causal.Blocks(132, true), 128);
  for (const Share& s : Walk(causal, 128)) {
    EXPECT_EQ(s.tiles.size(), 16u);
    EXPECT_EQ(s.cost, 8 * 33);
  }
  // A launch whose rounds are already full, or that has fewer tiles than multiprocessors.
  EXPECT_EQ(PersistentTileOrder::Of(1024, 128, 12, 11, false).Blocks(132, true), 132);  // 1056 tiles
  EXPECT_EQ(PersistentTileOrder::Of(128, 128, 12, 11, false).Blocks(132, true), 132);   // 132 tiles
  EXPECT_EQ(PersistentTileOrder::Of(256, 128, 12, 1, false).Blocks(132, true), 24);
  EXPECT_EQ(PersistentTileOrder::Of(256, 128, 12, 1, true, true).Blocks(132, true), 12);      // 12 pairs
  // 133 tiles: two rounds either way, but on 67 blocks 65 would idle: every multiprocessor.
  EXPECT_EQ(PersistentTileOrder::Of(128, 128, 7, 19, false).Blocks(132, true), 132);
  for (int tiles = 1; tiles <= 3000; ++tiles) {
    for (const bool causal : {false, true}) {
      const PersistentTileOrder order = PersistentTileOrder::Of(128 * tiles, 128, 1, 1, causal, true);
      const int64_t blocks = order.Blocks(132, true);
      ASSERT_LE(blocks, 132);
      ASSERT_EQ(order.Rounds(static_cast<int>(blocks)), order.Rounds(132)) << tiles;
      ASSERT_GT(order.Units(), (order.Rounds(132) / (causal ? 2 : 1) - 1) * blocks) << tiles;  // last round used
      if (order.Units() >= 132) ASSERT_GE(8 * blocks, 7 * 132) << tiles;                        // at most 1 in 8 idle
    }
  }
}

TEST(PersistentTileOrder, TilesOfUnequalCostKeepEveryMultiprocessor) {
  EXPECT_EQ(PersistentTileOrder::Of(1024, 128, 16, 8, true).Blocks(132, true), 132);   // causal, longest first
  EXPECT_EQ(PersistentTileOrder::Of(1024, 128, 16, 8, true).Blocks(132, false), 132);  // causal varlen
  EXPECT_EQ(PersistentTileOrder::Of(1024, 128, 16, 8, false).Blocks(132, false), 132); // varlen
  EXPECT_EQ(PersistentTileOrder::Of(1024, 128, 4, 2, true).Blocks(132, false), 64);    // fewer tiles
}

// Pairs where the K/V is more than the L2 holds and every sequence has the launch's lengths:
// the two causal flagships of an H100 (50 MiB of L2), where each order measured faster.
TEST(PersistentTileOrder, PairsWhereTheKeysAndValuesOutgrowTheL2) {
  const int64_t l2 = int64_t{50} << 20;
  const auto kv_bytes = [](int64_t batch, int64_t kv_heads, int64_t kv_len) {
    return 2 * batch * kv_heads * kv_len * 128 * 2;  // K and V, head_dim 128, 2-byte elements
  };
  EXPECT_TRUE(PersistentTileOrder::PairsPay(true, true, kv_bytes(4, 16, 4096), l2));   // MHA b4 h16: 128 MiB
  EXPECT_FALSE(PersistentTileOrder::PairsPay(true, true, kv_bytes(2, 8, 4096), l2));   // GQA 32/8 b2: 32 MiB
  EXPECT_FALSE(PersistentTileOrder::PairsPay(true, false, kv_bytes(4, 16, 4096), l2)); // varlen
  EXPECT_FALSE(PersistentTileOrder::PairsPay(false, true, kv_bytes(4, 16, 4096), l2)); // no mask
  EXPECT_FALSE(PersistentTileOrder::PairsPay(true, true, kv_bytes(4, 16, 4096), 0));   // L2 unknown
}

TEST(PersistentTileOrder, ThirtyTwoBitDecodeMatchesSixtyFourBit) {
  for (const bool causal : {false, true}) {
    for (const bool paired : {false, true}) {
      for (const auto& [q_len, heads, sequences] : {std::tuple{1024, 16, 8}, std::tuple{777, 7, 3},
                                                     std::tuple{4096, 32, 2}, std::tuple{128, 1, 1},
                                                     std::tuple{65536, 3, 5}}) {
        const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, causal, paired);
        for (int64_t t = 0; t < order.total; ++t) {
          int qb64 = -1, head64 = -1, seq64 = -1, qb32 = -2, head32 = -2, seq32 = -2;
          order.Decode(t, qb64, head64, seq64);
          order.Decode<uint32_t>(t, qb32, head32, seq32);
          ASSERT_EQ(std::tie(qb32, head32, seq32), std::tie(qb64, head64, seq64)) << t << " causal " << causal;
        }
      }
    }
  }
}

// The flagship bf16 shape (b4 h16 S4096, block_m 128, 32 key tiles) on 132 blocks: 15 whole
// rounds and 68 tiles, whose keys every block shares in spans of 17 key tiles.
TEST(SplitTail, SpreadsThePartialRoundOverEveryBlock) {
  const PersistentTileOrder order = PersistentTileOrder::Of(4096, 128, 16, 4, /*causal=*/false);
  const SplitTail split = SplitTail::Plan(order, 32, 132);
  ASSERT_TRUE(split.active());
  EXPECT_EQ(split.first_tile, 15 * 132);
  EXPECT_EQ(split.tiles, 68);
  EXPECT_EQ(split.span, 17);
  EXPECT_EQ(split.MaxPieces(), 3);
  EXPECT_EQ(split.PartialFloats(256, 128), int64_t{68} * 3 * 256 * 68);
  EXPECT_EQ(split.Counters(8), 68 * 8);
}

TEST(SplitTail, NotPlannedWhereItSavesLittleOrNothing) {
  // Causal: the last tiles are the cheapest.
  EXPECT_FALSE(SplitTail::Plan(PersistentTileOrder::Of(4096, 128, 16, 4, true), 32, 132).active());
  // Whole rounds only.
  EXPECT_FALSE(SplitTail::Plan(PersistentTileOrder::Of(4096, 128, 33, 4, false), 32, 132).active());
  // b8 h16 S1024: 100 tiles left, spans of 7 of 8 key tiles.
  EXPECT_FALSE(SplitTail::Plan(PersistentTileOrder::Of(1024, 128, 16, 8, false), 8, 132).active());
  // Too few key tiles to cut.
  EXPECT_FALSE(SplitTail::Plan(PersistentTileOrder::Of(384, 128, 3, 1, false), 3, 132).active());
  // Fewer tiles than blocks, each long: 9 tiles of 64 key tiles over 132 blocks, spans of 5.
  const SplitTail few = SplitTail::Plan(PersistentTileOrder::Of(1152, 128, 1, 1, false), 64, 132);
  ASSERT_TRUE(few.active());
  EXPECT_EQ(few.first_tile, 0);
  EXPECT_EQ(few.span, 5);
}

// A tail launch (the split round as a launch of its own) is planned only after enough whole rounds:
// the flagship's 15 do, one whole round or none does not, where the in-kernel split is planned.
TEST(SplitTail, TailLaunchOnlyAfterEnoughWholeRounds) {
  const SplitTail flagship = SplitTail::ForLaunch(4096, 4096, 16, 4, false, true, 128, 128, 132, /*tail_launch=*/true);
  ASSERT_TRUE(flagship.active());
  EXPECT_EQ(flagship.first_tile, 15 * 132);
  EXPECT_EQ(flagship.span, 17);
  // fp16 b1 h12 S2048: 192 tiles, one whole round and 60 tiles split in spans of 8 of 16.
  EXPECT_TRUE(SplitTail::ForLaunch(2048, 2048, 12, 1, false, true, 128, 128, 132).active());
  EXPECT_FALSE(SplitTail::ForLaunch(2048, 2048, 12, 1, false, true, 128, 128, 132, true).active());
  // 9 long tiles on 132 blocks: no whole round.
  EXPECT_FALSE(SplitTail::ForLaunch(1152, 8192, 1, 1, false, true, 128, 128, 132, true).active());
  // Exactly the minimum of whole rounds (8 on 132 blocks, then 14 tiles of 4 key tiles), and one fewer.
  const int min_rounds = SplitTail::kTailMinWholeRounds;
  EXPECT_TRUE(SplitTail::ForLaunch(7, 400, min_rounds * 132 + 14, 1, false, true, 128, 128, 132, true).active());
  EXPECT_FALSE(
      SplitTail::ForLaunch(7, 400, (min_rounds - 1) * 132 + 14, 1, false, true, 128, 128, 132, true).active());
  // Never where the split itself is not planned, nor for a varlen batch.
  EXPECT_FALSE(SplitTail::ForLaunch(1024, 1024, 16, 8, false, true, 128, 128, 132, true).active());
  EXPECT_FALSE(SplitTail::ForLaunch(4096, 4096, 16, 4, false, false, 128, 128, 132, true).active());
}

// Every key tile of every split tile is one block's, exactly once; a tile's pieces come in key
// order from blocks FirstBlock .. LastBlock, numbered as the blocks, at most MaxPieces of them.
TEST(SplitTail, EveryKeyTileOfTheTailIsInExactlyOnePiece) {
  for (auto [q_len, heads, sequences, key_tiles, blocks] :
       std::vector<std::tuple<int, int, int, int, int>>{{4096, 16, 4, 32, 132}, {1152, 1, 1, 64, 132},
                                                        {2048, 13, 3, 40, 132}, {8192, 5, 1, 64, 78},
                                                        {640, 7, 2, 40, 16}}) {
    const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, false);
    const SplitTail split = SplitTail::Plan(order, key_tiles, blocks);
    ASSERT_TRUE(split.active()) << q_len << " " << heads << " " << sequences << " on " << blocks;
    EXPECT_EQ(split.first_tile + split.tiles, order.total);
    EXPECT_LE(4 * split.span, 3 * key_tiles);
    std::vector<std::vector<int>> owner(split.tiles, std::vector<int>(key_tiles, -1));
    std::vector<std::vector<int>> pieces_seen(split.tiles);
    for (int b = 0; b < blocks; ++b) {
      int steps = 0;
      int slot = 0, key_begin = 0, key_end = 0, piece = 0, pieces = 0;
      for (int i = 0; split.Piece(b, i, slot, key_begin, key_end, piece, pieces); ++i) {
        ASSERT_GE(slot, 0);
        ASSERT_LT(slot, split.tiles);
        ASSERT_LT(key_begin, key_end);
        ASSERT_LE(key_end, key_tiles);
        EXPECT_EQ(piece, b - split.FirstBlock(slot));
        EXPECT_EQ(pieces, split.LastBlock(slot) - split.FirstBlock(slot) + 1);
        EXPECT_LT(piece, pieces);
        EXPECT_LE(pieces, split.MaxPieces());
        for (int k = key_begin; k < key_end; ++k) {
          EXPECT_EQ(owner[slot][k], -1) << "slot " << slot << " key tile " << k << " twice";
          owner[slot][k] = b;
        }
        pieces_seen[slot].push_back(piece);
        steps += key_end - key_begin;
      }
      EXPECT_LE(steps, split.span);
    }
    for (int t = 0; t < split.tiles; ++t) {
      for (int k = 0; k < key_tiles; ++k) EXPECT_GE(owner[t][k], 0) << "slot " << t << " key tile " << k;
      for (int k = 1; k < key_tiles; ++k) EXPECT_GE(owner[t][k], owner[t][k - 1]);
      std::vector<int> expect(pieces_seen[t].size());
      for (size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<int>(i);
      std::sort(pieces_seen[t].begin(), pieces_seen[t].end());
      EXPECT_EQ(pieces_seen[t], expect) << "slot " << t;
    }
  }
}

}  // namespace
}  // namespace fusetune::cuda::fused
