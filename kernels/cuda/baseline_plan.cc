#include "baseline_plan.h"

#include "absl/status/status.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {
namespace {

constexpr size_t kRegionAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }

}  // namespace

absl::StatusOr<BaselinePlan> PlanBaseline(const AttentionProblem& problem, bool with_scores,
                                          int probs_bytes) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (probs_bytes != 2 && probs_bytes != 4) {
    return absl::InvalidArgumentError("P elements are 2 or 4 bytes");
  }
  BaselinePlan plan;
  for (int b = 0; b < problem.batch; ++b) {
    const int q_len = problem.QueryLen(b);
    const int k_len = problem.VisibleKeyLen(b);
    if (q_len == 0) continue;
    if (k_len == 0) {
      if (!plan.zero_rows.empty() &&
          plan.zero_rows.back().first_token + plan.zero_rows.back().tokens == problem.QueryStart(b)) {
        plan.zero_rows.back().tokens += q_len;
      } else {
        plan.zero_rows.push_back({problem.QueryStart(b), q_len});
      }
      continue;
    }
    if (!plan.groups.empty()) {
      GemmGroup& g = plan.groups.back();
      const bool same_shape = g.q_len == q_len && g.k_len == k_len;
      const bool adjacent = g.first_sequence + g.sequences == b &&
                            problem.QueryStart(b) == g.q_first_row + g.sequences * g.q_seq_stride &&
                            problem.KeyStart(b) == g.k_first_row + g.sequences * g.k_seq_stride;
      if (same_shape && adjacent) {
        ++g.sequences;
        continue;
      }
    }
    GemmGroup g;
    g.first_sequence = b;
    g.sequences = 1;
    g.q_first_row = problem.QueryStart(b);
    g.k_first_row = problem.KeyStart(b);
    g.q_seq_stride = q_len;
    g.k_seq_stride = problem.KeyLen(b);  // stored keys: padding rows still occupy memory
    g.q_len = q_len;
    g.k_len = k_len;
    g.ld = (k_len + 7) / 8 * 8;
    plan.groups.push_back(g);
  }
  size_t offset = 0;
  for (GemmGroup& g : plan.groups) {
    g.entries = static_cast<int64_t>(g.sequences) * problem.q_heads;
    const size_t elements = static_cast<size_t>(g.entries) * g.q_len * static_cast<size_t>(g.ld);
    if (with_scores) {
      g.scores_offset = offset;
      offset = AlignUp(offset + elements * 4);
      if (probs_bytes == 4) {
        g.probs_offset = g.scores_offset;  // softmax in place
        continue;
      }
    }
    g.probs_offset = offset;
    offset = AlignUp(offset + elements * static_cast<size_t>(probs_bytes));
  }
  plan.workspace_bytes = offset;
  return plan;
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE
