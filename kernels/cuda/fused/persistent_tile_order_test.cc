#include "fused/persistent_tile_order.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::cuda::fused {
namespace {

struct Share {
  std::vector<std::tuple<int, int, int>> tiles;  // (query block, head, sequence), in walk order
  int64_t cost = 0;                              // key tiles visited under the causal mask
};

// The tiles each of `blocks` persistent blocks walks, as the kernel's loop does; a tile's cost
// is its query block + 1 key tiles when causal (q_len == kv_len), 1 otherwise.
std::vector<Share> Walk(const PersistentTileOrder& order, int blocks) {
  std::vector<Share> shares(blocks);
  for (int b = 0; b < blocks; ++b) {
    for (int64_t round = 0; round < order.Rounds(blocks); ++round) {
      const int64_t t = order.TileOf(round, b, blocks);
      if (t >= order.total) continue;
      int query_block = 0, head = 0, seq = 0;
      order.Decode(t, query_block, head, seq);
      shares[b].tiles.emplace_back(query_block, head, seq);
      shares[b].cost += order.causal ? query_block + 1 : 1;
    }
  }
  return shares;
}

double Imbalance(const std::vector<Share>& shares) {
  int64_t lo = shares.front().cost, hi = lo;
  for (const Share& s : shares) {
    lo = std::min(lo, s.cost);
    hi = std::max(hi, s.cost);
  }
  return static_cast<double>(hi) / static_cast<double>(lo);
}

TEST(PersistentTileOrder, EveryTileIsWalkedOnceByOneBlock) {
  for (auto [q_len, heads, sequences, causal, blocks] :
       std::vector<std::tuple<int, int, int, bool, int>>{{300, 64, 4, true, 132}, {300, 64, 4, false, 132},
                                                        {16384, 16, 1, true, 132}, {1024, 16, 8, false, 7},
                                                        {129, 3, 2, true, 1}, {128, 2, 1, true, 132}}) {
    const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, causal);
    const int grid = static_cast<int>(std::min<int64_t>(blocks, order.total));  // as LaunchWgmma sizes it
    std::set<std::tuple<int, int, int>> seen;
    int64_t walked = 0;
    for (const Share& s : Walk(order, grid)) {
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
    EXPECT_EQ(walked, order.total) << "q_len " << q_len << " heads " << heads << " sequences " << sequences;
  }
}

// Under a causal mask the blocks' shares cost the same to within a few percent: a stride over
// tiles with query blocks innermost gave one block 3.6x another's key tiles at S=16384 (1 x 16
// heads, 132 blocks), which ran 1.6x slower than the one-tile grid on an H200.
TEST(PersistentTileOrder, CausalSharesAreBalanced) {
  for (auto [q_len, heads, sequences] :
       std::vector<std::tuple<int, int, int>>{{16384, 16, 1}, {4096, 16, 4}, {4096, 32, 2}, {8192, 8, 3}}) {
    const PersistentTileOrder order = PersistentTileOrder::Of(q_len, 128, heads, sequences, /*causal=*/true);
    EXPECT_LE(Imbalance(Walk(order, 132)), 1.02) << "S=" << q_len << " heads " << heads << " sequences " << sequences;
  }
}

TEST(PersistentTileOrder, CausalWalksLongestFirst) {
  const PersistentTileOrder order = PersistentTileOrder::Of(4096, 128, 16, 4, /*causal=*/true);
  for (const Share& s : Walk(order, 132)) {
    // Each block's tiles come from bands of ever shorter query blocks.
    for (size_t i = 1; i < s.tiles.size(); ++i) EXPECT_LE(std::get<0>(s.tiles[i]), std::get<0>(s.tiles[i - 1]));
  }
}

// Without a mask, tiles t .. t + m_blocks - 1 are one (sequence, head): the blocks in flight
// together read a few heads' K/V, the query heads of one KV head side by side.
TEST(PersistentTileOrder, WithoutAMaskConsecutiveTilesShareAHead) {
  const PersistentTileOrder order = PersistentTileOrder::Of(1024, 128, 32, 2, /*causal=*/false);
  for (int64_t t = 0; t < order.total; ++t) {
    int query_block = 0, head = 0, seq = 0;
    order.Decode(t, query_block, head, seq);
    EXPECT_EQ(query_block, t % 8);
    EXPECT_EQ(head, (t / 8) % 32);
    EXPECT_EQ(seq, t / (8 * 32));
  }
}

}  // namespace
}  // namespace fusetune::cuda::fused
