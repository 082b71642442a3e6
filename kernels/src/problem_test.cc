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

// A uniform decode batch over a paged cache: 2 new tokens, caches of 70, 32 and 45 keys in
// 16-token pages (5, 2 and 3 pages).
AttentionProblem PagedDecode() {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.q_len = 2;
  p.kv_len = 70;
  p.kv_valid_lens = {70, 32, 45};
  p.head_dim = 64;
  p.page_block_size = 16;
  return p;
}

void ExpectInvalid(const AttentionProblem& p, const std::string& message) {
  const absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p.Key();
  EXPECT_THAT(s.message(), HasSubstr(message)) << p.Key();
}

TEST(AttentionProblem, PagedProblemPassesAndReportsItsGeometry) {
  AttentionProblem p = PagedDecode();
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_TRUE(p.is_paged());
  EXPECT_EQ(p.BlockTableWidth(), 5);  // ceil(70 / 16)
  EXPECT_EQ(p.BlockTableEntries(), 15);
  EXPECT_EQ(p.PagesOfSequence(0), 5);
  EXPECT_EQ(p.PagesOfSequence(1), 2);
  EXPECT_EQ(p.PagesOfSequence(2), 3);
  EXPECT_EQ(p.PagesNeeded(), 10);
  EXPECT_EQ(p.PoolPages(), 10);
  EXPECT_EQ(p.TotalKeys(), 10 * 16);  // rows of the pool
  EXPECT_EQ(p.KVElements(), 10 * 16 * 2 * 64);
  EXPECT_EQ(p.QElements(), 3 * 2 * 8 * 64);
  // A larger pool and a wider table than needed.
  p.kv_pool_pages = 40;
  p.block_table_width = 8;
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_EQ(p.PoolPages(), 40);
  EXPECT_EQ(p.PagesNeeded(), 10);
  EXPECT_EQ(p.BlockTableEntries(), 24);
  EXPECT_EQ(p.TotalKeys(), 40 * 16);
}

TEST(AttentionProblem, SharedPrefixPagesAreCountedOnce) {
  AttentionProblem p = PagedDecode();
  p.shared_prefix_pages = 2;  // 32 tokens: the shortest sequence is exactly the prefix
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_EQ(p.PagesNeeded(), 2 + 3 + 0 + 1);
  EXPECT_EQ(p.PoolPages(), 6);
  EXPECT_EQ(p.TotalKeys(), 6 * 16);
  EXPECT_EQ(p.KVElements(), 6 * 16 * 2 * 64);
  // The bytes read do not shrink: every sequence reads its prefix.
  EXPECT_DOUBLE_EQ(p.KVBytesRead(), PagedDecode().KVBytesRead());
}

TEST(AttentionProblem, KVBytesReadCountsEveryVisibleKeyOncePerKvHead) {
  AttentionProblem p = PagedDecode();
  p.dtype = DType::kBf16;
  // K and V x (70 + 32 + 45) keys x 2 KV heads x 64 x 2 bytes.
  EXPECT_DOUBLE_EQ(p.KVBytesRead(), 2.0 * 147 * 2 * 64 * 2);
  EXPECT_DOUBLE_EQ(p.Unpaged().KVBytesRead(), p.KVBytesRead());
  AttentionProblem dense = Dense(100);
  EXPECT_DOUBLE_EQ(dense.KVBytesRead(), 2.0 * 2 * 100 * 2 * 64 * 4);
}

TEST(AttentionProblem, UnpagedClearsOnlyThePageFields) {
  AttentionProblem p = PagedDecode();
  p.kv_pool_pages = 12;
  p.block_table_width = 6;
  p.shared_prefix_pages = 1;
  const AttentionProblem flat = p.Unpaged();
  EXPECT_FALSE(flat.is_paged());
  EXPECT_EQ(flat.kv_pool_pages, 0);
  EXPECT_EQ(flat.block_table_width, 0);
  EXPECT_EQ(flat.shared_prefix_pages, 0);
  EXPECT_EQ(flat.kv_valid_lens, p.kv_valid_lens);
  EXPECT_TRUE(flat.Validate().ok());
  EXPECT_EQ(flat.TotalKeys(), 3 * 70);
}

TEST(AttentionProblem, RejectsInvalidPagedFieldsWithClearMessages) {
  for (int page : {-1, 257, 1024}) {
    AttentionProblem p = PagedDecode();
    p.page_block_size = page;
    ExpectInvalid(p, "page_block_size must be in [1, 256]");
  }
  for (int page : {1, 3, 256}) {
    AttentionProblem p = PagedDecode();
    p.page_block_size = page;
    EXPECT_TRUE(p.Validate().ok()) << page << ": " << p.Validate();
  }
  // Pool fields without paging.
  for (int field = 0; field < 3; ++field) {
    AttentionProblem p = Dense();
    (field == 0 ? p.kv_pool_pages : field == 1 ? p.block_table_width : p.shared_prefix_pages) = 4;
    ExpectInvalid(p, "set page_block_size");
  }
  // Negative fields.
  for (int field = 0; field < 3; ++field) {
    AttentionProblem p = PagedDecode();
    (field == 0 ? p.kv_pool_pages : field == 1 ? p.block_table_width : p.shared_prefix_pages) = -2;
    ExpectInvalid(p, "must be >= 0");
  }
  // A block-table row shorter than the longest sequence needs (5 pages).
  AttentionProblem narrow = PagedDecode();
  narrow.block_table_width = 4;
  ExpectInvalid(narrow, "the block table holds 4 pages per sequence, but a sequence needs 5");
  // A shared prefix longer than a sequence (3 pages = 48 tokens > 32 and 45).
  AttentionProblem prefix = PagedDecode();
  prefix.shared_prefix_pages = 3;
  ExpectInvalid(prefix, "longer than sequence 1 (32 keys)");
}

TEST(AttentionProblem, DecodeAllowsAtMostSixteenNewTokensPerSequence) {
  AttentionProblem p = PagedDecode();
  p.q_len = 16;
  EXPECT_TRUE(p.Validate().ok()) << p.Validate();
  p.q_len = 17;
  ExpectInvalid(p, "at most 16");
  // The same bound on a varlen batch (its q_len is the longest sequence's).
  AttentionProblem varlen = PagedDecode();
  varlen.kv_valid_lens.clear();
  varlen.cu_seqlens_q = {0, 17, 18, 19};
  varlen.cu_seqlens_k = {0, 70, 102, 147};
  varlen.q_len = 17;
  ExpectInvalid(varlen, "at most 16");
  varlen.cu_seqlens_q = {0, 16, 17, 18};
  varlen.q_len = 16;
  EXPECT_TRUE(varlen.Validate().ok()) << varlen.Validate();
  EXPECT_EQ(varlen.PagesOfSequence(1), 2);
}

TEST(AttentionProblem, PagedKeyRoundTripsThroughFromKey) {
  AttentionProblem p = PagedDecode();
  p.kv_valid_lens.clear();  // key padding is hashed: not parseable
  p.kv_pool_pages = 64;
  p.block_table_width = 6;
  p.shared_prefix_pages = 2;
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  EXPECT_EQ(p.Key(), "decode/b3/hq8/hkv2/q2/k70/d64/causal0/fp32/page16/pool64/bt6/prefix2");
  auto back = AttentionProblem::FromKey(p.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Key(), p.Key());
  EXPECT_EQ(back->page_block_size, 16);
  EXPECT_EQ(back->kv_pool_pages, 64);
  EXPECT_EQ(back->block_table_width, 6);
  EXPECT_EQ(back->shared_prefix_pages, 2);
  // Only the page size set.
  AttentionProblem plain = PagedDecode();
  plain.kv_valid_lens.clear();
  EXPECT_EQ(plain.Key(), "decode/b3/hq8/hkv2/q2/k70/d64/causal0/fp32/page16");
  back = AttentionProblem::FromKey(plain.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Key(), plain.Key());
  // Malformed or invalid paged fields.
  for (const char* bad : {"decode/b1/hq8/hkv2/q1/k70/d64/causal0/fp32/pageX",
                          "decode/b1/hq8/hkv2/q1/k70/d64/causal0/fp32/page0",
                          "decode/b1/hq8/hkv2/q1/k70/d64/causal0/fp32/page512",
                          "decode/b1/hq8/hkv2/q1/k70/d64/causal0/fp32/page16/bt2",
                          "decode/b1/hq8/hkv2/q1/k70/d64/causal0/fp32/pool4"}) {
    EXPECT_EQ(AttentionProblem::FromKey(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ValidateBlockTable, AcceptsEveryPageOfThePoolAndIgnoresEntriesPastASequence) {
  const AttentionProblem p = PagedDecode();  // width 5; sequences of 5, 2 and 3 pages
  const std::vector<int32_t> table = {9, 0, 1, 2, 3,  //
                                      4, 5, -7, 1 << 30, 99,  // entries 2.. are never read
                                      6, 7, 8, -1, -1};
  EXPECT_TRUE(ValidateBlockTable(p, table.data(), 15).ok()) << ValidateBlockTable(p, table.data(), 15);
}

TEST(ValidateBlockTable, RejectsPagesOutsideThePoolNamingTheEntry) {
  const AttentionProblem p = PagedDecode();
  std::vector<int32_t> table = {9, 0, 1, 2, 3, 4, 5, 0, 0, 0, 6, 7, 8, 0, 0};
  table[11] = 10;  // pool is [0, 10)
  absl::Status s = ValidateBlockTable(p, table.data(), 15);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("block_table[2][1] = 10 is not a page of the pool [0, 10)"));
  table[11] = -3;
  s = ValidateBlockTable(p, table.data(), 15);
  EXPECT_THAT(s.message(), HasSubstr("block_table[2][1] = -3"));
  // A pool larger than needed makes page 10 valid.
  AttentionProblem big_pool = p;
  big_pool.kv_pool_pages = 11;
  table[11] = 10;
  EXPECT_TRUE(ValidateBlockTable(big_pool, table.data(), 15).ok());
}

TEST(ValidateBlockTable, RejectsWrongSizeNullTablesAndContiguousProblems) {
  const AttentionProblem p = PagedDecode();
  const std::vector<int32_t> table(15, 0);
  EXPECT_THAT(ValidateBlockTable(p, table.data(), 14).message(), HasSubstr("the block table has 14 entries"));
  EXPECT_EQ(ValidateBlockTable(p, table.data(), 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateBlockTable(p, nullptr, 15).message(), HasSubstr("null"));
  EXPECT_THAT(ValidateBlockTable(Dense(), table.data(), 15).message(), HasSubstr("paged problem"));
  // An invalid problem is refused before its geometry is used.
  AttentionProblem bad = p;
  bad.kv_valid_lens = {70};
  EXPECT_EQ(ValidateBlockTable(bad, table.data(), 15).code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionProblem, SeedPresetHasFiveSquareShapes) {
  auto seed = SeedPresetProblems();
  ASSERT_EQ(seed.size(), 5u);
  EXPECT_EQ(seed.back().Key(), "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32");
  for (const auto& p : seed) EXPECT_TRUE(p.Validate().ok());
}

TEST(AttentionProblem, SeedPresetIsTheSeedShapeOfEachSeedLength) {
  const std::vector<AttentionProblem> seed = SeedPresetProblems();
  ASSERT_EQ(seed.size(), kSeedSeqLens.size());
  std::vector<std::string> keys;
  for (size_t i = 0; i < seed.size(); ++i) {
    EXPECT_EQ(seed[i].Key(), SeedShape(kSeedSeqLens[i]).Key());
    keys.push_back(seed[i].Key());
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32",
                                            "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32",
                                            "prefill/b1/hq12/hkv12/q512/k512/d64/causal0/fp32",
                                            "prefill/b1/hq12/hkv12/q1024/k1024/d64/causal0/fp32",
                                            "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"}));
}

TEST(AttentionProblem, KvStoredAsE4m3IsInTheKeyAndHalvesTheBytesRead) {
  AttentionProblem p = PagedDecode();
  p.dtype = DType::kBf16;
  const double bf16_bytes = p.KVBytesRead();
  p.kv_storage = KvStorage::kE4m3;
  ASSERT_TRUE(p.Validate().ok());
  EXPECT_EQ(p.KVElementBytes(), 1);
  EXPECT_DOUBLE_EQ(p.KVBytesRead(), bf16_bytes / 2);
  EXPECT_NE(p.Key().find("/kve4m3"), std::string::npos) << p.Key();
  AttentionProblem dense = Dense(64);
  dense.dtype = DType::kFp16;
  dense.kv_storage = KvStorage::kE4m3;
  auto back = AttentionProblem::FromKey(dense.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kv_storage, KvStorage::kE4m3);
  EXPECT_EQ(back->Key(), dense.Key());
  EXPECT_EQ(p.Unpaged().kv_storage, KvStorage::kE4m3);
  p.kv_storage = KvStorage::kDType;
  EXPECT_EQ(p.Key().find("kve4m3"), std::string::npos);
}

TEST(AttentionProblem, KvStoredAsE4m3NeedsAHalfPrecisionQuery) {
  AttentionProblem p = Dense(64);
  p.kv_storage = KvStorage::kE4m3;
  p.dtype = DType::kFp32;
  EXPECT_THAT(p.Validate().message(), HasSubstr("fp16 or bf16"));
  p.dtype = DType::kFp16;
  EXPECT_TRUE(p.Validate().ok());
  p.kv_storage = static_cast<KvStorage>(7);
  EXPECT_THAT(p.Validate().message(), HasSubstr("kv_storage"));
  EXPECT_EQ(*ParseKvStorage("e4m3"), KvStorage::kE4m3);
  EXPECT_EQ(*ParseKvStorage("dtype"), KvStorage::kDType);
  EXPECT_FALSE(ParseKvStorage("e5m2").ok());
}

}  // namespace
}  // namespace fusetune
