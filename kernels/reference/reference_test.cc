#include "fusetune/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fusetune {
namespace {

using ::testing::HasSubstr;

// Deterministic, non-trivial values in [-1, 1).
std::vector<float> Pattern(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = 0x9e3779b9u * static_cast<uint32_t>(salt + 1);
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

AttentionProblem Small(int q, int k, int d = 32) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 1;
  p.kv_heads = 1;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = d;
  return p;
}

TEST(ReferenceAttention, SingleKeyOutputEqualsItsValueRow) {
  AttentionProblem p = Small(3, 1);
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int t = 0; t < 3; ++t) {
    for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[t * 32 + x], v[x]);
  }
}

// Non-finite scores: -inf gives the key weight 0 (like a mask), every visible score -inf gives
// zeros (as a row that sees no key), a +inf score gives a NaN row.
TEST(ReferenceAttention, InfiniteScoresAreMaskedZeroOrNaN) {
  AttentionProblem p = Small(2, 3);
  std::vector<float> q(p.QElements(), 1.0f);
  for (int x = 0; x < 32; ++x) q[32 + x] = -1.0f;  // query 1: the opposite signs
  auto k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  k[0] = std::numeric_limits<float>::infinity();  // key 0: +inf for query 0, -inf for query 1
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(std::isnan((*out)[0]));
  // Query 1 without key 0: the softmax over keys 1 and 2.
  AttentionProblem two = Small(1, 2);
  std::vector<float> q1(q.begin() + 32, q.end()), k12(k.begin() + 32, k.end()), v12(v.begin() + 32, v.end());
  auto want = ReferenceAttention(two, q1, k12, v12);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int x = 0; x < 32; ++x) EXPECT_NEAR((*out)[32 + x], (*want)[x], 1e-12);

  for (int key = 0; key < 3; ++key) k[key * 32] = std::numeric_limits<float>::infinity();
  out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int x = 0; x < 32; ++x) EXPECT_EQ((*out)[32 + x], 0.0) << "every score -inf: zeros";
  EXPECT_TRUE(std::isnan((*out)[0]));
}

TEST(ReferenceAttention, UniformScoresGiveMeanOfValues) {
  AttentionProblem p = Small(2, 5);
  std::vector<float> q(p.QElements(), 0.0f);  // every score is 0
  auto k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  for (int x = 0; x < 32; ++x) {
    double mean = 0;
    for (int j = 0; j < 5; ++j) mean += v[j * 32 + x];
    mean /= 5;
    EXPECT_NEAR((*out)[x], mean, 1e-12);
    EXPECT_NEAR((*out)[32 + x], mean, 1e-12);
  }
}

TEST(ReferenceAttention, TwoKeysWeightedByHandComputedSoftmax) {
  AttentionProblem p = Small(1, 2);
  p.softmax_scale = 1.0f;
  std::vector<float> q(32, 0.0f), k(64, 0.0f), v(64, 0.0f);
  q[0] = 1.0f;
  k[32] = static_cast<float>(std::log(3.0));  // scores 0 and ln 3: weights 1/4 and 3/4
  v[1] = 4.0f;                                 // V[0] = 4 e1
  v[32 + 1] = 8.0f;                            // V[1] = 8 e1
  std::vector<double> row(32);
  ASSERT_TRUE(ReferenceAttentionRow(p, q, k, v, 0, 0, row).ok());
  const double w1 = 3.0 * std::exp(static_cast<double>(k[32]) - std::log(3.0)) /
                    (1.0 + 3.0 * std::exp(static_cast<double>(k[32]) - std::log(3.0)));
  EXPECT_NEAR(row[1], 4.0 * (1 - w1) + 8.0 * w1, 1e-12);
  EXPECT_NEAR(row[1], 7.0, 1e-6);
  EXPECT_EQ(row[0], 0.0);
}

TEST(ReferenceAttention, CausalFirstRowSeesOnlyKeyZero) {
  AttentionProblem p = Small(4, 4);
  p.causal = true;
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[x], v[x]);
  EXPECT_EQ(p.VisibleKeysForQuery(0, 0), 1);
  EXPECT_EQ(p.VisibleKeysForQuery(0, 3), 4);
  // The last row sees everything: equal to the non-causal last row.
  AttentionProblem full = p;
  full.causal = false;
  auto dense = ReferenceAttention(full, q, k, v);
  for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[3 * 32 + x], (*dense)[3 * 32 + x]);
}

TEST(ReferenceAttention, CausalIsBottomRightAligned) {
  AttentionProblem p = Small(2, 5);  // q < k: query i sees keys j <= i + 3
  p.causal = true;
  EXPECT_EQ(p.VisibleKeysForQuery(0, 0), 4);
  EXPECT_EQ(p.VisibleKeysForQuery(0, 1), 5);
  AttentionProblem tall = Small(5, 2);  // q > k: query i sees keys j <= i - 3
  tall.causal = true;
  EXPECT_EQ(tall.VisibleKeysForQuery(0, 0), 0);
  EXPECT_EQ(tall.VisibleKeysForQuery(0, 2), 0);
  EXPECT_EQ(tall.VisibleKeysForQuery(0, 3), 1);
  EXPECT_EQ(tall.VisibleKeysForQuery(0, 4), 2);
}

TEST(ReferenceAttention, RowThatSeesNoKeyIsZeros) {
  AttentionProblem p = Small(5, 2);
  p.causal = true;
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  for (int t = 0; t < 3; ++t) {
    for (int x = 0; x < 32; ++x) EXPECT_EQ((*out)[t * 32 + x], 0.0) << t;
  }
  for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[3 * 32 + x], v[x]);  // sees key 0 only
}

TEST(ReferenceAttention, KeyPaddingHidesKeysAndZeroValidKeysGiveZeros) {
  AttentionProblem p = Small(2, 4);
  p.batch = 2;
  p.kv_valid_lens = {1, 0};
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int x = 0; x < 32; ++x) {
    EXPECT_DOUBLE_EQ((*out)[x], v[x]);       // sequence 0, query 0: only key 0
    EXPECT_DOUBLE_EQ((*out)[32 + x], v[x]);  // sequence 0, query 1
    EXPECT_EQ((*out)[64 + x], 0.0);          // sequence 1 sees nothing
    EXPECT_EQ((*out)[96 + x], 0.0);
  }
}

TEST(ReferenceAttention, GroupedQueryHeadsReadTheirSharedKvHead) {
  AttentionProblem p = Small(1, 1);
  p.q_heads = 4;
  p.kv_heads = 2;  // heads 0,1 -> kv 0; heads 2,3 -> kv 1
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  for (int h = 0; h < 4; ++h) {
    for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[h * 32 + x], v[(h / 2) * 32 + x]) << h;
  }
}

TEST(ReferenceAttention, VarlenRowsUseTheirOwnSequence) {
  AttentionProblem p = Small(3, 2);
  p.batch = 3;
  p.cu_seqlens_q = {0, 3, 3, 4};  // the middle sequence is empty
  p.cu_seqlens_k = {0, 1, 3, 5};
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_EQ(p.SequenceOfQueryToken(0), 0);
  EXPECT_EQ(p.SequenceOfQueryToken(2), 0);
  EXPECT_EQ(p.SequenceOfQueryToken(3), 2);
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[x], v[x]);  // sequence 0 has one key
  // Token 3 (sequence 2) attends keys 3 and 4 only: compare with a standalone problem.
  AttentionProblem alone = Small(1, 2);
  std::vector<float> q1(q.begin() + 96, q.end());
  std::vector<float> k1(k.begin() + 96, k.end()), v1(v.begin() + 96, v.end());
  auto expected = ReferenceAttention(alone, q1, k1, v1);
  ASSERT_TRUE(expected.ok());
  for (int x = 0; x < 32; ++x) EXPECT_DOUBLE_EQ((*out)[96 + x], (*expected)[x]);
}

TEST(ReferenceAttention, NanInputPropagatesToItsRow) {
  AttentionProblem p = Small(2, 3);
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  q[5] = std::nanf("");
  auto out = ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(std::isnan((*out)[0]));
  EXPECT_FALSE(std::isnan((*out)[32]));
}

TEST(ReferenceAttention, RejectsBadArguments) {
  AttentionProblem p = Small(2, 3);
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  std::vector<double> row(32);
  EXPECT_THAT(ReferenceAttentionRow(p, q, k, v, 2, 0, row).message(), HasSubstr("token"));
  EXPECT_THAT(ReferenceAttentionRow(p, q, k, v, 0, 1, row).message(), HasSubstr("head"));
  std::vector<double> short_row(31);
  EXPECT_EQ(ReferenceAttentionRow(p, q, k, v, 0, 0, short_row).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> short_k(k.begin(), k.end() - 1);
  EXPECT_EQ(ReferenceAttention(p, q, short_k, v).status().code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem bad = p;
  bad.q_heads = 0;
  EXPECT_EQ(ReferenceAttention(bad, q, k, v).status().code(), absl::StatusCode::kInvalidArgument);
}

// A decode batch with caches of 13, 0 and 7 keys (kv_len 13) and its paged twin: 4-token
// pages, one spare page in the pool.
AttentionProblem ContiguousDecode() {
  AttentionProblem p = Small(2, 13);
  p.kind = ProblemKind::kDecode;
  p.batch = 3;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.causal = true;
  p.kv_valid_lens = {13, 0, 7};
  return p;
}
AttentionProblem PagedDecode() {
  AttentionProblem p = ContiguousDecode();
  p.page_block_size = 4;
  p.kv_pool_pages = 4 + 0 + 2 + 1;
  return p;
}
// Shuffled pages: sequence 0 -> pages 5, 0, 3, 6; sequence 2 -> 2, 4; page 1 unused. Entries
// past a sequence's pages hold anything.
const std::vector<int32_t> kShuffledTable = {5, 0, 3, 6, -1, 77, 77, 77, 2, 4, 1 << 30, -5};

// The pool that holds `contiguous` (K or V of ContiguousDecode()) at kShuffledTable's pages,
// every other element NaN.
std::vector<float> Scatter(const std::vector<float>& contiguous) {
  const AttentionProblem paged = PagedDecode();
  const AttentionProblem flat = ContiguousDecode();
  const int64_t row = static_cast<int64_t>(paged.kv_heads) * paged.head_dim;
  std::vector<float> pool(static_cast<size_t>(paged.KVElements()), std::nanf(""));
  for (int b = 0; b < paged.batch; ++b) {
    for (int j = 0; j < paged.VisibleKeyLen(b); ++j) {
      const int64_t page = kShuffledTable[static_cast<size_t>(b * paged.BlockTableWidth() + j / 4)];
      std::copy_n(contiguous.begin() + (flat.KeyStart(b) + j) * row, row, pool.begin() + (page * 4 + j % 4) * row);
    }
  }
  return pool;
}

TEST(GatherPagedKV, ShuffledTableGivesTheReferenceOfTheContiguousCache) {
  const AttentionProblem flat = ContiguousDecode();
  const AttentionProblem paged = PagedDecode();
  ASSERT_TRUE(paged.Validate().ok()) << paged.Validate();
  const auto q = Pattern(flat.QElements(), 1), k = Pattern(flat.KVElements(), 2), v = Pattern(flat.KVElements(), 3);
  auto gk = GatherPagedKV(paged, Scatter(k), kShuffledTable);
  auto gv = GatherPagedKV(paged, Scatter(v), kShuffledTable);
  ASSERT_TRUE(gk.ok()) << gk.status();
  ASSERT_TRUE(gv.ok()) << gv.status();
  ASSERT_EQ(gk->size(), k.size());
  // Visible rows are the contiguous ones; rows past a cache length are zero.
  const int64_t row = static_cast<int64_t>(flat.kv_heads) * flat.head_dim;
  for (int b = 0; b < flat.batch; ++b) {
    for (int j = 0; j < flat.kv_len; ++j) {
      for (int64_t x = 0; x < row; ++x) {
        const size_t i = static_cast<size_t>((flat.KeyStart(b) + j) * row + x);
        ASSERT_EQ((*gk)[i], j < flat.VisibleKeyLen(b) ? k[i] : 0.0f) << b << " " << j << " " << x;
        ASSERT_EQ((*gv)[i], j < flat.VisibleKeyLen(b) ? v[i] : 0.0f) << b << " " << j << " " << x;
      }
    }
  }
  auto from_pages = ReferenceAttention(paged.Unpaged(), q, *gk, *gv);
  auto from_contiguous = ReferenceAttention(flat, q, k, v);
  ASSERT_TRUE(from_pages.ok()) << from_pages.status();
  ASSERT_TRUE(from_contiguous.ok()) << from_contiguous.status();
  EXPECT_EQ(*from_pages, *from_contiguous);
}

TEST(GatherPagedKV, RejectsContiguousProblemsWrongPoolsAndInvalidTables) {
  const AttentionProblem paged = PagedDecode();
  const std::vector<float> pool(static_cast<size_t>(paged.KVElements()), 0.5f);
  EXPECT_THAT(GatherPagedKV(ContiguousDecode(), pool, kShuffledTable).status().message(), HasSubstr("paged"));
  const std::vector<float> short_pool(pool.begin(), pool.end() - 1);
  EXPECT_THAT(GatherPagedKV(paged, short_pool, kShuffledTable).status().message(), HasSubstr("the pool has"));
  std::vector<int32_t> outside = kShuffledTable;
  outside[9] = 7;  // the pool has pages [0, 7)
  EXPECT_THAT(GatherPagedKV(paged, pool, outside).status().message(), HasSubstr("block_table[2][1] = 7"));
  const std::vector<int32_t> short_table(kShuffledTable.begin(), kShuffledTable.end() - 1);
  EXPECT_EQ(GatherPagedKV(paged, pool, short_table).status().code(), absl::StatusCode::kInvalidArgument);
  AttentionProblem invalid = paged;
  invalid.page_block_size = 300;
  EXPECT_EQ(GatherPagedKV(invalid, pool, kShuffledTable).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReferenceAttention, RefusesPagedProblemsAndSaysToGatherFirst) {
  const AttentionProblem paged = PagedDecode();
  const auto q = Pattern(paged.QElements(), 1), kv = Pattern(paged.KVElements(), 2);
  const absl::Status s = ReferenceAttention(paged, q, kv, kv).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("GatherPagedKV"));
  std::vector<double> row(32);
  EXPECT_THAT(ReferenceAttentionRow(paged, q, kv, kv, 0, 0, row).message(), HasSubstr("GatherPagedKV"));
}

TEST(ReferenceAttention, E4m3ScalesMultiplyTheKeysAndValuesOfTheirHead) {
  AttentionProblem p = Small(3, 5);
  p.q_heads = 4;
  p.kv_heads = 2;
  p.dtype = DType::kBf16;
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2), v = Pattern(p.KVElements(), 3);
  // Powers of two, so the scaled floats below are exact and both computations see the same values.
  const std::vector<float> k_scale = {0.25f, 4.0f}, v_scale = {2.0f, 0.125f};
  std::vector<float> k_scaled = k, v_scaled = v;
  for (size_t i = 0; i < k.size(); ++i) {
    k_scaled[i] *= k_scale[(i / 32) % 2];
    v_scaled[i] *= v_scale[(i / 32) % 2];
  }
  auto plain = ReferenceAttention(p, q, k_scaled, v_scaled);
  p.kv_storage = KvStorage::kE4m3;
  auto quantized = ReferenceAttention(p, q, k, v, KvScales{k_scale, v_scale});
  ASSERT_TRUE(plain.ok() && quantized.ok());
  for (size_t i = 0; i < plain->size(); ++i) EXPECT_NEAR((*quantized)[i], (*plain)[i], 1e-12) << i;
  EXPECT_THAT(ReferenceAttention(p, q, k, v).status().message(), HasSubstr("scales"));
  p.kv_storage = KvStorage::kDType;
  EXPECT_THAT(ReferenceAttention(p, q, k, v, KvScales{k_scale, v_scale}).status().message(), HasSubstr("e4m3"));
}

TEST(LogitBound, E4m3KeysCountWithTheirHeadsScale) {
  AttentionProblem p = Small(2, 3);
  p.q_heads = p.kv_heads = 2;
  p.dtype = DType::kFp16;
  auto q = Pattern(p.QElements(), 1), k = Pattern(p.KVElements(), 2);
  const std::vector<float> k_scale = {0.5f, 8.0f}, v_scale = {1.0f, 1.0f};
  std::vector<float> k_scaled = k;
  for (size_t i = 0; i < k.size(); ++i) k_scaled[i] *= k_scale[(i / 32) % 2];
  const double plain = LogitBound(p, q, k_scaled);
  p.kv_storage = KvStorage::kE4m3;
  EXPECT_NEAR(LogitBound(p, q, k, KvScales{k_scale, v_scale}), plain, 1e-9 * plain);
  EXPECT_GT(plain, LogitBound(p, q, k) * 2);  // head 1's keys weigh 8x
}

}  // namespace
}  // namespace fusetune
