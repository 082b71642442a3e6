// BestConfigIndex: an immutable in-memory snapshot of the store's best configs that answers
// GetBestConfig without touching SQLite: exact match, else the nearest tuned shape, else a
// documented default.
//
// Exact: the same device class and the same problem key (AttentionProblem::Key()).
//
// Nearest: among the tuned problems of the same device class with the same kind (prefill /
// decode), head_dim, dtype, causal flag and page size (0 = contiguous K/V), and for decode
// also the same query and KV heads, whose keys parse back (AttentionProblem::FromKey;
// varlen and padded problems carry only a hash of their length lists, so they can be
// matched exactly but are never used as a nearest source), the one minimising, for prefill,
//     distance = |log2(b/b')| + |log2(hq/hq')| + |log2(hkv/hkv')| + |log2(q/q')| + |log2(k/k')|
// i.e. the number of doublings/halvings of batch, query heads, KV heads, query length and
// key length that separate the shapes (for a varlen request, q and k are its longest
// sequence); and for decode, where the cache length decides the split and the batch how
// many blocks fill the device,
//     distance = |bucket(c) - bucket(c')| + |log2(b/b')| + |log2(q/q')|
// with c the mean cache length over the batch's sequences (visible keys), bucket(c) =
// ceil(log2(c)) (so 7000 and 8192 keys share a bucket), and q the new tokens per sequence.
// Ties break by the smaller problem key, so answers are deterministic.
//
// Default (nothing comparable tuned): DefaultConfig of the device class's backend
// (fusetune/kernels/default_config.h, the same definition the client cache falls back to).
// It is safe, not fast: the answer says DEFAULT so that callers know to submit a tuning job.
//
// Answers are BestConfigAnswer (fusetune/wire/records_convert.h, which maps them to the proto).
//
// Thread-safety: immutable after Build(); Lookup is safe to call concurrently.
#ifndef FUSETUNE_SERVICE_BEST_CONFIG_INDEX_H_
#define FUSETUNE_SERVICE_BEST_CONFIG_INDEX_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/default_config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/records/run.h"
#include "fusetune/wire/records_convert.h"

namespace fusetune {

// The distance above between two problems (both valid).
double ShapeDistance(const AttentionProblem& a, const AttentionProblem& b);

class BestConfigIndex {
 public:
  // Indexes `best` (stored configs whose config key does not parse are skipped: they can't
  // be served).
  static BestConfigIndex Build(std::vector<BestConfig> best);

  // The answer for a validated problem on a validated device class. InvalidArgument only
  // when the device class's backend is unknown (no default exists for it).
  absl::StatusOr<BestConfigAnswer> Lookup(const AttentionProblem& problem,
                                          std::string_view device_class) const;

  const std::vector<BestConfig>& entries() const { return entries_; }

 private:
  struct Candidate {
    AttentionProblem problem;
    size_t entry;  // index into entries_
  };
  // Group of nearest candidates: device class + kind/head_dim/dtype/causal/page size (and the
  // heads, for decode).
  static std::string GroupKey(std::string_view device_class, const AttentionProblem& p);

  std::vector<BestConfig> entries_;
  std::vector<KernelConfig> configs_;  // parsed config of each entry
  absl::flat_hash_map<std::string, size_t> exact_;  // device_class + '\n' + problem_key
  absl::flat_hash_map<std::string, std::vector<Candidate>> groups_;
};

}  // namespace fusetune

#endif  // FUSETUNE_SERVICE_BEST_CONFIG_INDEX_H_
