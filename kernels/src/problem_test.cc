#include "fusetune/kernels/problem.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fusetune/kernels/reference.h"

namespace fusetune {
namespace {

using ::testing::HasSubstr;

AttentionProblem Dense(int s = 128) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = s;
  p.kv_len = s;
  p.head_dim = 64;
  return p;
}

TEST(AttentionProblem, ValidDenseProblemPasses) { EXPECT_TRUE(Dense().Validate().ok()); }

TEST(AttentionProblem, RejectsZeroHeads) {
  AttentionProblem p = Dense();
  p.q_heads = 0;
  absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_heads"));
  p = Dense();
  p.kv_heads = 0;
  s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("kv_heads"));
}

TEST(AttentionProblem, RejectsKvHeadsThatDoNotDivideQHeads) {
  AttentionProblem p = Dense();
  p.q_heads = 12;
  p.kv_heads = 5;
  absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("divide"));
  p.kv_heads = 24;  // more KV heads than query heads
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionProblem, RejectsHeadDimOutOfRange) {
  for (int d : {0, 16, 31, 33, 264, 512, -64}) {
    AttentionProblem p = Dense();
    p.head_dim = d;
    absl::Status s = p.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << d;
    EXPECT_THAT(s.message(), HasSubstr("head_dim")) << d;
  }
  for (int d : {32, 64, 96, 128, 256}) {
    AttentionProblem p = Dense();
    p.head_dim = d;
    EXPECT_TRUE(p.Validate().ok()) << d;
  }
}

TEST(AttentionProblem, RejectsMismatchedCuSeqlens) {
  AttentionProblem p = Dense();
  p.batch = 2;
  p.cu_seqlens_q = {0, 5, 12};
  p.cu_seqlens_k = {0, 7, 9};
  p.q_len = 7;
  p.kv_len = 7;
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();

  AttentionProblem wrong_count = p;
  wrong_count.cu_seqlens_k = {0, 7};
  EXPECT_THAT(wrong_count.Validate().message(), HasSubstr("cu_seqlens_k"));

  AttentionProblem only_q = p;
  only_q.cu_seqlens_k.clear();
  EXPECT_EQ(only_q.Validate().code(), absl::StatusCode::kInvalidArgument);

  AttentionProblem decreasing = p;
  decreasing.cu_seqlens_q = {0, 5, 4};
  EXPECT_THAT(decreasing.Validate().message(), HasSubstr("non-decreasing"));

  AttentionProblem nonzero_start = p;
  nonzero_start.cu_seqlens_k = {1, 7, 9};
  EXPECT_EQ(nonzero_start.Validate().code(), absl::StatusCode::kInvalidArgument);

  AttentionProblem wrong_max = p;
  wrong_max.q_len = 6;
  EXPECT_THAT(wrong_max.Validate().message(), HasSubstr("longest"));

  AttentionProblem padded_varlen = p;
  padded_varlen.kv_valid_lens = {1, 1};
  EXPECT_EQ(padded_varlen.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionProblem, RejectsBadKeyPaddingAndLengths) {
  AttentionProblem p = Dense(16);
  p.kv_valid_lens = {3};  // batch is 2
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p.kv_valid_lens = {3, 17};
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  p.kv_valid_lens = {0, 16};
  EXPECT_TRUE(p.Validate().ok());
  AttentionProblem zero = Dense();
  zero.q_len = 0;
  EXPECT_EQ(zero.Validate().code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem nan_scale = Dense();
  nan_scale.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(nan_scale.Validate().code(), absl::StatusCode::kInvalidArgument);
  // scale * log2(e) must stay a finite float: up to kMaxSoftmaxScale is valid, beyond is not.
  AttentionProblem huge_scale = Dense();
  huge_scale.softmax_scale = kMaxSoftmaxScale;
  EXPECT_TRUE(huge_scale.Validate().ok()) << huge_scale.Validate();
  huge_scale.softmax_scale = 3e38f;
  EXPECT_EQ(huge_scale.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge_scale.Validate().message().find("softmax_scale"), std::string::npos);
}

TEST(AttentionProblem, KeyRoundTripsThroughFromKey) {
  AttentionProblem p = Dense(2048);
  p.causal = true;
  p.dtype = DType::kBf16;
  p.q_len = 1000;
  EXPECT_EQ(p.Key(), "prefill/b2/hq8/hkv2/q1000/k2048/d64/causal1/bf16");
  auto back = AttentionProblem::FromKey(p.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Key(), p.Key());
  EXPECT_EQ(back->q_len, 1000);
  EXPECT_EQ(back->kv_heads, 2);
  EXPECT_TRUE(back->causal);
  EXPECT_EQ(back->dtype, DType::kBf16);

  p.softmax_scale = 0.25f;
  back = AttentionProblem::FromKey(p.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->softmax_scale, 0.25f);
  EXPECT_EQ(back->Key(), p.Key());
}

TEST(AttentionProblem, FromKeyRejectsMalformedAndHashedKeys) {
  for (const char* key : {"", "prefill", "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0",
                          "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal2/fp32",
                          "prefill/bX/hq12/hkv12/q2048/k2048/d64/causal0/fp32",
                          "prefill/b1/hq12/hkv5/q2048/k2048/d64/causal0/fp32",
                          "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp64",
                          "train/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"}) {
    EXPECT_FALSE(AttentionProblem::FromKey(key).ok()) << key;
  }
  AttentionProblem v = Dense();
  v.cu_seqlens_q = {0, 3, 5};
  v.cu_seqlens_k = {0, 3, 5};
  v.q_len = 3;
  v.kv_len = 3;
  ASSERT_TRUE(v.Validate().ok());
  EXPECT_THAT(v.Key(), HasSubstr("/varlen-"));
  EXPECT_EQ(AttentionProblem::FromKey(v.Key()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionProblem, KeysDifferForDifferentLengthLists) {
  AttentionProblem a = Dense(8);
  a.kv_valid_lens = {3, 8};
  AttentionProblem b = a;
  b.kv_valid_lens = {4, 8};
  EXPECT_NE(a.Key(), b.Key());
}

TEST(AttentionProblem, FlopsCountVisiblePairsOfCausalSquareProblem) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 12;
  p.kv_heads = 12;
  p.q_len = 2048;
  p.kv_len = 2048;
  p.head_dim = 64;
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_DOUBLE_EQ(p.Flops(), 4.0 * 12 * 2048.0 * 2048.0 * 64);
  p.causal = true;
  // Query i sees i + 1 keys: sum = S (S + 1) / 2.
  EXPECT_DOUBLE_EQ(p.Flops(), 4.0 * 12 * 64 * (2048.0 * 2049.0 / 2.0));
  // Bottom-right alignment with q < k: query i sees k - q + i + 1 keys.
  p.q_len = 2;
  p.kv_len = 5;
  EXPECT_DOUBLE_EQ(p.Flops(), 4.0 * 12 * 64 * (4 + 5));
}

TEST(AttentionProblem, GeometryOfVarlenBatch) {
  AttentionProblem p = Dense();
  p.batch = 3;
  p.cu_seqlens_q = {0, 4, 4, 10};
  p.cu_seqlens_k = {0, 2, 9, 9};
  p.q_len = 6;
  p.kv_len = 7;
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_EQ(p.TotalQueries(), 10);
  EXPECT_EQ(p.TotalKeys(), 9);
  EXPECT_EQ(p.QueryStart(2), 4);
  EXPECT_EQ(p.QueryLen(1), 0);
  EXPECT_EQ(p.KeyLen(2), 0);
  EXPECT_EQ(p.KeyStart(2), 9);
  EXPECT_EQ(p.QElements(), 10 * 8 * 64);
  EXPECT_EQ(p.KVElements(), 9 * 2 * 64);
}

TEST(AttentionProblem, SeedPresetHasFiveSquareShapes) {
  auto seed = SeedPresetProblems();
  ASSERT_EQ(seed.size(), 5u);
  EXPECT_EQ(seed.back().Key(), "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32");
  for (const auto& p : seed) EXPECT_TRUE(p.Validate().ok());
}

}  // namespace
}  // namespace fusetune
