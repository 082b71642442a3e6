#include "fusetune/kernels/config.h"

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(KernelConfig, KeyRoundTripsThroughFromKey) {
  KernelConfig c;
  c.variant = Variant::kPartial;
  c.block_m = 32;
  c.block_s = 128;
  c.threads = 4;
  c.precision = Precision::kBf16;
  c.stages = 2;
  EXPECT_EQ(c.Key(), "partial/bm32/bs128/t4/bf16/st2");
  auto back = KernelConfig::FromKey(c.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);

  c.variant = Variant::kMaterialized;
  c.split_kv = 4;
  EXPECT_EQ(c.Key(), "materialized/bm32/bs128/t4/bf16/st2/sk4");
  back = KernelConfig::FromKey(c.Key());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
}

TEST(KernelConfig, ScheduleFlagsFollowTheSplitInTheKey) {
  KernelConfig c;
  c.block_m = 128;
  c.block_s = 128;
  c.threads = 384;
  c.precision = Precision::kBf16;
  c.stages = 2;
  EXPECT_EQ(c.Key(), "fused/bm128/bs128/t384/bf16/st2");
  c.pingpong = true;
  c.persistent = true;
  EXPECT_EQ(c.Key(), "fused/bm128/bs128/t384/bf16/st2/pingpong/persistent");
  for (int split : {1, 4, kAutoSplitKv}) {
    for (bool pingpong : {false, true}) {
      for (bool persistent : {false, true}) {
        c.split_kv = split;
        c.pingpong = pingpong;
        c.persistent = persistent;
        auto back = KernelConfig::FromKey(c.Key());
        ASSERT_TRUE(back.ok()) << c.Key() << ": " << back.status();
        EXPECT_EQ(*back, c) << c.Key();
      }
    }
  }
  c.split_kv = 4;
  c.pingpong = false;
  c.persistent = true;
  EXPECT_EQ(c.Key(), "fused/bm128/bs128/t384/bf16/st2/sk4/persistent");
  c.split_kv = kAutoSplitKv;
  c.pingpong = true;
  c.persistent = false;
  EXPECT_EQ(c.Key(), "fused/bm128/bs128/t384/bf16/st2/skauto/pingpong");
}

TEST(KernelConfig, FromKeyRejectsMisplacedScheduleFlags) {
  for (const char* key :
       {"fused/bm64/bs64/t1/fp32/st1/persistent/pingpong",
        "fused/bm64/bs64/t1/fp32/st1/pingpong/pingpong",
        "fused/bm64/bs64/t1/fp32/st1/persistent/persistent",
        "fused/bm64/bs64/t1/fp32/st1/pingpong/sk4", "fused/bm64/bs64/t1/fp32/st1/persistent/skauto",
        "fused/bm64/bs64/t1/fp32/st1/sk4/sk4/pingpong",
        "fused/bm64/bs64/t1/fp32/st1/sk4/pingpong/persistent/x",
        "fused/bm64/bs64/t1/fp32/st1/sk1/pingpong", "fused/bm64/bs64/t1/fp32/st1/ping",
        "fused/bm64/bs64/t1/fp32/st1/Pingpong", "fused/bm64/bs64/t1/fp32/st1/pingpong/",
        "fused/bm64/bs64/t1/fp32/pingpong/st1", "fused/bm64/bs64/t1/pingpong/fp32/st1/pingpong"}) {
    auto c = KernelConfig::FromKey(key);
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find("malformed config key"), std::string::npos)
        << key << ": " << c.status();
  }
}

TEST(KernelConfig, EveryVariantAndPrecisionRoundTrips) {
  for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
      KernelConfig c;
      c.variant = v;
      c.precision = p;
      auto back = KernelConfig::FromKey(c.Key());
      ASSERT_TRUE(back.ok()) << c.Key();
      EXPECT_EQ(*back, c);
    }
  }
}

TEST(KernelConfig, FromKeyRejectsMalformedKeys) {
  for (const char* key :
       {"", "fused", "fused/bm64/bs64/t1/fp32", "fused/bm64/bs64/t1/fp32/st1/sk1",
        "fused/bm64/bs64/t1/fp32/st1/sk4/x", "fast/bm64/bs64/t1/fp32/st1",
        "fused/m64/bs64/t1/fp32/st1", "fused/bm64/bs64/t1/fp64/st1", "fused/bm0/bs64/t1/fp32/st1",
        "fused/bm64/bs64/t1/fp32/st9", "fused/bmx/bs64/t1/fp32/st1",
        "fused/bm64/bs64/t-1/fp32/st1", "fused/bm64/bs64/w4/fp32/st1", "pingpong/bm64/bs64/t1/fp32/st1"}) {
    EXPECT_FALSE(KernelConfig::FromKey(key).ok()) << key;
  }
}

TEST(KernelConfig, ValidateChecksRanges) {
  KernelConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.block_s = 0;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c = KernelConfig{};
  c.split_kv = 65;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelConfig, OrderIsTotalAndStartsWithVariant) {
  KernelConfig fused, materialized;
  materialized.variant = Variant::kMaterialized;
  fused.block_m = 128;
  EXPECT_TRUE(ConfigOrderLess(fused, materialized));
  EXPECT_FALSE(ConfigOrderLess(materialized, fused));
  EXPECT_FALSE(ConfigOrderLess(fused, fused));
  KernelConfig small = fused;
  small.block_s = 16;
  EXPECT_TRUE(ConfigOrderLess(small, fused));
  // The schedule flags order after the split, and tell otherwise equal configs apart.
  KernelConfig pingpong = fused, persistent = fused;
  pingpong.pingpong = true;
  persistent.persistent = true;
  EXPECT_TRUE(ConfigOrderLess(fused, pingpong));
  EXPECT_TRUE(ConfigOrderLess(fused, persistent));
  EXPECT_TRUE(ConfigOrderLess(persistent, pingpong));
  EXPECT_FALSE(ConfigOrderLess(pingpong, persistent));
  KernelConfig split = fused;
  split.split_kv = 2;
  EXPECT_TRUE(ConfigOrderLess(pingpong, split));
}

TEST(KernelConfig, ParsersRejectUnknownNames) {
  EXPECT_FALSE(ParseVariant("FUSED").ok());
  EXPECT_FALSE(ParsePrecision("fp8").ok());
  EXPECT_EQ(*ParseVariant("materialized"), Variant::kMaterialized);
  EXPECT_EQ(*ParsePrecision("tf32"), Precision::kTf32);
}

}  // namespace
}  // namespace fusetune
