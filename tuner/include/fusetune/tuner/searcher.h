// Searcher: proposes the next config to measure, given the trials measured so far.
//
// A searcher walks a fixed list of configs (usually ConfigSpace::ForVariant) and never
// proposes a config whose key already appears in the history, so a resumed sweep that
// feeds back the trials it found on disk continues where it stopped. Searchers are
// deterministic: the same list, seed and history give the same proposals.
//
// StopCondition caps a search by trial count and wall time; the caller checks it.
//
// Thread-safety: a Searcher is not thread-safe (one per search).
#ifndef FUSETUNE_TUNER_SEARCHER_H_
#define FUSETUNE_TUNER_SEARCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/records/trial.h"

namespace fusetune {

class Searcher {
 public:
  virtual ~Searcher() = default;
  // The next config to try, or nullopt when every config of the list has been proposed or
  // appears in `history` (by config key). `history` holds the trials of this search so
  // far, any outcome, in the order they were measured.
  virtual std::optional<KernelConfig> Next(std::span<const Trial> history) = 0;
};

// How a sweep walks a variant's space (sweep.h says what each does with the budget):
//   kAuto               exhaustive when the variant's space has at most
//                       kExhaustiveSpaceLimit configs, else successive halving;
//   kExhaustive         every config, screened with the full timing options;
//   kSuccessiveHalving  every config screened with few samples, then the better half
//                       re-measured in interleaved rounds with doubled rounds, and so on;
//   kRandom             configs in a seeded random order until the budget is spent.
enum class SearchStrategy { kAuto, kExhaustive, kSuccessiveHalving, kRandom };
inline constexpr int kExhaustiveSpaceLimit = 64;
// "auto", "exhaustive", "halving", "random"
std::string_view SearchStrategyName(SearchStrategy s);
absl::StatusOr<SearchStrategy> ParseSearchStrategy(std::string_view name);

// Proposes `configs` in the given order.
std::unique_ptr<Searcher> CreateExhaustiveSearcher(std::vector<KernelConfig> configs);
// Proposes `configs` in a random order fixed by `seed` (a seeded shuffle, reproducible on
// every host: it uses its own generator, not std::shuffle's unspecified one).
std::unique_ptr<Searcher> CreateRandomSearcher(std::vector<KernelConfig> configs, uint64_t seed);
// kRandom and kSuccessiveHalving: CreateRandomSearcher; kExhaustive and kAuto: the given order.
std::unique_ptr<Searcher> CreateSearcher(SearchStrategy strategy, std::vector<KernelConfig> configs,
                                         uint64_t seed);

// Caps a search. 0 means "no cap" for either field.
struct StopCondition {
  int max_trials = 0;
  double max_seconds = 0;
  // True when `trials` >= max_trials (if set) or `elapsed_seconds` >= max_seconds (if set).
  bool Reached(int trials, double elapsed_seconds) const;
};

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_SEARCHER_H_
