#include "fusetune/regress/planted_slowdown.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fusetune/kernels/cpu_backend.h"
#include "testing/noise_backend.h"

namespace fusetune::regress {
namespace {

using ::testing::DoubleEq;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The CPU backend, except that Time() reports fixed samples (so a scaling is seen exactly)
// and a fixed device state.
class FixedTimeBackend : public testing::SyntheticTimeBackend {
 public:
  explicit FixedTimeBackend(std::vector<double> micros)
      : SyntheticTimeBackend("fixed-time host"), micros_(std::move(micros)) {}

 protected:
  TimingSamples Samples(const AttentionProblem&, const KernelConfig&, const TimingOptions&) override {
    TimingSamples samples;
    samples.micros = micros_;
    samples.sm_clock_mhz = 1500;
    samples.before = {.known = true, .sm_clock_mhz = 1500, .power_mw = 1000};
    samples.after = samples.before;
    return samples;
  }

 public:
  DeviceState CurrentDeviceState() const override { return {.known = true, .sm_clock_mhz = 1700, .power_mw = 2000}; }

 private:
  std::vector<double> micros_;
};

AttentionProblem TinyProblem(int q_len = 16) {
  AttentionProblem p;
  p.q_len = q_len;
  p.kv_len = 16;
  p.head_dim = 32;
  return p;
}

KernelConfig Config(Variant variant, int block_m = 16) {
  KernelConfig c;
  c.variant = variant;
  c.block_m = block_m;
  c.block_s = 16;
  c.threads = 1;
  return c;
}

// Host buffers of a problem's four tensors on `backend`, inputs filled with a pattern.
struct Buffers {
  DeviceMemory q, k, v, o;
  size_t o_bytes = 0;

  AttentionBuffers View() const { return {q.data(), k.data(), v.data(), o.data()}; }
};

Buffers MakeBuffers(Backend& backend, const AttentionProblem& p) {
  Buffers b;
  const size_t q_bytes = p.QElements() * sizeof(float), kv_bytes = p.KVElements() * sizeof(float);
  b.o_bytes = p.OElements() * sizeof(float);
  b.q = *backend.Allocate(q_bytes);
  b.k = *backend.Allocate(kv_bytes);
  b.v = *backend.Allocate(kv_bytes);
  b.o = *backend.Allocate(b.o_bytes);
  std::vector<float> pattern(p.KVElements() > p.QElements() ? p.KVElements() : p.QElements());
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
  EXPECT_TRUE(backend.CopyToDevice(b.q.data(), pattern.data(), q_bytes).ok());
  EXPECT_TRUE(backend.CopyToDevice(b.k.data(), pattern.data(), kv_bytes).ok());
  EXPECT_TRUE(backend.CopyToDevice(b.v.data(), pattern.data() + 1, kv_bytes - sizeof(float)).ok());
  EXPECT_TRUE(backend.Fill(static_cast<char*>(b.v.data()) + kv_bytes - sizeof(float), 0, sizeof(float)).ok());
  return b;
}

TEST(ParsePlantedSlowdown, ReadsSubstringAndFraction) {
  absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown("q4096/k4096/d128/causal1/bf16 fused=0.03");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cell_substring, "q4096/k4096/d128/causal1/bf16 fused");
  EXPECT_DOUBLE_EQ(s->fraction, 0.03);
}

TEST(ParsePlantedSlowdown, ReadsAPercentage) {
  absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown("fused=3%");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cell_substring, "fused");
  EXPECT_DOUBLE_EQ(s->fraction, 0.03);
  s = ParsePlantedSlowdown("fused=-2.5%");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->fraction, -0.025);
}

TEST(ParsePlantedSlowdown, EmptySubstringMeansEveryCell) {
  absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown("=0.1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->cell_substring, "");
  EXPECT_DOUBLE_EQ(s->fraction, 0.1);
}

TEST(ParsePlantedSlowdown, AcceptsTheRangeEnds) {
  EXPECT_TRUE(ParsePlantedSlowdown("x=10").ok());
  EXPECT_TRUE(ParsePlantedSlowdown("x=1000%").ok());
  EXPECT_TRUE(ParsePlantedSlowdown("x=-0.49").ok());
  EXPECT_TRUE(ParsePlantedSlowdown("x=0").ok());
}

TEST(ParsePlantedSlowdown, RejectsAMissingEquals) {
  absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown("fused 0.03");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("SUBSTRING=FRACTION"));
  EXPECT_EQ(ParsePlantedSlowdown("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParsePlantedSlowdown, RejectsBadNumbers) {
  for (const char* spec : {"fused=", "fused=%", "fused=abc", "fused=0.03x", "fused=3%%", "fused=%3",
                           "fused=0.0.3", "fused=nan", "fused=inf", "fused=-inf", "fused=1e999"}) {
    SCOPED_TRACE(spec);
    absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown(spec);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(ParsePlantedSlowdown("fused=abc").status().message(), HasSubstr("not a number"));
}

TEST(ParsePlantedSlowdown, RejectsFractionsOutOfRange) {
  for (const char* spec : {"fused=-0.5", "fused=-50%", "fused=-1", "fused=10.01", "fused=1001%", "fused=1e6"}) {
    SCOPED_TRACE(spec);
    absl::StatusOr<PlantedSlowdown> s = ParsePlantedSlowdown(spec);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("outside (-0.5, 10]"));
  }
}

TEST(PlantedSlowdownBackend, RunComputesWhatTheInnerBackendComputes) {
  const AttentionProblem p = TinyProblem();
  const KernelConfig c = Config(Variant::kFused);
  PlantedSlowdownBackend planted(CreateCpuBackend(), {{.cell_substring = "", .fraction = 0.5}});
  std::unique_ptr<Backend> plain = CreateCpuBackend();
  Buffers a = MakeBuffers(planted, p);
  Buffers b = MakeBuffers(*plain, p);
  ASSERT_TRUE(planted.Run(p, c, a.View()).ok());
  ASSERT_TRUE(plain->Run(p, c, b.View()).ok());
  std::vector<float> out_a(p.OElements()), out_b(p.OElements());
  ASSERT_TRUE(planted.CopyToHost(out_a.data(), a.o.data(), a.o_bytes).ok());
  ASSERT_TRUE(plain->CopyToHost(out_b.data(), b.o.data(), b.o_bytes).ok());
  EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), a.o_bytes), 0);
  // Time runs the kernel too: its output is the inner backend's as well.
  ASSERT_TRUE(planted.Fill(a.o.data(), 0xFF, a.o_bytes).ok());
  ASSERT_TRUE(planted.Time(p, c, a.View(), {.warmup = 0, .repeats = 3}).ok());
  ASSERT_TRUE(planted.CopyToHost(out_a.data(), a.o.data(), a.o_bytes).ok());
  EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), a.o_bytes), 0);
}

TEST(PlantedSlowdownBackend, ForwardsDescriptionCapabilitiesAndErrors) {
  auto inner = std::make_unique<FixedTimeBackend>(std::vector<double>{1.0});
  FixedTimeBackend& fixed = *inner;
  PlantedSlowdownBackend planted(std::move(inner), {{.cell_substring = "fused", .fraction = 0.1}});
  EXPECT_EQ(planted.Describe().name, "fixed-time host");
  EXPECT_EQ(planted.Describe().DeviceClass(), fixed.Describe().DeviceClass());

  const AttentionProblem p = TinyProblem();
  EXPECT_EQ(planted.CandidateConfigs(p), fixed.CandidateConfigs(p));
  EXPECT_FALSE(planted.CandidateConfigs(p).empty());
  EXPECT_TRUE(planted.CanImplement(p, Config(Variant::kFused)).ok());
  AttentionProblem unsupported = p;
  unsupported.head_dim = 24;  // below kMinHeadDim
  const absl::Status refused = planted.CanImplement(unsupported, Config(Variant::kFused));
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused, fixed.CanImplement(unsupported, Config(Variant::kFused)));

  // A Run or Time error is the inner backend's, unscaled and unchanged.
  Buffers b = MakeBuffers(planted, p);
  const int before = fixed.calls;
  AttentionBuffers missing = b.View();
  missing.o = nullptr;
  EXPECT_EQ(planted.Run(p, Config(Variant::kFused), missing), fixed.Run(p, Config(Variant::kFused), missing));
  absl::StatusOr<TimingSamples> timed = planted.Time(unsupported, Config(Variant::kFused), b.View(), {});
  EXPECT_EQ(timed.status(), fixed.Time(unsupported, Config(Variant::kFused), b.View(), {}).status());
  EXPECT_FALSE(timed.ok());
  EXPECT_EQ(fixed.calls, before + 4);  // two calls through the decorator, two direct
}

TEST(PlantedSlowdownBackend, ForwardsMemoryCalls) {
  auto inner = std::make_unique<FixedTimeBackend>(std::vector<double>{1.0});
  FixedTimeBackend& fixed = *inner;
  PlantedSlowdownBackend planted(std::move(inner), {});
  absl::StatusOr<DeviceMemory> memory = planted.Allocate(64);
  ASSERT_TRUE(memory.ok());
  const char text[16] = "fifteen chars..";
  ASSERT_TRUE(planted.CopyToDevice(memory->data(), text, sizeof(text)).ok());
  char back[16] = {};
  ASSERT_TRUE(planted.CopyToHost(back, memory->data(), sizeof(back)).ok());
  EXPECT_STREQ(back, text);
  ASSERT_TRUE(planted.Fill(memory->data(), 'a', 4).ok());
  ASSERT_TRUE(planted.CopyToHost(back, memory->data(), 4).ok());
  EXPECT_EQ(std::string(back, 4), "aaaa");
  EXPECT_EQ(fixed.calls, 5);
  // The device's state now, as the inner backend reads it.
  EXPECT_EQ(planted.CurrentDeviceState().sm_clock_mhz, 1700);
}

TEST(PlantedSlowdownBackend, ForwardsTheScratchArenaSoAPlantedSideLaysItOutAsTheOther) {
  const AttentionProblem p = TinyProblem();
  const KernelConfig c = Config(Variant::kFused);
  PlantedSlowdownBackend planted(CreateCpuBackend(), {{.cell_substring = "", .fraction = 0.5}});
  absl::StatusOr<size_t> bytes = planted.ScratchBytes(p, c);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, *CreateCpuBackend()->ScratchBytes(p, c));
  absl::StatusOr<DeviceMemory> arena = planted.Allocate(*bytes);
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE(planted.UseScratchArena(arena->data(), 64).ok());
  Buffers b = MakeBuffers(planted, p);
  // The inner backend took the (too small) arena: its refusal comes back.
  EXPECT_TRUE(absl::IsFailedPrecondition(planted.Run(p, c, b.View())));
  ASSERT_TRUE(planted.UseScratchArena(arena->data(), arena->bytes()).ok());
  EXPECT_TRUE(planted.Run(p, c, b.View()).ok());
  // Lent threads likewise.
  EXPECT_TRUE(planted.LendWorkers().ok());
  WorkerPool broken;
  EXPECT_TRUE(absl::IsInvalidArgument(planted.UseWorkers(&broken)));
  EXPECT_TRUE(planted.UseWorkers(nullptr).ok());
}

TEST(PlantedSlowdownBackend, ScalesOnlyMatchingCellsExactly) {
  const AttentionProblem p = TinyProblem();
  const AttentionProblem other = TinyProblem(32);
  const std::vector<double> micros = {100, 250, 400};
  PlantedSlowdownBackend planted(std::make_unique<FixedTimeBackend>(micros),
                                 {{.cell_substring = "q16/k16/d32/causal0/fp32 fused/", .fraction = 0.05}});
  Buffers b = MakeBuffers(planted, other);  // large enough for both problems

  absl::StatusOr<TimingSamples> slowed = planted.Time(p, Config(Variant::kFused), b.View(), {});
  ASSERT_TRUE(slowed.ok()) << slowed.status();
  EXPECT_THAT(slowed->micros, ElementsAre(DoubleEq(105), DoubleEq(262.5), DoubleEq(420)));
  // The device state is the device's own.
  EXPECT_EQ(slowed->sm_clock_mhz, 1500);
  EXPECT_EQ(slowed->before.sm_clock_mhz, 1500);
  EXPECT_TRUE(slowed->after.known);

  // Another config of the same problem, and the same config of another problem: unscaled.
  absl::StatusOr<TimingSamples> same = planted.Time(p, Config(Variant::kMaterialized), b.View(), {});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->micros, micros);
  same = planted.Time(other, Config(Variant::kFused), b.View(), {});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->micros, micros);
  EXPECT_DOUBLE_EQ(planted.FactorFor(p, Config(Variant::kFused)), 1.05);
  EXPECT_DOUBLE_EQ(planted.FactorFor(other, Config(Variant::kFused)), 1.0);
}

TEST(PlantedSlowdownBackend, FirstMatchingSlowdownWins) {
  const AttentionProblem p = TinyProblem();
  PlantedSlowdownBackend planted(std::make_unique<FixedTimeBackend>(std::vector<double>{200}),
                                 {{.cell_substring = "bm32", .fraction = 0.5},
                                  {.cell_substring = "fused", .fraction = 0.1},
                                  {.cell_substring = "", .fraction = -0.25}});
  EXPECT_DOUBLE_EQ(planted.FactorFor(p, Config(Variant::kFused, 32)), 1.5);
  EXPECT_DOUBLE_EQ(planted.FactorFor(p, Config(Variant::kFused, 16)), 1.1);
  EXPECT_DOUBLE_EQ(planted.FactorFor(p, Config(Variant::kPartial, 16)), 0.75);
  Buffers b = MakeBuffers(planted, p);
  absl::StatusOr<TimingSamples> t = planted.Time(p, Config(Variant::kPartial, 16), b.View(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(t->micros, ElementsAre(DoubleEq(150)));
}

TEST(PlantedSlowdownBackend, DecoratesABorrowedBackend) {
  FixedTimeBackend fixed({100, 300});
  {
    PlantedSlowdownBackend planted(fixed, {{.cell_substring = "fused", .fraction = 0.5}});
    const AttentionProblem p = TinyProblem();
    Buffers b = MakeBuffers(planted, p);
    absl::StatusOr<TimingSamples> t = planted.Time(p, Config(Variant::kFused), b.View(), {});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(t->micros, ElementsAre(DoubleEq(150), DoubleEq(450)));
    // The borrowed backend itself is not slowed.
    t = fixed.Time(p, Config(Variant::kFused), b.View(), {});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(t->micros, ElementsAre(DoubleEq(100), DoubleEq(300)));
  }
  // The decorator is gone and the backend it borrowed still works.
  EXPECT_TRUE(fixed.Allocate(16).ok());
}

}  // namespace
}  // namespace fusetune::regress
