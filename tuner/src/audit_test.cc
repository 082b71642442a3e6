#include "fusetune/tuner/audit.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fusetune/kernels/cpu_backend.h"
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

// The CPU backend as CI runs it: the default tune of each seed-preset shape (the fused
// variant, the one whose pick is served) is the exhaustive best or within the audit's
// measured noise. FUSETUNE_AUDIT_TEST_MAX_SEQ caps the shapes (default 512: the preset's
// three smallest, about a minute on a 2-core machine; 2048 runs all five).
TEST(AuditCpu, DefaultTuneOfTheSeedPresetIsWithinNoiseOfTheExhaustiveBest) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  int max_seq = 512;
  if (const char* env = std::getenv("FUSETUNE_AUDIT_TEST_MAX_SEQ")) max_seq = std::atoi(env);
  class Discard : public RecordSink {
   public:
    absl::Status RecordTrial(const Trial&) override { return absl::OkStatus(); }
    absl::Status RecordBestConfig(const BestConfig&) override { return absl::OkStatus(); }
    absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t) override { return std::vector<Trial>(); }
  } sink;
  int audited = 0;
  for (const AttentionProblem& p : SeedPresetProblems()) {
    if (p.q_len > max_seq) continue;
    // A flagged pick is confirmed by tuning and auditing again before it counts, as a
    // regression alert is re-run before it is filed: a spell of load on a shared machine
    // can mislead one tune, it should not mislead two.
    bool within = false;
    std::string verdicts;
    for (int attempt = 0; attempt < 2 && !within; ++attempt) {
      SweepOptions tune;
      tune.space.variants = {Variant::kFused};
      tune.seed = 1 + static_cast<uint64_t>(attempt);
      std::vector<AttentionProblem> one = {p};
      absl::StatusOr<SweepResult> r = RunSweep(*cpu, one, tune, 1, sink);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->best.size(), 1u) << p.Key();
      AuditOptions audit;
      audit.space.variants = {Variant::kFused};
      absl::StatusOr<AuditResult> a = RunAudit(*cpu, p, *KernelConfig::FromKey(r->best[0].config_key), audit, 2);
      ASSERT_TRUE(a.ok()) << a.status();
      const AuditSummary& s = a->summary;
      // The noise the audit measured: the relative p10..p90 half-spread of the per-round
      // times of the tuned config and of the audit's best.
      double noise = 0;
      for (const Trial& t : a->trials) {
        if (t.attempt != 1 || t.outcome != TrialOutcome::kOk || !(t.median_us > 0)) continue;
        if (t.config_key != s.recorded_config_key && t.config_key != s.best_config_key) continue;
        noise = std::max(noise, (t.p90_us - t.p10_us) / (2 * t.median_us));
      }
      within = s.regret_low <= 0 || s.regret <= noise;
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    "%s: tuned %s, audit best %s, regret %.2f%% [%.2f%%, %.2f%%], noise %.2f%%, audit %.1f s\n",
                    p.Key().c_str(), s.recorded_config_key.c_str(), s.best_config_key.c_str(), 100 * s.regret,
                    100 * s.regret_low, 100 * s.regret_high, 100 * noise, a->seconds);
      const std::string line = buf;
      std::printf("%s", line.c_str());
      verdicts += line;
    }
    ++audited;
    EXPECT_TRUE(within) << "two tunes in a row picked a config slower than the audit's best by more than "
                           "the measured noise:\n"
                        << verdicts;
  }
  EXPECT_GE(audited, 1);
}

}  // namespace
}  // namespace fusetune
