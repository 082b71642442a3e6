#include "fusetune/tuner/searcher.h"

#include <set>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

std::vector<KernelConfig> Configs(int n) {
  std::vector<KernelConfig> out;
  for (int i = 0; i < n; ++i) {
    KernelConfig c;
    c.block_m = 16 * (i + 1);
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> Drain(Searcher& s, std::vector<Trial>* history = nullptr) {
  std::vector<Trial> local;
  std::vector<Trial>& h = history ? *history : local;
  std::vector<std::string> keys;
  while (auto c = s.Next(h)) {
    keys.push_back(c->Key());
    Trial t;
    t.config_key = c->Key();
    h.push_back(t);
  }
  return keys;
}

TEST(Searcher, ExhaustiveProposesEveryConfigInOrderOnce) {
  auto s = CreateExhaustiveSearcher(Configs(5));
  std::vector<std::string> keys = Drain(*s);
  ASSERT_EQ(keys.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(keys[i], Configs(5)[i].Key());
  EXPECT_FALSE(s->Next({}).has_value());
}

TEST(Searcher, SkipsConfigsAlreadyInHistory) {
  std::vector<Trial> history(1);
  history[0].config_key = Configs(5)[1].Key();
  auto s = CreateExhaustiveSearcher(Configs(5));
  std::vector<std::string> keys = Drain(*s, &history);
  EXPECT_EQ(keys.size(), 4u);
  for (const auto& k : keys) EXPECT_NE(k, Configs(5)[1].Key());
}

TEST(Searcher, RandomIsASeededPermutation) {
  const auto a = Drain(*CreateRandomSearcher(Configs(20), 7));
  const auto b = Drain(*CreateRandomSearcher(Configs(20), 7));
  const auto c = Drain(*CreateRandomSearcher(Configs(20), 8));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 20u);
  std::vector<std::string> in_order;
  for (const auto& k : Configs(20)) in_order.push_back(k.Key());
  EXPECT_NE(a, in_order);
}

TEST(Searcher, EmptyListProposesNothing) {
  EXPECT_FALSE(CreateRandomSearcher({}, 1)->Next({}).has_value());
  EXPECT_FALSE(CreateExhaustiveSearcher({})->Next({}).has_value());
}

TEST(Searcher, StrategyNamesRoundTrip) {
  for (SearchStrategy s : {SearchStrategy::kExhaustive, SearchStrategy::kRandom}) {
    EXPECT_EQ(*ParseSearchStrategy(SearchStrategyName(s)), s);
  }
  EXPECT_FALSE(ParseSearchStrategy("genetic").ok());
}

TEST(StopCondition, CapsTrialsAndTime) {
  StopCondition none;
  EXPECT_FALSE(none.Reached(1000000, 1e9));
  StopCondition trials{.max_trials = 3};
  EXPECT_FALSE(trials.Reached(2, 1e9));
  EXPECT_TRUE(trials.Reached(3, 0));
  StopCondition seconds{.max_seconds = 1.5};
  EXPECT_FALSE(seconds.Reached(100, 1.4));
  EXPECT_TRUE(seconds.Reached(0, 1.5));
}

}  // namespace
}  // namespace fusetune
