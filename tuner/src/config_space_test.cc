#include "fusetune/tuner/config_space.h"

#include <algorithm>
#include <set>
#include <string>
#include <thread>

#include "fusetune/kernels/cpu_backend.h"
#include "gtest/gtest.h"
#include "testing/host_backend.h"

namespace fusetune {
namespace {

using testing::HostBackend;

AttentionProblem Seed(int s, DType dtype = DType::kFp32) {
  AttentionProblem p;
  p.q_heads = p.kv_heads = 12;
  p.q_len = p.kv_len = s;
  p.head_dim = 64;
  p.dtype = dtype;
  return p;
}

KernelConfig Config(Variant variant, int bm, int bs, int threads, Precision precision = Precision::kFp32,
                    int stages = 1) {
  KernelConfig c;
  c.variant = variant;
  c.block_m = bm;
  c.block_s = bs;
  c.threads = threads;
  c.precision = precision;
  c.stages = stages;
  return c;
}

// A backend that can run nothing for any problem (e.g. an unsupported head_dim).
class EmptyBackend : public HostBackend {
 public:
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem&) const override { return {}; }
};

std::vector<KernelConfig> Sorted(std::vector<KernelConfig> v) {
  std::sort(v.begin(), v.end(), ConfigOrderLess);
  return v;
}

TEST(ConfigSpace, DefaultSpaceIsEverythingTheBackendOffers) {
  HostBackend backend;
  backend.candidates = {Config(Variant::kPartial, 64, 64, 128), Config(Variant::kFused, 128, 64, 256),
                        Config(Variant::kFused, 64, 64, 128, Precision::kTf32, 2),
                        Config(Variant::kMaterialized, 64, 64, 512)};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(2048), backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), Sorted(backend.candidates));
  EXPECT_EQ(space->variants(), (std::vector<Variant>{Variant::kFused, Variant::kPartial, Variant::kMaterialized}));
}

// The old space was a fixed grid (GPU: block_m {64, 128, 192}, threads {128, 256, 384,
// 512}); a compiled instance outside it, such as the fp32 block_m 32 / 64-thread one, was
// unreachable. Now whatever the backend offers is in the space.
TEST(ConfigSpace, AConfigOutsideTheOldFixedGridIsInTheSpace) {
  HostBackend backend;
  const KernelConfig small = Config(Variant::kFused, 32, 64, 64);
  backend.candidates = {small, Config(Variant::kFused, 64, 64, 128)};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(128), backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_NE(std::find(space->configs().begin(), space->configs().end(), small), space->configs().end());
  EXPECT_EQ(space->size(), 2u);
}

TEST(ConfigSpace, EachNonEmptyOptionListFiltersTheCandidates) {
  HostBackend backend;  // the CPU-like grid: 3 variants x 16 tiles x threads {1, 2} (fp32)
  ConfigSpaceOptions o;
  o.variants = {Variant::kFused, Variant::kMaterialized};
  o.threads = {2, 8};  // 8 is not offered: a filter never adds configs
  o.block_s = {32, 64};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(1024), backend, o);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->size(), 2u * 4 * 2 * 1);
  EXPECT_TRUE(space->ForVariant(Variant::kPartial).empty());
  for (const KernelConfig& c : space->configs()) {
    EXPECT_EQ(c.threads, 2) << c.Key();
    EXPECT_TRUE(c.block_s == 32 || c.block_s == 64) << c.Key();
  }
  // Every config of the space is one the backend offered.
  const std::vector<KernelConfig> offered = backend.CandidateConfigs(Seed(1024));
  for (const KernelConfig& c : space->configs()) {
    EXPECT_TRUE(std::binary_search(offered.begin(), offered.end(), c, ConfigOrderLess)) << c.Key();
  }
  EXPECT_TRUE(std::is_sorted(space->configs().begin(), space->configs().end(), ConfigOrderLess));
}

TEST(ConfigSpace, BlocksLargerThanTheSmallestCoveringOneAreDropped) {
  HostBackend backend;  // tiles {16, 32, 64, 128}
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(40), backend);
  ASSERT_TRUE(space.ok()) << space.status();
  std::set<int> bm, bs;
  for (const KernelConfig& c : space->configs()) {
    bm.insert(c.block_m);
    bs.insert(c.block_s);
  }
  EXPECT_EQ(bm, (std::set<int>{16, 32, 64}));  // 128 would rerun 64's single tile
  EXPECT_EQ(bs, (std::set<int>{16, 32, 64}));
  EXPECT_EQ(space->size(), 3u * 3 * 3 * 2);

  // Only against a config equal in everything else: a 128-row tile with a thread count no
  // smaller tile has stays, as does the key-side tile when the keys are longer.
  backend.candidates = {Config(Variant::kFused, 64, 64, 128), Config(Variant::kFused, 128, 64, 128),
                        Config(Variant::kFused, 128, 64, 256), Config(Variant::kFused, 64, 128, 128)};
  AttentionProblem p = Seed(40);
  p.kv_len = 100;
  space = ConfigSpace::Create(p, backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), Sorted({Config(Variant::kFused, 64, 64, 128), Config(Variant::kFused, 128, 64, 256),
                                      Config(Variant::kFused, 64, 128, 128)}));
  // Keys 40 long: block_s 128 reruns block_s 64's single key tile.
  p.kv_len = 40;
  space = ConfigSpace::Create(p, backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), Sorted({Config(Variant::kFused, 64, 64, 128), Config(Variant::kFused, 128, 64, 256)}));
}

TEST(ConfigSpace, TheScheduleFlagsSeparateTheRedundancyGroups) {
  // A 128-row tile with pingpong or persistent is another kernel schedule than the 64-row
  // tile without: nothing smaller repeats it, so it stays; the plain 128-row one does not.
  KernelConfig pingpong = Config(Variant::kFused, 128, 64, 128);
  pingpong.pingpong = true;
  KernelConfig persistent = Config(Variant::kFused, 128, 64, 128);
  persistent.persistent = true;
  HostBackend backend;
  backend.candidates = {Config(Variant::kFused, 64, 64, 128), Config(Variant::kFused, 128, 64, 128), pingpong,
                        persistent};
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(40), backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), Sorted({Config(Variant::kFused, 64, 64, 128), pingpong, persistent}));
  // Within one schedule the rule still applies.
  KernelConfig smaller = pingpong;
  smaller.block_m = 64;
  backend.candidates = {smaller, pingpong};
  space = ConfigSpace::Create(Seed(40), backend);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), std::vector<KernelConfig>{smaller});
}

TEST(ConfigSpace, TheRedundancyRuleComparesWithinTheFilteredSpace) {
  HostBackend backend;
  ConfigSpaceOptions o;
  o.block_m = {128};  // asked for explicitly: nothing smaller is left to repeat it
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(40), backend, o);
  ASSERT_TRUE(space.ok()) << space.status();
  for (const KernelConfig& c : space->configs()) EXPECT_EQ(c.block_m, 128);
  EXPECT_EQ(space->size(), 3u * 3 * 2);
}

TEST(ConfigSpace, OptionsThatLeaveNothingAreInvalidArgumentNamingTheOption) {
  HostBackend backend;
  ConfigSpaceOptions o;
  o.precisions = {Precision::kFp16};  // fp32 storage: the backend offers no fp16 products
  absl::Status s = ConfigSpace::Create(Seed(128), backend, o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(std::string(s.message()).find("precisions in {fp16}"), std::string::npos) << s;
  o = {};
  o.variants = {Variant::kFused};
  o.threads = {4};
  s = ConfigSpace::Create(Seed(128), backend, o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(std::string(s.message()).find("threads in {4}"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("earlier options"), std::string::npos) << s;

  EmptyBackend empty;
  s = ConfigSpace::Create(Seed(128), empty).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(std::string(s.message()).find("can run no config"), std::string::npos) << s;
}

TEST(ConfigSpace, OutOfRangeOptionsAndBadProblemsAreErrors) {
  HostBackend backend;
  ConfigSpaceOptions o;
  o.block_s = {0};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), backend, o).status()));
  o = {};
  o.stages = {9};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), backend, o).status()));
  o = {};
  o.threads = {2000};
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(Seed(128), backend, o).status()));
  AttentionProblem bad = Seed(128);
  bad.kv_heads = 5;  // 12 query heads do not group over 5
  EXPECT_TRUE(absl::IsInvalidArgument(ConfigSpace::Create(bad, backend).status()));
}

// The real CPU backend: the default space is its whole candidate list at long sequences,
// every config runs (CanImplement), and the thread counts stop at the hardware threads.
TEST(ConfigSpace, CpuDefaultSpaceIsTheCpuBackendsCandidates) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::set<int> expected_threads;
  for (int t = 1; t < hw; t *= 2) expected_threads.insert(t);
  expected_threads.insert(hw);
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(Seed(2048), *cpu);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->configs(), cpu->CandidateConfigs(Seed(2048)));
  EXPECT_EQ(space->size(), 3u * 4 * 4 * expected_threads.size());
  std::set<int> threads;
  for (const KernelConfig& c : space->configs()) {
    threads.insert(c.threads);
    EXPECT_TRUE(cpu->CanImplement(Seed(2048), c).ok()) << c.Key();
  }
  EXPECT_EQ(threads, expected_threads);
  std::printf("[ info ] cpu seed S=2048 space: %zu configs (%zu per variant), %d hardware threads\n",
              space->size(), space->ForVariant(Variant::kFused).size(), hw);

  std::set<Precision> precisions;
  absl::StatusOr<ConfigSpace> half = ConfigSpace::Create(Seed(128, DType::kBf16), *cpu);
  ASSERT_TRUE(half.ok()) << half.status();
  for (const KernelConfig& c : half->configs()) precisions.insert(c.precision);
  EXPECT_EQ(precisions, (std::set<Precision>{Precision::kFp32, Precision::kBf16}));
}

}  // namespace
}  // namespace fusetune
