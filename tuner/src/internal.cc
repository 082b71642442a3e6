#include "internal.h"

#include <algorithm>

#include "fusetune/kernels/config.h"

namespace fusetune::tuner_internal {

double RankingUs(const Trial& t) {
  const bool screen = t.stage == TrialStage::kScreen || (t.stage == TrialStage::kAudit && t.attempt == 0);
  return screen ? t.p10_us : t.median_us;
}

std::vector<Trial> RankedOk(const std::vector<Trial>& trials) {
  std::vector<Trial> ok;
  for (const Trial& t : trials) {
    if (t.outcome == TrialOutcome::kOk) ok.push_back(t);
  }
  std::stable_sort(ok.begin(), ok.end(), [](const Trial& a, const Trial& b) {
    if (RankingUs(a) != RankingUs(b)) return RankingUs(a) < RankingUs(b);
    absl::StatusOr<KernelConfig> ca = KernelConfig::FromKey(a.config_key);
    absl::StatusOr<KernelConfig> cb = KernelConfig::FromKey(b.config_key);
    if (ca.ok() && cb.ok()) return ConfigOrderLess(*ca, *cb);
    return a.config_key < b.config_key;
  });
  return ok;
}

std::vector<Trial> Contenders(const std::vector<Trial>& ranked, double leader_us, double near_fraction,
                              int min_count, int max_count) {
  std::vector<Trial> out;
  for (const Trial& t : ranked) {
    if (static_cast<int>(out.size()) >= max_count) break;
    const bool near = RankingUs(t) <= leader_us * (1.0 + near_fraction);
    if (near || static_cast<int>(out.size()) < min_count) out.push_back(t);
  }
  return out;
}

}  // namespace fusetune::tuner_internal
