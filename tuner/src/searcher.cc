#include "fusetune/tuner/searcher.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

// splitmix64: a tiny generator with a fixed definition, so shuffles agree across hosts.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Walks a fixed order, skipping configs already measured.
class OrderedSearcher : public Searcher {
 public:
  explicit OrderedSearcher(std::vector<KernelConfig> order) : order_(std::move(order)) {}

  std::optional<KernelConfig> Next(std::span<const Trial> history) override {
    std::set<std::string> done;
    for (const Trial& t : history) done.insert(t.config_key);
    while (next_ < order_.size()) {
      const KernelConfig& c = order_[next_++];
      if (!done.contains(c.Key())) return c;
    }
    return std::nullopt;
  }

 private:
  std::vector<KernelConfig> order_;
  size_t next_ = 0;
};

}  // namespace

std::string_view SearchStrategyName(SearchStrategy s) {
  switch (s) {
    case SearchStrategy::kAuto: return "auto";
    case SearchStrategy::kExhaustive: return "exhaustive";
    case SearchStrategy::kSuccessiveHalving: return "halving";
    case SearchStrategy::kRandom: return "random";
  }
  return "?";
}

absl::StatusOr<SearchStrategy> ParseSearchStrategy(std::string_view name) {
  for (SearchStrategy s : {SearchStrategy::kAuto, SearchStrategy::kExhaustive, SearchStrategy::kSuccessiveHalving,
                           SearchStrategy::kRandom}) {
    if (SearchStrategyName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown search strategy '", std::string(name),
                                                 "' (expected auto, exhaustive, halving or random)"));
}

std::unique_ptr<Searcher> CreateExhaustiveSearcher(std::vector<KernelConfig> configs) {
  return std::make_unique<OrderedSearcher>(std::move(configs));
}

std::unique_ptr<Searcher> CreateRandomSearcher(std::vector<KernelConfig> configs, uint64_t seed) {
  uint64_t state = seed;
  // Fisher-Yates with an unbiased bounded draw (rejection on the top partial range).
  for (size_t i = configs.size(); i > 1; --i) {
    const uint64_t bound = i;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
      r = SplitMix64(state);
    } while (r >= limit);
    std::swap(configs[i - 1], configs[r % bound]);
  }
  return std::make_unique<OrderedSearcher>(std::move(configs));
}

std::unique_ptr<Searcher> CreateSearcher(SearchStrategy strategy, std::vector<KernelConfig> configs,
                                         uint64_t seed) {
  // Halving screens in a random order too: if the budget cuts its screen short, the
  // configs it did screen are an unbiased sample of the space.
  if (strategy == SearchStrategy::kRandom || strategy == SearchStrategy::kSuccessiveHalving) {
    return CreateRandomSearcher(std::move(configs), seed);
  }
  return CreateExhaustiveSearcher(std::move(configs));
}

bool StopCondition::Reached(int trials, double elapsed_seconds) const {
  if (max_trials > 0 && trials >= max_trials) return true;
  if (max_seconds > 0 && elapsed_seconds >= max_seconds) return true;
  return false;
}

}  // namespace fusetune
