#include "problem_flags.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::cli {
namespace {

// The problems `args` describe (the flags of a command that takes a list), or the error.
absl::StatusOr<std::vector<AttentionProblem>> Parse(std::vector<std::string> args) {
  CLI::App app;
  ProblemFlags flags;
  flags.Register(&app, /*allow_list=*/true);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last-first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return flags.Build();
}

TEST(ProblemFlags, DecodeCacheLengthsOneProblemEach) {
  auto problems = Parse({"--kind", "decode", "--cache-len", "1024,8192", "--new-tokens", "4", "--batch", "16",
                         "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--dtype", "bf16", "--causal"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  ASSERT_EQ(problems->size(), 2u);
  EXPECT_EQ((*problems)[0].Key(), "decode/b16/hq32/hkv8/q4/k1024/d128/causal1/bf16");
  EXPECT_EQ((*problems)[1].kv_len, 8192);
}

TEST(ProblemFlags, DecodeSeqIsTheCacheLengthWithOneNewToken) {
  auto problems = Parse({"--kind", "decode", "--seq", "77"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_EQ((*problems)[0].q_len, 1);
  EXPECT_EQ((*problems)[0].kv_len, 77);
}

TEST(ProblemFlags, PerSequenceCacheLengthsSetBatchAndKeyPadding) {
  auto problems = Parse({"--kind", "decode", "--cache-lens", "5,300,17", "--page-size", "16", "--pool-pages", "64"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  const AttentionProblem& p = (*problems)[0];
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.kv_len, 300);
  EXPECT_EQ(p.kv_valid_lens, (std::vector<int32_t>{5, 300, 17}));
  EXPECT_EQ(p.page_block_size, 16);
  EXPECT_EQ(p.kv_pool_pages, 64);
}

TEST(ProblemFlags, PrefixCachedPrefill) {
  auto problems = Parse({"--cache-len", "8704", "--new-tokens", "512", "--page-size", "16",
                         "--shared-prefix-pages", "512", "--causal"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  const AttentionProblem& p = (*problems)[0];
  EXPECT_EQ(p.kind, ProblemKind::kPrefill);
  EXPECT_EQ(p.q_len, 512);
  EXPECT_EQ(p.kv_len, 8704);
  EXPECT_EQ(p.shared_prefix_pages, 512);
}

TEST(ProblemFlags, DecodePresetIsTheServingShapes) {
  auto problems = Parse({"--preset", "decode"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  ASSERT_EQ(problems->size(), 11u);
  ASSERT_EQ(DecodePresetProblems().size(), 11u);
  for (size_t i = 0; i < problems->size(); ++i) {
    const AttentionProblem& p = (*problems)[i];
    EXPECT_EQ(p.Key(), DecodePresetProblems()[i].Key());
    EXPECT_TRUE(p.Validate().ok()) << p.Key();
    EXPECT_TRUE(AttentionProblem::FromKey(p.Key()).ok()) << p.Key() << " round-trips through its key";
  }
  EXPECT_EQ((*problems)[0].Key(), "decode/b16/hq32/hkv8/q1/k1024/d128/causal1/bf16");
  EXPECT_EQ((*problems)[5].Key(), "decode/b16/hq32/hkv8/q1/k8192/d128/causal1/bf16/page1");
  EXPECT_EQ((*problems)[7].Key(), "prefill/b16/hq32/hkv8/q512/k8704/d128/causal1/bf16/page16/prefix512");
  // The e4m3 twins of the b16 8K and 32K contiguous caches and of the 8K cache in pages of 16.
  EXPECT_EQ((*problems)[8].Key(), "decode/b16/hq32/hkv8/q1/k8192/d128/causal1/bf16/kve4m3");
  EXPECT_EQ((*problems)[9].Key(), "decode/b16/hq32/hkv8/q1/k32768/d128/causal1/bf16/kve4m3");
  EXPECT_EQ((*problems)[10].Key(), "decode/b16/hq32/hkv8/q1/k8192/d128/causal1/bf16/page16/kve4m3");
  EXPECT_DOUBLE_EQ((*problems)[8].KVBytesRead(), (*problems)[1].KVBytesRead() / 2);
}

TEST(ProblemFlags, KvStorageE4m3QuantisesTheCache) {
  auto problems = Parse({"--kind", "decode", "--cache-len", "8192", "--page-size", "16", "--heads", "32",
                         "--kv-heads", "8", "--head-dim", "128", "--dtype", "bf16", "--kv-storage", "e4m3"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_EQ((*problems)[0].kv_storage, KvStorage::kE4m3);
  EXPECT_EQ((*problems)[0].Key(), "decode/b1/hq32/hkv8/q1/k8192/d128/causal0/bf16/page16/kve4m3");
  auto plain = Parse({"--kind", "decode", "--cache-len", "64", "--dtype", "fp16", "--kv-storage", "dtype"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)[0].kv_storage, KvStorage::kDType);
  // fp32 queries cannot go with an e4m3 cache; an unknown format and a preset are refused.
  auto fp32 = Parse({"--kind", "decode", "--cache-len", "64", "--kv-storage", "e4m3"});
  EXPECT_NE(fp32.status().message().find("fp16 or bf16"), std::string::npos) << fp32.status();
  EXPECT_FALSE(Parse({"--kind", "decode", "--cache-len", "64", "--dtype", "fp16", "--kv-storage", "e5m2"}).ok());
  auto preset = Parse({"--preset", "decode", "--kv-storage", "e4m3"});
  EXPECT_NE(preset.status().message().find("--kv-storage"), std::string::npos) << preset.status();
}

TEST(ProblemFlags, BadCacheValuesAreErrorsNamingTheFlag) {
  const std::vector<std::vector<std::string>> cases = {
      {"--kind", "decode", "--cache-len", "128", "--page-size", "300"},
      {"--kind", "decode", "--cache-len", "128", "--page-size", "-1"},
      {"--kind", "decode", "--cache-len", "128", "--new-tokens", "17"},
      {"--kind", "decode", "--cache-len", "128", "--new-tokens", "-2"},
      {"--kind", "decode", "--cache-len", "128", "--pool-pages", "4"},            // no --page-size
      {"--kind", "decode", "--cache-len", "128", "--page-size", "16", "--shared-prefix-pages", "9"},
      {"--kind", "decode", "--cache-lens", "5,-1"},
      {"--kind", "decode", "--cache-lens", "5,6", "--batch", "3"},
      {"--kind", "decode", "--cache-len", "128", "--seq", "64"},
      {"--cache-len", "128"},                                                       // prefill: no --new-tokens
      {"--seq", "128", "--new-tokens", "4"},
      {"--preset", "decode", "--page-size", "16"},
      {"--kind", "decode", "--cache-len", "abc"},
      {"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--new-tokens", "0"},
      {"--kind", "decode", "--cache-len", "512", "--page-size", "0"},
      {"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--pool-pages", "3"},  // needs 32
      {"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--pool-pages", "0"},
  };
  for (const std::vector<std::string>& args : cases) {
    auto problems = Parse(args);
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_FALSE(problems.ok()) << joined;
  }
  auto page = Parse({"--kind", "decode", "--cache-len", "128", "--page-size", "300"});
  EXPECT_NE(page.status().message().find("--page-size"), std::string::npos) << page.status();
  auto zero_tokens = Parse({"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--new-tokens", "0"});
  EXPECT_NE(zero_tokens.status().message().find("--new-tokens"), std::string::npos) << zero_tokens.status();
  auto small_pool = Parse({"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--pool-pages", "3"});
  EXPECT_NE(small_pool.status().message().find("need 32 pages"), std::string::npos) << small_pool.status();
}

TEST(ProblemFlags, APoolOfExactlyThePagesNeededIsAccepted) {
  auto problems = Parse({"--kind", "decode", "--cache-len", "512", "--page-size", "16", "--pool-pages", "32"});
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_EQ((*problems)[0].PoolPages(), 32);
}

}  // namespace
}  // namespace fusetune::cli
