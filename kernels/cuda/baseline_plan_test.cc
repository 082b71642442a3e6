#include "baseline_plan.h"

#include <gtest/gtest.h>

namespace fusetune::cuda {
namespace {

AttentionProblem Uniform(int batch, int heads, int q, int k) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = heads;
  p.kv_heads = heads;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = 64;
  return p;
}

TEST(BaselinePlan, UniformBatchIsOneGroupWithAlignedRows) {
  auto plan = PlanBaseline(Uniform(3, 4, 17, 77), /*with_scores=*/true, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 1u);
  const GemmGroup& g = plan->groups[0];
  EXPECT_EQ(g.sequences, 3);
  EXPECT_EQ(g.entries, 12);
  EXPECT_EQ(g.ld, 80);  // 77 rounded up to 8
  EXPECT_EQ(g.q_seq_stride, 17);
  EXPECT_EQ(g.k_seq_stride, 77);
  EXPECT_EQ(g.probs_offset, g.scores_offset);  // fp32 P overwrites S in place
  EXPECT_GE(plan->workspace_bytes, size_t{12} * 17 * 80 * 4);
  EXPECT_TRUE(plan->zero_rows.empty());
}

TEST(BaselinePlan, SixteenBitProbabilitiesGetTheirOwnRegion) {
  auto plan = PlanBaseline(Uniform(1, 2, 33, 40), true, 2);
  ASSERT_TRUE(plan.ok());
  const GemmGroup& g = plan->groups[0];
  EXPECT_GE(g.probs_offset, g.scores_offset + size_t{2} * 33 * 40 * 4);
  EXPECT_EQ(g.probs_offset % 256, 0u);
  EXPECT_GE(plan->workspace_bytes, g.probs_offset + size_t{2} * 33 * 40 * 2);
}

TEST(BaselinePlan, PartialStoresOnlyProbabilities) {
  auto with = PlanBaseline(Uniform(1, 2, 64, 64), true, 2);
  auto without = PlanBaseline(Uniform(1, 2, 64, 64), false, 2);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_LT(without->workspace_bytes, with->workspace_bytes);
  EXPECT_EQ(without->groups[0].probs_offset, 0u);
}

TEST(BaselinePlan, KeyPaddingSplitsGroupsAndZeroesEmptySequences) {
  AttentionProblem p = Uniform(4, 2, 5, 50);
  p.kv_valid_lens = {50, 50, 0, 7};
  auto plan = PlanBaseline(p, true, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 2u);
  EXPECT_EQ(plan->groups[0].sequences, 2);
  EXPECT_EQ(plan->groups[0].k_len, 50);
  EXPECT_EQ(plan->groups[1].first_sequence, 3);
  EXPECT_EQ(plan->groups[1].k_len, 7);
  EXPECT_EQ(plan->groups[1].k_first_row, 150);  // padding rows still occupy memory
  EXPECT_EQ(plan->groups[1].q_first_row, 15);
  ASSERT_EQ(plan->zero_rows.size(), 1u);
  EXPECT_EQ(plan->zero_rows[0].first_token, 10);
  EXPECT_EQ(plan->zero_rows[0].tokens, 5);
}

TEST(BaselinePlan, VarlenGroupsOnlyEqualNeighbours) {
  AttentionProblem p = Uniform(4, 3, 0, 0);
  p.kv_heads = 1;  // MQA: entries still count q heads
  p.cu_seqlens_q = {0, 10, 20, 21, 21};
  p.cu_seqlens_k = {0, 12, 24, 30, 30};
  p.q_len = 10;
  p.kv_len = 12;
  auto plan = PlanBaseline(p, false, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->groups.size(), 2u);
  EXPECT_EQ(plan->groups[0].sequences, 2);
  EXPECT_EQ(plan->groups[0].entries, 6);
  EXPECT_EQ(plan->groups[1].q_first_row, 20);
  EXPECT_EQ(plan->groups[1].k_first_row, 24);
  EXPECT_EQ(plan->groups[1].k_len, 6);
  EXPECT_TRUE(plan->zero_rows.empty());  // the last sequence has no queries at all
}

TEST(BaselinePlan, RejectsInvalidProblems) {
  AttentionProblem p = Uniform(1, 3, 8, 8);
  p.kv_heads = 2;
  EXPECT_EQ(PlanBaseline(p, true, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanBaseline(Uniform(1, 1, 8, 8), true, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fusetune::cuda
