#include "fusetune/kernels/split_kv.h"

#include "fusetune/kernels/config.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

AttentionProblem Decode(int batch, int kv_heads, int cache_len) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = batch;
  p.q_heads = 4 * kv_heads;
  p.kv_heads = kv_heads;
  p.q_len = 1;
  p.kv_len = cache_len;
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  return p;
}

TEST(ChooseSplitKv, OneLongSequenceIsSplitToFillTheProcessors) {
  const AttentionProblem p = Decode(1, 8, 65536);
  ASSERT_TRUE(p.Validate().ok());
  const int splits = ChooseSplitKv(p, 132);
  // 8 items x splits must cover most of 132 SMs in one wave.
  EXPECT_GE(8 * splits, 0.85 * 132);
  EXPECT_LE(8 * splits, 132);
}

TEST(ChooseSplitKv, WorkThatFillsTheDeviceIsNotSplit) {
  EXPECT_EQ(ChooseSplitKv(Decode(16, 8, 8192), 132), 1);
}

TEST(ChooseSplitKv, ShortCachesAndPrefillAreNotSplit) {
  EXPECT_EQ(ChooseSplitKv(Decode(1, 8, 300), 132), 1);
  AttentionProblem prefill = Decode(1, 8, 65536);
  prefill.kind = ProblemKind::kPrefill;
  EXPECT_EQ(ChooseSplitKv(prefill, 132), 1);
}

TEST(ChooseSplitKv, PartsKeepTheMinimumKeysAndTheCap) {
  const AttentionProblem p = Decode(1, 1, 1024);
  EXPECT_LE(ChooseSplitKv(p, 132, 256), 4);
  EXPECT_LE(ChooseSplitKv(Decode(1, 1, 1 << 20), 1000), kMaxSplitKv);
}

TEST(ChooseSplitKv, TheAutomaticCountHasItsOwnConfigKey) {
  KernelConfig c;
  c.split_kv = kAutoSplitKv;
  EXPECT_EQ(c.Key(), "fused/bm64/bs64/t1/fp32/st1/skauto");
  absl::StatusOr<KernelConfig> back = KernelConfig::FromKey(c.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->split_kv, kAutoSplitKv);
  EXPECT_TRUE(c.Validate().ok());
}

}  // namespace
}  // namespace fusetune
