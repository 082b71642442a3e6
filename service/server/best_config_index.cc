#include "fusetune/service/best_config_index.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"

namespace fusetune {
namespace {


std::string ExactKey(std::string_view device_class, std::string_view problem_key) {
  return Cat(device_class, "\n", problem_key);
}

double Log2Ratio(int a, int b) {
  return std::fabs(std::log2(static_cast<double>(a) / static_cast<double>(b)));
}

// ceil(log2) of the mean visible cache length over the sequences (at least 1 key).
double CacheLengthBucket(const AttentionProblem& p) {
  double keys = 0;
  for (int b = 0; b < p.batch; ++b) keys += p.VisibleKeyLen(b);
  return std::ceil(std::log2(std::max(keys / std::max(p.batch, 1), 1.0)));
}

}  // namespace

double ShapeDistance(const AttentionProblem& a, const AttentionProblem& b) {
  if (a.kind == ProblemKind::kDecode && b.kind == ProblemKind::kDecode) {
    return std::fabs(CacheLengthBucket(a) - CacheLengthBucket(b)) + Log2Ratio(a.batch, b.batch) +
           Log2Ratio(std::max(a.q_len, 1), std::max(b.q_len, 1));
  }
  return Log2Ratio(a.batch, b.batch) + Log2Ratio(a.q_heads, b.q_heads) +
         Log2Ratio(a.kv_heads, b.kv_heads) + Log2Ratio(std::max(a.q_len, 1), std::max(b.q_len, 1)) +
         Log2Ratio(std::max(a.kv_len, 1), std::max(b.kv_len, 1));
}

std::string BestConfigIndex::GroupKey(std::string_view device_class, const AttentionProblem& p) {
  std::string key = Cat(device_class, "\n", ProblemKindName(p.kind), "/d", p.head_dim, "/causal", p.causal ? 1 : 0,
                        "/", DTypeName(p.dtype), "/page", p.page_block_size);
  if (p.kind == ProblemKind::kDecode) absl::StrAppend(&key, "/hq", p.q_heads, "/hkv", p.kv_heads);
  // K/V stored as e4m3 run other kernels than a cache in the dtype: never each other's nearest.
  if (p.is_kv_quantized()) absl::StrAppend(&key, "/kve4m3");
  return key;
}

BestConfigIndex BestConfigIndex::Build(std::vector<BestConfig> best) {
  BestConfigIndex index;
  for (BestConfig& b : best) {
    auto config = KernelConfig::FromKey(b.config_key);
    if (!config.ok()) continue;
    const size_t i = index.entries_.size();
    index.exact_[ExactKey(b.device_class, b.problem_key)] = i;
    if (auto p = AttentionProblem::FromKey(b.problem_key); p.ok()) {
      index.groups_[GroupKey(b.device_class, *p)].push_back(Candidate{*p, i});
    }
    index.configs_.push_back(*config);
    index.entries_.push_back(std::move(b));
  }
  return index;
}

absl::StatusOr<BestConfigAnswer> BestConfigIndex::Lookup(const AttentionProblem& problem,
                                                         std::string_view device_class) const {
  BestConfigAnswer answer;
  answer.problem_key = problem.Key();
  if (auto it = exact_.find(ExactKey(device_class, answer.problem_key)); it != exact_.end()) {
    answer.provenance = ConfigProvenance::kExact;
    answer.config = configs_[it->second];
    answer.source = entries_[it->second];
    return answer;
  }
  if (auto it = groups_.find(GroupKey(device_class, problem)); it != groups_.end()) {
    const Candidate* best = nullptr;
    double best_distance = 0;
    for (const Candidate& c : it->second) {
      const double d = ShapeDistance(problem, c.problem);
      if (best == nullptr || d < best_distance ||
          (d == best_distance && entries_[c.entry].problem_key < entries_[best->entry].problem_key)) {
        best = &c;
        best_distance = d;
      }
    }
    if (best != nullptr) {
      answer.provenance = ConfigProvenance::kNearest;
      answer.config = configs_[best->entry];
      answer.source = entries_[best->entry];
      answer.distance = best_distance;
      return answer;
    }
  }
  auto config = DefaultConfig(BackendOfDeviceClass(device_class), problem);
  if (!config.ok()) return config.status();
  answer.provenance = ConfigProvenance::kDefault;
  answer.config = *config;
  return answer;
}

}  // namespace fusetune
