#include "fusetune/kernels/split_kv.h"

#include <algorithm>
#include <cstdint>

namespace fusetune {

int ChooseSplitKv(const AttentionProblem& problem, int processors, int min_keys_per_split) {
  if (problem.kind != ProblemKind::kDecode || processors < 1) return 1;
  const int64_t items = static_cast<int64_t>(problem.batch) * problem.kv_heads;
  if (items * 5 >= static_cast<int64_t>(processors) * 4) return 1;
  int longest = 0;
  for (int b = 0; b < problem.batch; ++b) longest = std::max(longest, problem.VisibleKeyLen(b));
  const int most = std::clamp(longest / std::max(1, min_keys_per_split), 1, kMaxSplitKv);
  auto efficiency = [&](int splits) {
    const int64_t work = items * splits;
    const int64_t waves = (work + processors - 1) / processors;
    return static_cast<double>(work) / static_cast<double>(waves * processors);
  };
  double best = 0;
  for (int s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= most; ++s) {
    if (efficiency(s) >= 0.85 * best) return s;
  }
  return 1;
}

}  // namespace fusetune
