#include "fusetune/service/best_config_index.h"

#include <cmath>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

AttentionProblem Shape(int batch, int heads, int seq, int head_dim = 64, bool causal = false) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = p.kv_heads = heads;
  p.q_len = p.kv_len = seq;
  p.head_dim = head_dim;
  p.causal = causal;
  return p;
}

BestConfig Best(const std::string& device_class, const AttentionProblem& p, const std::string& config) {
  BestConfig b;
  b.device_class = device_class;
  b.problem_key = p.Key();
  b.config_key = config;
  b.median_us = 1;
  return b;
}

TEST(ShapeDistance, CountsDoublingsOfEveryDimension) {
  EXPECT_DOUBLE_EQ(ShapeDistance(Shape(1, 12, 1024), Shape(1, 12, 1024)), 0.0);
  EXPECT_DOUBLE_EQ(ShapeDistance(Shape(1, 12, 1024), Shape(1, 12, 2048)), 2.0);  // q and k
  EXPECT_DOUBLE_EQ(ShapeDistance(Shape(4, 12, 1024), Shape(1, 12, 1024)), 2.0);  // batch x4
  EXPECT_DOUBLE_EQ(ShapeDistance(Shape(1, 6, 1024), Shape(1, 12, 1024)), 2.0);   // hq and hkv
  EXPECT_DOUBLE_EQ(ShapeDistance(Shape(1, 12, 1024), Shape(1, 12, 2048)),
                   ShapeDistance(Shape(1, 12, 2048), Shape(1, 12, 1024)));  // symmetric
}

TEST(BestConfigIndex, NearestStaysWithinHeadDimDtypeCausalKindAndClass) {
  const std::string cls = "cpu/X/y";
  AttentionProblem causal = Shape(1, 12, 512, 64, true);
  AttentionProblem bf16 = Shape(1, 12, 512);
  bf16.dtype = DType::kBf16;
  AttentionProblem decode = Shape(8, 12, 1);
  decode.kind = ProblemKind::kDecode;
  decode.kv_len = 4096;
  auto index = BestConfigIndex::Build({Best(cls, causal, "fused/bm32/bs32/t1/fp32/st1"),
                                       Best(cls, bf16, "fused/bm16/bs16/t1/fp32/st1"),
                                       Best(cls, Shape(1, 12, 512, 128), "fused/bm16/bs32/t1/fp32/st1"),
                                       Best("cpu/Other/y", Shape(1, 12, 512), "fused/bm16/bs64/t1/fp32/st1"),
                                       Best(cls, decode, "fused/bm16/bs128/t1/fp32/st1")});
  auto answer = index.Lookup(Shape(1, 12, 1024), cls);  // fp32, non-causal, d64, prefill
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->provenance, ConfigProvenance::kDefault);
  EXPECT_TRUE(answer->source.problem_key.empty());
  auto causal_answer = index.Lookup(Shape(1, 12, 2048, 64, true), cls);
  ASSERT_TRUE(causal_answer.ok());
  EXPECT_EQ(causal_answer->provenance, ConfigProvenance::kNearest);
  EXPECT_EQ(causal_answer->config.Key(), "fused/bm32/bs32/t1/fp32/st1");
  EXPECT_DOUBLE_EQ(causal_answer->distance, 4.0);
}

TEST(BestConfigIndex, TiesBreakBySmallerProblemKey) {
  const std::string cls = "cpu/X/y";
  // 512 and 2048 are both two doublings (q and k) from 1024 away... in opposite directions.
  auto index = BestConfigIndex::Build({Best(cls, Shape(1, 12, 2048), "fused/bm64/bs64/t1/fp32/st1"),
                                       Best(cls, Shape(1, 12, 512), "fused/bm32/bs32/t1/fp32/st1")});
  auto answer = index.Lookup(Shape(1, 12, 1024), cls);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->provenance, ConfigProvenance::kNearest);
  EXPECT_DOUBLE_EQ(answer->distance, 2.0);
  // "prefill/b1/hq12/hkv12/q2048..." < "prefill/b1/hq12/hkv12/q512..." as strings.
  EXPECT_EQ(answer->source.problem_key, Shape(1, 12, 2048).Key());
}

TEST(BestConfigIndex, VarlenProblemsMatchExactlyButAreNeverNearestSources) {
  const std::string cls = "cpu/X/y";
  AttentionProblem varlen = Shape(2, 12, 0);
  varlen.q_len = varlen.kv_len = 300;
  varlen.cu_seqlens_q = {0, 100, 400};
  varlen.cu_seqlens_k = {0, 100, 400};
  ASSERT_TRUE(varlen.Validate().ok());
  auto index = BestConfigIndex::Build({Best(cls, varlen, "fused/bm64/bs64/t1/fp32/st1")});
  auto exact = index.Lookup(varlen, cls);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->provenance, ConfigProvenance::kExact);
  auto other = index.Lookup(Shape(2, 12, 300), cls);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->provenance, ConfigProvenance::kDefault);
}

// Decode of `new_tokens` per sequence against a cache of `cache` keys: 32 query heads, 8 KV.
AttentionProblem Decode(int batch, int cache, int page = 0, int new_tokens = 1) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = batch;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.q_len = new_tokens;
  p.kv_len = cache;
  p.head_dim = 128;
  p.causal = true;
  p.dtype = DType::kBf16;
  p.page_block_size = page;
  return p;
}

TEST(ShapeDistance, DecodeCountsCacheLengthBucketsBatchAndNewTokens) {
  EXPECT_DOUBLE_EQ(ShapeDistance(Decode(16, 8192), Decode(16, 8192)), 0.0);
  EXPECT_DOUBLE_EQ(ShapeDistance(Decode(16, 7000), Decode(16, 8192)), 0.0) << "one bucket";
  EXPECT_DOUBLE_EQ(ShapeDistance(Decode(16, 8192), Decode(16, 32768)), 2.0);
  EXPECT_DOUBLE_EQ(ShapeDistance(Decode(16, 8192), Decode(4, 8192)), 2.0);
  EXPECT_DOUBLE_EQ(ShapeDistance(Decode(16, 8192, 0, 4), Decode(16, 8192)), 2.0);
  AttentionProblem padded = Decode(2, 8192);
  padded.kv_valid_lens = {8192, 0};  // mean 4096: the 4k bucket
  EXPECT_DOUBLE_EQ(ShapeDistance(padded, Decode(2, 4096)), 0.0);
}

TEST(BestConfigIndex, DecodeNearestKeepsHeadsAndPageSizeAndPicksTheClosestCacheBucket) {
  const std::string cls = "cuda/NVIDIA-H200/sm90";
  AttentionProblem other_heads = Decode(16, 8192);
  other_heads.kv_heads = 4;
  auto index = BestConfigIndex::Build({Best(cls, Decode(16, 1024), "fused/bm16/bs64/t128/bf16/st2/sk2"),
                                       Best(cls, Decode(16, 32768), "fused/bm16/bs64/t128/bf16/st2/sk8"),
                                       Best(cls, other_heads, "fused/bm16/bs64/t128/bf16/st2/sk4"),
                                       Best(cls, Decode(16, 8192, 16), "fused/bm16/bs16/t128/bf16/st2/sk4"),
                                       Best(cls, Decode(1, 65536), "fused/bm16/bs64/t128/bf16/st2/sk32")});
  // 16k: one bucket from 32k, four from 1k; the other-heads 8k and the paged 8k are not candidates.
  auto answer = index.Lookup(Decode(16, 16384), cls);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->provenance, ConfigProvenance::kNearest);
  EXPECT_EQ(answer->source.problem_key, Decode(16, 32768).Key());
  EXPECT_DOUBLE_EQ(answer->distance, 1.0);
  // Batch 2 at 64k: the batch-1 64k shape (one doubling) beats batch 16 at 32k (three + one).
  auto single = index.Lookup(Decode(2, 65536), cls);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->source.problem_key, Decode(1, 65536).Key());
  // Paged requests are served from paged shapes of their page size only.
  auto paged = index.Lookup(Decode(16, 4096, 16), cls);
  ASSERT_TRUE(paged.ok());
  EXPECT_EQ(paged->provenance, ConfigProvenance::kNearest);
  EXPECT_EQ(paged->source.problem_key, Decode(16, 8192, 16).Key());
  auto page_one = index.Lookup(Decode(16, 8192, 1), cls);
  ASSERT_TRUE(page_one.ok());
  EXPECT_EQ(page_one->provenance, ConfigProvenance::kDefault);
  // A request with per-sequence cache lengths (a hashed key: never exact) goes by its mean.
  AttentionProblem ragged = Decode(16, 40000);
  ragged.kv_valid_lens.assign(16, 30000);
  ragged.kv_valid_lens[0] = 40000;
  auto by_mean = index.Lookup(ragged, cls);
  ASSERT_TRUE(by_mean.ok());
  EXPECT_EQ(by_mean->source.problem_key, Decode(16, 32768).Key());
  EXPECT_DOUBLE_EQ(by_mean->distance, 0.0);
}

TEST(BestConfigIndex, AnE4m3CacheIsServedOnlyFromE4m3Caches) {
  const std::string cls = "cuda/NVIDIA-H200/sm90";
  AttentionProblem e4m3 = Decode(16, 8192);
  e4m3.kv_storage = KvStorage::kE4m3;
  auto index = BestConfigIndex::Build({Best(cls, Decode(16, 8192), "fused/bm16/bs64/t128/bf16/st2/sk4"),
                                       Best(cls, e4m3, "fused/bm16/bs64/t128/fp16/st2/sk8")});
  AttentionProblem e4m3_16k = Decode(16, 16384);
  e4m3_16k.kv_storage = KvStorage::kE4m3;
  auto quantised = index.Lookup(e4m3_16k, cls);
  ASSERT_TRUE(quantised.ok()) << quantised.status();
  EXPECT_EQ(quantised->provenance, ConfigProvenance::kNearest);
  EXPECT_EQ(quantised->source.problem_key, e4m3.Key());
  auto plain = index.Lookup(Decode(16, 16384), cls);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->source.problem_key, Decode(16, 8192).Key());
  AttentionProblem e4m3_paged = Decode(16, 8192, 16);
  e4m3_paged.kv_storage = KvStorage::kE4m3;
  auto none = index.Lookup(e4m3_paged, cls);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->provenance, ConfigProvenance::kDefault);
}

TEST(BestConfigIndex, SkipsStoredConfigsThatDoNotParse) {
  const std::string cls = "cpu/X/y";
  auto index = BestConfigIndex::Build({Best(cls, Shape(1, 12, 512), "not/a/config")});
  EXPECT_TRUE(index.entries().empty());
  auto answer = index.Lookup(Shape(1, 12, 512), cls);
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->provenance, ConfigProvenance::kDefault);
}

TEST(BestConfigIndex, DefaultAnswerIsTheBackendsDefaultConfig) {
  const BestConfigIndex index = BestConfigIndex::Build({});
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    AttentionProblem p = Shape(1, 12, 512);
    p.dtype = dtype;
    for (const char* cls : {"cpu/x/avx2", "cuda/NVIDIA-H200/sm90", "hip/MI250/gfx90a"}) {
      auto answer = index.Lookup(p, cls);
      ASSERT_TRUE(answer.ok()) << answer.status();
      EXPECT_EQ(answer->provenance, ConfigProvenance::kDefault);
      EXPECT_EQ(answer->config, *DefaultConfig(BackendOfDeviceClass(cls), p)) << cls;
    }
  }
  EXPECT_TRUE(absl::IsInvalidArgument(index.Lookup(Shape(1, 12, 512), "tpu/v5").status()));
}

}  // namespace
}  // namespace fusetune
