#include "fusetune/tuner/config_space.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

DeviceInfo Cpu(int threads) {
  DeviceInfo d;
  d.backend = "cpu";
  d.name = "test";
  d.arch = "x86_64";
  d.sm_count = threads;
  return d;
}

DeviceInfo Gpu() {
  DeviceInfo d;
  d.backend = "cuda";
  d.name = "NVIDIA H200";
  d.arch = "sm90";
  d.sm_count = 132;
  return d;
}

AttentionProblem Seed(int s, DType dtype = DType::kFp32) {
  AttentionProblem p;
  p.q_heads = p.kv_heads = 12;
  p.q_len = p.kv_len = s;
  p.head_dim = 64;
  p.dtype = dtype;
  return p;
}

TEST(ConfigSpace, CpuDefaultCoversEveryBlockSizeVariantAndThreadCount) {
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(2048), Cpu(4));
  ASSERT_TRUE(space.ok()) << space.status();
  // 3 variants x block_m {16,32,64,128} x block_s {16,32,64,128} x threads {1,2,4} x fp32.
  EXPECT_EQ(space->size(), 3u * 4 * 4 * 3);
  std::set<int> block_s, threads;
  for (const KernelConfig& c : space->configs()) {
    block_s.insert(c.block_s);
    threads.insert(c.threads);
    EXPECT_EQ(c.precision, Precision::kFp32);
    EXPECT_EQ(c.stages, 1);
  }
  EXPECT_EQ(block_s, (std::set<int>{16, 32, 64, 128}));
  EXPECT_EQ(threads, (std::set<int>{1, 2, 4}));
  EXPECT_TRUE(std::is_sorted(space->configs().begin(), space->configs().end(), ConfigOrderLess));
}

TEST(ConfigSpace, CpuThreadsIncludeTheHardwareCountAndNeverExceedIt) {
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(256), Cpu(6));
  ASSERT_TRUE(space.ok());
  std::set<int> threads;
  for (const KernelConfig& c : space->configs()) threads.insert(c.threads);
  EXPECT_EQ(threads, (std::set<int>{1, 2, 4, 6}));
  ConfigSpaceOptions o;
  o.threads = {1, 8};
  space = ConfigSpace::Create(Seed(256), Cpu(6), o);
  ASSERT_TRUE(space.ok());
  for (const KernelConfig& c : space->configs()) EXPECT_EQ(c.threads, 1);
}

TEST(ConfigSpace, BlocksLongerThanTheSequenceCollapseToTheSmallestCoveringOne) {
  AttentionProblem p = Seed(40);
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(p, Cpu(1));
  ASSERT_TRUE(space.ok());
  std::set<int> bm, bs;
  for (const KernelConfig& c : space->configs()) {
    bm.insert(c.block_m);
    bs.insert(c.block_s);
  }
  EXPECT_EQ(bm, (std::set<int>{16, 32, 64}));  // 128 would repeat 64's single tile
  EXPECT_EQ(bs, (std::set<int>{16, 32, 64}));
}

TEST(ConfigSpace, PrecisionsFollowTheStorageTypeAndDevice) {
  auto precisions = [](const absl::StatusOr<ConfigSpace>& s) {
    std::set<Precision> out;
    for (const KernelConfig& c : s->configs()) out.insert(c.precision);
    return out;
  };
  EXPECT_EQ(precisions(ConfigSpace::Create(Seed(128), Cpu(1))), (std::set<Precision>{Precision::kFp32}));
  EXPECT_EQ(precisions(ConfigSpace::Create(Seed(128), Gpu())),
            (std::set<Precision>{Precision::kFp32, Precision::kTf32}));
  EXPECT_EQ(precisions(ConfigSpace::Create(Seed(128, DType::kFp16), Cpu(1))),
            (std::set<Precision>{Precision::kFp32, Precision::kFp16}));
  EXPECT_EQ(precisions(ConfigSpace::Create(Seed(128, DType::kBf16), Gpu())),
            (std::set<Precision>{Precision::kFp32, Precision::kBf16}));
  // Asking for 16-bit products on fp32 storage leaves nothing: a clear error.
  ConfigSpaceOptions o;
  o.precisions = {Precision::kFp16};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), Cpu(1), o).status()));
}

TEST(ConfigSpace, GpuThreadsAreWholeWarps) {
  ConfigSpaceOptions o;
  o.threads = {100, 128, 256};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(1024), Gpu(), o);
  ASSERT_TRUE(space.ok());
  for (const KernelConfig& c : space->configs()) EXPECT_EQ(c.threads % 32, 0);
}

TEST(ConfigSpace, GpuMaterializedVariesOnlyItsSoftmaxThreads) {
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(1024), Gpu(), {});
  ASSERT_TRUE(space.ok());
  std::set<std::pair<int, int>> blocks;
  std::set<int> threads;
  for (const KernelConfig& c : space->ForVariant(Variant::kMaterialized)) {
    blocks.insert({c.block_m, c.block_s});
    threads.insert(c.threads);
  }
  EXPECT_EQ(blocks.size(), 1u);
  EXPECT_GT(threads.size(), 1u);
  // The CPU materialized kernel tiles its passes, so there the block sizes stay tunable.
  absl::StatusOr<ConfigSpace> cpu = ConfigSpace::Create(Seed(1024), Cpu(2), {});
  ASSERT_TRUE(cpu.ok());
  std::set<std::pair<int, int>> cpu_blocks;
  for (const KernelConfig& c : cpu->ForVariant(Variant::kMaterialized)) cpu_blocks.insert({c.block_m, c.block_s});
  EXPECT_GT(cpu_blocks.size(), 1u);
}

TEST(ConfigSpace, VariantsAreSelectable) {
  ConfigSpaceOptions o;
  o.variants = {Variant::kMaterialized, Variant::kFused};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(128), Cpu(2), o);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(space->variants(), (std::vector<Variant>{Variant::kFused, Variant::kMaterialized}));
  EXPECT_TRUE(space->ForVariant(Variant::kPartial).empty());
  for (const KernelConfig& c : space->ForVariant(Variant::kFused)) EXPECT_EQ(c.variant, Variant::kFused);
}

TEST(ConfigSpace, BadOptionsAndProblemsAreErrors) {
  ConfigSpaceOptions o;
  o.block_s = {0};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), Cpu(1), o).status()));
  o = {};
  o.stages = {9};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), Cpu(1), o).status()));
  AttentionProblem bad = Seed(128);
  bad.head_dim = 7;
  EXPECT_FALSE(ConfigSpace::Create(bad, Cpu(1)).ok());
}

}  // namespace
}  // namespace fusetune
