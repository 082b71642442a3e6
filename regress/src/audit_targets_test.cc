// Which recorded best configs an audit re-measures, each audit recorded whole, and a stop.
#include "fusetune/regress/audit_targets.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fusetune/kernels/cpu_backend.h"
#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

using testing::kConfigA;
using testing::kProblemKey;

constexpr char kOtherProblem[] = "prefill/b1/hq2/hkv2/q64/k64/d32/causal0/fp32";

void RecordBest(Store& store, const std::string& device_class, const std::string& problem_key,
                const std::string& config_key) {
  BestConfig best;
  best.device_class = device_class;
  best.problem_key = problem_key;
  best.config_key = config_key;
  best.median_us = 10;
  best.commit = testing::kCommitA;
  ASSERT_TRUE(store.UpsertBestConfig(best).ok());
}

AuditOptions Quick() {
  AuditOptions o;
  o.space.variants = {Variant::kFused};
  o.space.threads = {1};
  o.runner.timing.repeats = 2;
  o.runner.timing.warmup = 0;
  o.rounds = 3;
  return o;
}

TEST(TargetsOfProblems, TheRecordedConfigOfEachProblemOrANote) {
  auto store = testing::MemoryStore();
  RecordBest(*store, "cpu/x", kProblemKey, kConfigA);
  RecordBest(*store, "cpu/x", kOtherProblem, "not-a-config");
  RecordBest(*store, "cpu/y", "prefill/b1/hq2/hkv2/q16/k16/d32/causal0/fp32", kConfigA);
  absl::StatusOr<AuditTargets> targets = TargetsOfProblems(
      *store, "cpu/x",
      {*AttentionProblem::FromKey(kProblemKey), *AttentionProblem::FromKey(kOtherProblem),
       *AttentionProblem::FromKey("prefill/b1/hq2/hkv2/q16/k16/d32/causal0/fp32")});
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->list.size(), 1u);
  EXPECT_EQ(targets->list[0].problem.Key(), kProblemKey);
  EXPECT_EQ(targets->list[0].recorded.Key(), kConfigA);
  EXPECT_EQ(targets->failures, 1) << "a record that cannot be read fails";
  ASSERT_EQ(targets->notes.size(), 2u);
  EXPECT_NE(targets->notes[0].find("recorded config 'not-a-config' cannot be read"), std::string::npos);
  EXPECT_NE(targets->notes[1].find("no best config recorded on cpu/x"), std::string::npos)
      << "another device class's record does not count";
}

TEST(TargetsOfAllRecords, EveryRebuildableRecordOfTheDeviceClass) {
  auto store = testing::MemoryStore();
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  EXPECT_TRUE(absl::IsNotFound(TargetsOfAllRecords(*store, "cpu/x", *cpu, {}).status()));
  RecordBest(*store, "cpu/x", kProblemKey, kConfigA);
  RecordBest(*store, "cpu/x", "varlen/b2/hash0123", kConfigA);
  RecordBest(*store, "cpu/x", kOtherProblem, "not-a-config");
  RecordBest(*store, "cpu/y", kOtherProblem, kConfigA);
  absl::StatusOr<AuditTargets> targets = TargetsOfAllRecords(*store, "cpu/x", *cpu, Quick().space);
  ASSERT_TRUE(targets.ok()) << targets.status();
  ASSERT_EQ(targets->list.size(), 1u);
  EXPECT_EQ(targets->list[0].problem.Key(), kProblemKey);
  EXPECT_EQ(targets->failures, 1);
  ASSERT_EQ(targets->notes.size(), 2u);
  bool skipped = false;
  for (const std::string& n : targets->notes) skipped = skipped || n.find("varlen/b2/hash0123: skipped") == 0;
  EXPECT_TRUE(skipped) << "a problem its key cannot rebuild is skipped, not failed";
}

TEST(RecordTrialsAndSummary, TheSummaryCarriesTheRunAndGetsAnAuditId) {
  auto store = testing::MemoryStore();
  RunInfo info;
  info.commit = testing::kCommitA;
  info.device = testing::CpuDevice();
  info.label = "audit";
  const int64_t run = *store->BeginRun(info);
  AuditResult result;
  result.summary.problem_key = kProblemKey;
  result.summary.recorded_config_key = kConfigA;
  result.summary.best_config_key = kConfigA;
  result.summary.rounds = 3;
  absl::StatusOr<AuditSummary> summary =
      RecordTrialsAndSummary({*store, run, info.device.DeviceClass(), testing::kCommitB}, result);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_GT(summary->audit_id, 0);
  EXPECT_EQ(summary->run_id, run);
  EXPECT_EQ(summary->commit, testing::kCommitB);
  absl::StatusOr<std::vector<AuditSummary>> audits = store->ListAudits();
  ASSERT_TRUE(audits.ok());
  ASSERT_EQ(audits->size(), 1u);
  EXPECT_EQ((*audits)[0].device_class, info.device.DeviceClass());

  absl::StatusOr<AuditSummary> orphan = RecordTrialsAndSummary({*store, run + 100, "cpu/x", "c"}, result);
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("recording the audit"), std::string::npos) << orphan.status();
}

TEST(AuditEach, RecordsEachAuditAndTellsOfIt) {
  auto store = testing::MemoryStore();
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  RunInfo info;
  info.commit = testing::kCommitA;
  info.device = cpu->Describe();
  info.label = "audit";
  const int64_t run = *store->BeginRun(info);
  KernelConfig recorded;
  recorded.block_m = 16;
  recorded.block_s = 16;
  recorded.threads = 1;
  const std::vector<AuditTarget> targets = {{*AttentionProblem::FromKey(kOtherProblem), recorded}};
  int told = 0;
  AuditEvents events;
  events.on_audited = [&](const AuditSummary& s, const AuditResult& r) {
    ++told;
    EXPECT_GT(s.audit_id, 0);
    EXPECT_FALSE(r.trials.empty());
  };
  std::atomic<bool> stop{false};
  absl::StatusOr<AuditedTargets> audited =
      AuditEach(targets, *cpu, Quick(), {*store, run, info.device.DeviceClass(), testing::kCommitA}, &stop, events);
  ASSERT_TRUE(audited.ok()) << audited.status();
  EXPECT_EQ(told, 1);
  ASSERT_EQ(audited->summaries.size(), 1u);
  EXPECT_EQ(audited->summaries[0].recorded_config_key, recorded.Key());
  EXPECT_FALSE(audited->cancelled);
  EXPECT_EQ(store->ListAudits()->size(), 1u);

  stop = true;
  audited = AuditEach(targets, *cpu, Quick(), {*store, run, info.device.DeviceClass(), testing::kCommitA}, &stop, events);
  ASSERT_TRUE(audited.ok()) << audited.status();
  EXPECT_TRUE(audited->cancelled);
  EXPECT_TRUE(audited->summaries.empty()) << "a stop before an audit starts none";
  EXPECT_EQ(store->ListAudits()->size(), 1u);
}

}  // namespace
}  // namespace fusetune::regress
