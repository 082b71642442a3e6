#include "fusetune/tuner/audit.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "fusetune/kernels/problem.h"
#include "fusetune/tuner/sweep.h"
#include "gtest/gtest.h"
#include "testing/host_backend.h"

namespace fusetune {
namespace {

using testing::HostBackend;

AttentionProblem Tiny() {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = 64;
  p.kv_len = 64;
  p.head_dim = 32;
  return p;
}

AuditOptions Quick() {
  AuditOptions o;
  o.space.variants = {Variant::kFused};
  o.space.threads = {1};
  o.runner.timing.repeats = 3;
  o.runner.timing.warmup = 0;
  o.rounds = 5;
  return o;
}

KernelConfig Fused(int block_m, int block_s) {
  KernelConfig c;
  c.block_m = block_m;
  c.block_s = block_s;
  c.threads = 1;
  return c;
}

TEST(Audit, MeasuresTheRegretOfASlowerRecordedConfig) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return c.block_s == 64 && c.block_m == 64 ? 100.0 : 110.0; };
  absl::StatusOr<AuditResult> r = RunAudit(backend, Tiny(), Fused(16, 16), Quick(), /*run_id=*/3);
  ASSERT_TRUE(r.ok()) << r.status();
  const AuditSummary& s = r->summary;
  EXPECT_EQ(s.recorded_config_key, Fused(16, 16).Key());
  EXPECT_EQ(s.best_config_key, Fused(64, 64).Key());
  EXPECT_NEAR(s.regret, 0.10, 1e-9);
  EXPECT_LE(s.regret_low, s.regret);
  EXPECT_GE(s.regret_high, s.regret);
  EXPECT_EQ(s.rounds, 5);
  EXPECT_EQ(s.problem_key, Tiny().Key());
  EXPECT_EQ(s.device_class, backend.Describe().DeviceClass());
  EXPECT_GE(s.configs_measured, 4);
  int screens = 0, rounds = 0;
  for (const Trial& t : r->trials) {
    EXPECT_EQ(t.stage, TrialStage::kAudit);
    EXPECT_EQ(t.run_id, 3);
    screens += t.attempt == 0;
    rounds += t.attempt == 1;
  }
  EXPECT_EQ(screens, s.configs_measured + s.configs_failed);
  EXPECT_GE(rounds, 2) << "the recorded config and at least the best in interleaved rounds";
}

TEST(Audit, ARecordedBestHasNoRegret) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return c.block_s == 32 ? 90.0 : 100.0; };
  absl::StatusOr<AuditResult> r = RunAudit(backend, Tiny(), Fused(16, 32), Quick(), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->summary.regret, 0);
  // Every bs32 config ties with the recorded one: none is faster, so the recorded stays.
  EXPECT_EQ(r->summary.best_config_key, Fused(16, 32).Key());
}

TEST(Audit, AClearlyBestRecordedConfigSaysByHowMuchItBeatsTheRunnerUp) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) {
    return c.block_m == 32 && c.block_s == 32 ? 90.0 : 100.0 + c.block_m + c.block_s;
  };
  absl::StatusOr<AuditResult> r = RunAudit(backend, Tiny(), Fused(32, 32), Quick(), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  const AuditSummary& s = r->summary;
  EXPECT_EQ(s.best_config_key, Fused(32, 32).Key());
  EXPECT_EQ(s.regret, 0);
  // The runner-up (bm16/bs16) takes 132 us: the recorded one is 90/132 - 1 = -31.8 % of it.
  EXPECT_NEAR(s.regret_low, 90.0 / 132.0 - 1.0, 1e-9);
  EXPECT_EQ(s.regret_high, 0);
}

TEST(Audit, ARecordedConfigThatCannotRunHereIsAnError) {
  HostBackend backend;
  backend.refuse = [](const KernelConfig& c) { return c.block_m == 128; };
  absl::StatusOr<AuditResult> r = RunAudit(backend, Tiny(), Fused(128, 16), Quick(), 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("unsupported"), std::string::npos) << r.status();
}

TEST(Audit, BadOptionsAndCancelAreErrors) {
  HostBackend backend;
  AuditOptions o = Quick();
  o.rounds = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(RunAudit(backend, Tiny(), Fused(16, 16), o, 1).status()));
  std::atomic<bool> cancel{true};
  EXPECT_TRUE(absl::IsCancelled(RunAudit(backend, Tiny(), Fused(16, 16), Quick(), 1, &cancel).status()));
}

// A latency landscape like the CPU backend's on a seed-preset shape: two threads about 1.8x
// one, a best tile with near neighbours 3-8 % behind and poor small tiles.
double LoadedHostLatency(const KernelConfig& c) {
  auto factor = [](int block, double at16, double at32, double at128) {
    return block == 16 ? at16 : block == 32 ? at32 : block == 128 ? at128 : 1.0;
  };
  return 200.0 * factor(c.block_m, 1.30, 1.08, 1.04) * factor(c.block_s, 1.25, 1.06, 1.03) *
         (c.threads == 2 ? 0.55 : 1.0);
}

// The default tune (the fused variant, whose pick is served) on a host whose load comes in
// spells that slow whole timing blocks by 5-50 %: the pick is the true best or its nearest
// neighbour (true regret <= 3 %) for every seed, and an audit of the pick reports an interval
// that holds the true regret. Real timing on a shared machine cannot be asserted in a test;
// this is the method's share of it, with the load made reproducible.
TEST(Audit, DefaultTuneOnAHostWithLoadSpellsPicksWithinThreePercentOfTheTrueBest) {
  double true_best = 1e300;
  HostBackend grid;
  for (const KernelConfig& c : grid.CandidateConfigs(Tiny())) {
    if (c.variant == Variant::kFused) true_best = std::min(true_best, LoadedHostLatency(c));
  }
  class Discard : public RecordSink {
   public:
    absl::Status RecordTrial(const Trial&) override { return absl::OkStatus(); }
    absl::Status RecordBestConfig(const BestConfig&) override { return absl::OkStatus(); }
    absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t) override { return std::vector<Trial>(); }
  } sink;
  std::string verdicts;
  int within = 0, audits_holding_truth = 0;
  const int seeds = 8;
  for (int seed = 1; seed <= seeds; ++seed) {
    HostBackend backend;
    backend.latency_us = LoadedHostLatency;
    backend.load.emplace();
    backend.load->seed = static_cast<uint64_t>(seed);
    SweepOptions tune;
    tune.space.variants = {Variant::kFused};
    tune.seed = static_cast<uint64_t>(seed);
    std::vector<AttentionProblem> one = {Tiny()};
    absl::StatusOr<SweepResult> r = RunSweep(backend, one, tune, 1, sink);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->best.size(), 1u);
    absl::StatusOr<KernelConfig> pick = KernelConfig::FromKey(r->best[0].config_key);
    ASSERT_TRUE(pick.ok()) << pick.status();
    const double regret = LoadedHostLatency(*pick) / true_best - 1;
    within += regret <= 0.03 + 1e-9;
    AuditOptions audit;
    audit.space.variants = {Variant::kFused};
    absl::StatusOr<AuditResult> a = RunAudit(backend, Tiny(), *pick, audit, 2);
    ASSERT_TRUE(a.ok()) << a.status();
    const AuditSummary& s = a->summary;
    audits_holding_truth += s.regret_low - 1e-9 <= regret && regret <= s.regret_high + 1e-9;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "seed %d: pick %s, true regret %.2f%%, audit %.2f%% [%.2f%%, %.2f%%]\n", seed,
                  pick->Key().c_str(), 100 * regret, 100 * s.regret, 100 * s.regret_low, 100 * s.regret_high);
    verdicts += buf;
  }
  std::printf("%s", verdicts.c_str());
  EXPECT_EQ(within, seeds) << verdicts;
  EXPECT_GE(audits_holding_truth, seeds - 1) << verdicts;
}

}  // namespace
}  // namespace fusetune
