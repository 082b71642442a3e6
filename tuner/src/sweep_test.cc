#include "fusetune/tuner/sweep.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "fusetune/kernels/cpu_backend.h"
#include "gtest/gtest.h"
#include "testing/host_backend.h"

namespace fusetune {
namespace {

using testing::Fault;
using testing::HostBackend;

// The in-memory RecordSink: what a Store would hold, plus switches for failure tests.
class MemorySink : public RecordSink {
 public:
  std::vector<Trial> trials;
  std::vector<BestConfig> best;
  std::function<void(const Trial&)> after_record;
  bool fail = false;
  bool fail_best = false;
  bool fail_recorded = false;
  std::vector<int64_t> recorded_asked;  // the run ids RecordedTrials was asked for
  absl::Status RecordTrial(const Trial& trial) override {
    if (fail) return absl::UnavailableError("test: disk full");
    for (const Trial& t : trials) {
      if (t.trial_id == trial.trial_id) return absl::OkStatus();  // idempotent, like the Store
    }
    trials.push_back(trial);
    if (after_record) after_record(trial);
    return absl::OkStatus();
  }
  absl::Status RecordBestConfig(const BestConfig& b) override {
    if (fail_best) return absl::ResourceExhaustedError("test: disk full");
    best.push_back(b);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Trial>> RecordedTrials(int64_t run_id) override {
    recorded_asked.push_back(run_id);
    if (fail_recorded) return absl::UnavailableError("test: database away");
    std::vector<Trial> of_run;
    for (const Trial& t : trials) {
      if (t.run_id == run_id) of_run.push_back(t);
    }
    return of_run;
  }
};

AttentionProblem Tiny(int q, int k, bool causal = false) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = 32;
  p.causal = causal;
  return p;
}

// Screen only (no final rounds), few samples: the tests of the search itself.
SweepOptions Quick(int max_trials) {
  SweepOptions o;
  o.max_trials_per_variant = max_trials;
  o.final_rounds.rounds = 0;
  o.runner.timing.repeats = 3;
  o.runner.timing.warmup = 0;
  o.commit = "test-commit";
  return o;
}

TEST(Sweep, CpuBackendTinyProblemsRecordEveryTrialAndPickABestConfig) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::vector<AttentionProblem> problems = {Tiny(24, 40, true), Tiny(33, 33)};
  MemorySink sink;
  std::vector<SweepProgress> reports;
  absl::StatusOr<SweepResult> r = RunSweep(*cpu, problems, Quick(2), /*run_id=*/5, sink,
                                           [&](const SweepProgress& p) { reports.push_back(p); });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->cancelled);
  EXPECT_EQ(r->problems_finished, 2);
  EXPECT_EQ(r->trials_measured, static_cast<int>(sink.trials.size()));
  std::map<std::string, int> per_problem;
  for (const Trial& t : sink.trials) {
    EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.config_key << ": " << t.message;
    EXPECT_EQ(t.run_id, 5);
    ++per_problem[t.problem_key];
  }
  for (const AttentionProblem& p : problems) EXPECT_EQ(per_problem[p.Key()], 3 * 2) << p.Key();
  ASSERT_EQ(r->best.size(), 2u);
  for (const BestConfig& b : r->best) {
    EXPECT_EQ(b.device_class, cpu->Describe().DeviceClass());
    EXPECT_EQ(b.commit, "test-commit");
    EXPECT_GT(b.median_us, 0);
    EXPECT_GT(b.speedup_vs_materialized, 0);
    EXPECT_GT(b.speedup_vs_partial, 0);
  }
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].problem_index, 1);
  EXPECT_EQ(reports[1].problem_count, 2);
  EXPECT_GT(reports[0].estimated_remaining_seconds, 0);
  EXPECT_EQ(reports[1].estimated_remaining_seconds, 0);
  EXPECT_GE(reports[1].elapsed_seconds, reports[0].elapsed_seconds);
}

TEST(Sweep, ProgressCountsAsOkEveryOkTrialItCounts) {
  // Every config runs (a host backend): the progress line's "ok" must equal its trial count,
  // the final rounds' trials included, not only the screen's.
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  SweepOptions o = Quick(4);
  o.final_rounds.rounds = 3;
  MemorySink sink;
  std::vector<SweepProgress> reports;
  const std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink,
                                           [&](const SweepProgress& p) { reports.push_back(p); });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(reports.size(), 1u);
  int rounds_trials = 0;
  for (const Trial& t : sink.trials) {
    ASSERT_EQ(t.outcome, TrialOutcome::kOk) << t.config_key;
    if (t.stage != TrialStage::kScreen) ++rounds_trials;
  }
  ASSERT_GT(rounds_trials, 0) << "the test needs trials beyond the screen";
  EXPECT_EQ(reports[0].trials_ok, reports[0].trials_measured + reports[0].trials_resumed);
  EXPECT_EQ(reports[0].trials_ok, static_cast<int>(sink.trials.size()));
}

TEST(Sweep, APickFromTheFinalRoundsKeepsItsVerificationError) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::vector<AttentionProblem> problems = {Tiny(33, 33)};
  SweepOptions o = Quick(0);
  o.space.variants = {Variant::kFused};
  o.final_rounds.rounds = 3;
  MemorySink sink;
  absl::StatusOr<SweepResult> r = RunSweep(*cpu, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->best.size(), 1u);
  const Trial* screen = nullptr;
  for (const Trial& t : sink.trials) {
    if (t.stage == TrialStage::kScreen && t.config_key == r->best[0].config_key) screen = &t;
  }
  ASSERT_NE(screen, nullptr);
  EXPECT_GT(screen->max_rel_error, 0) << "fp32 CPU kernels round differently from the fp64 reference";
  EXPECT_EQ(r->best[0].max_rel_error, screen->max_rel_error);
  EXPECT_EQ(r->best[0].max_abs_error, screen->max_abs_error);
  for (const Trial& t : sink.trials) {
    if (t.stage == TrialStage::kFinal) EXPECT_GT(t.checked_elements, 0) << t.config_key;
  }
}

TEST(Sweep, ResumeSkipsRecordedTrialsAndReachesTheSameResult) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  MemorySink full;
  absl::StatusOr<SweepResult> a = RunSweep(backend, problems, Quick(3), 1, full);
  ASSERT_TRUE(a.ok()) << a.status();

  // A crash after the first 7 trials: those are on disk; resume from them.
  MemorySink resumed;
  std::vector<Trial> on_disk(full.trials.begin(), full.trials.begin() + 7);
  for (const Trial& t : on_disk) ASSERT_TRUE(resumed.RecordTrial(t).ok());
  absl::StatusOr<SweepResult> b = RunSweep(backend, problems, Quick(3), 1, resumed);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->trials_resumed, 7);
  EXPECT_EQ(b->trials_measured, static_cast<int>(full.trials.size()) - 7);
  ASSERT_EQ(resumed.trials.size(), full.trials.size());
  for (size_t i = 0; i < full.trials.size(); ++i) {
    EXPECT_EQ(resumed.trials[i].trial_id, full.trials[i].trial_id) << "same proposals in the same order";
  }
  ASSERT_EQ(a->best.size(), b->best.size());
  for (size_t i = 0; i < a->best.size(); ++i) EXPECT_EQ(a->best[i].config_key, b->best[i].config_key);
}

TEST(Sweep, CancelFlagStopsBetweenTrials) {
  HostBackend backend;
  std::atomic<bool> cancel{false};
  MemorySink sink;
  sink.after_record = [&](const Trial&) {
    if (sink.trials.size() == 3) cancel = true;
  };
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(4), 1, sink, nullptr, &cancel);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->cancelled);
  EXPECT_EQ(sink.trials.size(), 3u);
  EXPECT_EQ(r->problems_finished, 0);
  EXPECT_TRUE(r->best.empty());
}

TEST(Sweep, ASignalDuringALongTrialStopsItThereAndRecordsItInterrupted) {
  HostBackend backend;
  backend.fault = Fault::kLongLaunch;  // a launch that only ends when its stop token asks
  std::atomic<bool> cancel{false};
  backend.on_run = [&](int run) {
    if (run == 1) cancel = true;  // Ctrl-C while the first launch is in flight
  };
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(4), 1, sink, nullptr, &cancel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->cancelled);
  ASSERT_EQ(sink.trials.size(), 1u);
  EXPECT_EQ(sink.trials[0].outcome, TrialOutcome::kInterrupted);
  EXPECT_TRUE(absl::StrContains(sink.trials[0].message, "signal")) << sink.trials[0].message;
  EXPECT_EQ(backend.runs, 1) << "nothing more was started";
  EXPECT_TRUE(sink.best.empty());
  EXPECT_EQ(r->problems_finished, 0);
}

TEST(Sweep, ABudgetSpentInsideATrialStopsTheSearchAndSaysItIsIncomplete) {
  HostBackend backend;
  backend.fault = Fault::kLongLaunch;
  MemorySink sink;
  std::vector<SweepProgress> reports;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  SweepOptions o = Quick(0);
  o.max_seconds_per_problem = 0.2;
  absl::StatusOr<SweepResult> r =
      RunSweep(backend, problems, o, 1, sink, [&](const SweepProgress& p) { reports.push_back(p); });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->cancelled);
  EXPECT_EQ(r->problems_finished, 1);
  ASSERT_EQ(sink.trials.size(), 1u) << "the search ends with the interrupted trial";
  EXPECT_EQ(sink.trials[0].outcome, TrialOutcome::kInterrupted);
  EXPECT_TRUE(absl::StrContains(sink.trials[0].message, "time budget")) << sink.trials[0].message;
  EXPECT_TRUE(sink.best.empty()) << "no best from a search without a measurement";
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(absl::StrContains(reports[0].incomplete, "time budget")) << reports[0].incomplete;
  EXPECT_FALSE(reports[0].best.has_value());
}

TEST(Sweep, AResumedSweepMeasuresAnInterruptedScreenAgain) {
  HostBackend backend;
  backend.fault = Fault::kLongLaunch;
  std::atomic<bool> cancel{false};
  backend.on_run = [&](int) { cancel = true; };
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  ASSERT_TRUE(RunSweep(backend, problems, Quick(2), 5, sink, nullptr, &cancel).ok());
  ASSERT_EQ(sink.trials.size(), 1u);
  ASSERT_EQ(sink.trials[0].outcome, TrialOutcome::kInterrupted);
  const std::string interrupted_config = sink.trials[0].config_key;

  backend.fault = Fault::kNone;
  backend.on_run = [](int) {};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(2), 5, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->trials_resumed, 0) << "an interrupted trial is not a result to reuse";
  bool measured_again = false;
  for (const Trial& t : sink.trials) {
    if (t.config_key == interrupted_config && t.stage == TrialStage::kScreen && t.attempt == 1) {
      measured_again = true;
      EXPECT_EQ(t.outcome, TrialOutcome::kOk);
    }
  }
  EXPECT_TRUE(measured_again);
  EXPECT_EQ(sink.best.size(), 1u);
}

TEST(Sweep, RunningOutOfHostMemoryIsRecordedAsResourceExhaustedAndReported) {
  HostBackend backend;
  backend.fault = Fault::kOutOfMemory;
  MemorySink sink;
  std::vector<SweepProgress> reports;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  absl::StatusOr<SweepResult> r =
      RunSweep(backend, problems, Quick(1), 1, sink, [&](const SweepProgress& p) { reports.push_back(p); });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(sink.trials.empty());
  for (const Trial& t : sink.trials) {
    EXPECT_EQ(t.outcome, TrialOutcome::kResourceExhausted);
    EXPECT_TRUE(absl::StrContains(t.message, "out of host memory")) << t.message;
  }
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].outcomes.at("resource_exhausted"), static_cast<int>(sink.trials.size()));
  EXPECT_TRUE(absl::StrContains(reports[0].first_failure, "resource_exhausted: out of host memory"))
      << reports[0].first_failure;
}

TEST(Sweep, AProblemTooLargeForTheDeviceIsRefusedBeforeAnythingRuns) {
  // A GPU with 1 MiB of memory: the problem's tensors alone need more.
  class SmallDevice : public HostBackend {
   public:
    DeviceInfo Describe() const override {
      DeviceInfo d = HostBackend::Describe();
      d.backend = "cuda";
      d.name = "test GPU";
      d.memory_bytes = int64_t{1} << 20;
      return d;
    }
  } backend;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(4096, 4096)};
  const absl::Status st = RunSweep(backend, problems, Quick(1), 1, sink).status();
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "q4096") && absl::StrContains(st.message(), "MiB of device memory") &&
              absl::StrContains(st.message(), "test GPU has 1.0 MiB"))
      << st;
  EXPECT_EQ(backend.runs, 0);
  EXPECT_TRUE(sink.recorded_asked.empty()) << "refused before the sink is asked anything";
}

TEST(Sweep, ActivityIsAnnouncedBeforeEachScreenAndEachSetOfRounds) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  SweepOptions o = Quick(3);
  o.final_rounds.rounds = 3;
  o.max_seconds_per_problem = 600;
  std::vector<SweepActivity> seen;
  o.activity = [&](const SweepActivity& a) { seen.push_back(a); };
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  ASSERT_TRUE(RunSweep(backend, problems, o, 1, sink).ok());
  int screens = 0, finals = 0;
  for (const SweepActivity& a : seen) {
    EXPECT_EQ(a.problem_count, 1);
    EXPECT_EQ(a.budget_seconds, 600);
    if (a.step == "screen") {
      ++screens;
      EXPECT_FALSE(a.config_key.empty());
      EXPECT_LT(a.configs_done, a.configs_in_space);
    }
    if (a.step == "final") ++finals;
  }
  int screened = 0;
  for (const Trial& t : sink.trials) screened += t.stage == TrialStage::kScreen;
  EXPECT_EQ(screens, screened);
  EXPECT_EQ(finals, 1);
}

TEST(Sweep, SinkFailureStopsTheSweepWithItsError) {
  HostBackend backend;
  MemorySink sink;
  sink.fail = true;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(2), 1, sink);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_EQ(backend.runs, 3) << "one trial (a verify run per input set + timing), then stop";
}

TEST(Sweep, EachFinishedProblemsBestConfigGoesToTheSinkBeforeItsProgress) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  MemorySink sink;
  std::vector<size_t> best_recorded_at_report;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(2), 1, sink, [&](const SweepProgress& p) {
    best_recorded_at_report.push_back(sink.best.size());
    ASSERT_FALSE(sink.best.empty());
    EXPECT_EQ(sink.best.back().problem_key, p.problem_key);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(sink.best.size(), 2u);
  ASSERT_EQ(r->best.size(), 2u);
  for (size_t i = 0; i < sink.best.size(); ++i) {
    EXPECT_EQ(sink.best[i].problem_key, problems[i].Key());
    EXPECT_EQ(sink.best[i].config_key, r->best[i].config_key);
    EXPECT_EQ(sink.best[i].run_id, 1);
  }
  EXPECT_EQ(best_recorded_at_report, (std::vector<size_t>{1, 2}));
}

TEST(Sweep, WithoutSelectBestNoBestConfigIsSelectedOrSentButEveryTrialIsRecorded) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  SweepOptions options = Quick(2);
  options.select_best = false;
  MemorySink sink;
  sink.fail_best = true;  // a RecordBestConfig call would stop the sweep
  std::vector<std::string> reported;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, options, 1, sink, [&](const SweepProgress& p) {
    reported.push_back(p.problem_key);
    EXPECT_FALSE(p.best.has_value());
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(sink.best.empty());
  EXPECT_TRUE(r->best.empty());
  EXPECT_EQ(r->problems_finished, 2);
  EXPECT_EQ(reported, (std::vector<std::string>{problems[0].Key(), problems[1].Key()}));
  MemorySink selecting;
  ASSERT_TRUE(RunSweep(backend, problems, Quick(2), 1, selecting).ok());
  EXPECT_EQ(sink.trials.size(), selecting.trials.size()) << "the same trials, only the selection is skipped";
}

TEST(Sweep, AProblemWithoutAnOkTrialSendsNoBestConfig) {
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  ASSERT_TRUE(RunSweep(backend, problems, Quick(1), 1, sink).ok());
  EXPECT_TRUE(sink.best.empty());
}

TEST(Sweep, BestConfigSinkFailureStopsTheSweepWithItsError) {
  HostBackend backend;
  MemorySink sink;
  sink.fail_best = true;
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  int reports = 0;
  absl::StatusOr<SweepResult> r =
      RunSweep(backend, problems, Quick(1), 1, sink, [&](const SweepProgress&) { ++reports; });
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(problems[0].Key()), std::string::npos) << r.status();
  EXPECT_EQ(reports, 0) << "a problem whose best config is not recorded is not reported";
  ASSERT_FALSE(sink.trials.empty()) << "the first problem's trials stay recorded";
  for (const Trial& t : sink.trials) EXPECT_EQ(t.problem_key, problems[0].Key()) << "the second never starts";
}

TEST(Sweep, AResumedSweepTakesTheRunsRecordedTrialsFromTheSinkAndMeasuresTheRest) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s + 10 * c.block_m; };
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(40, 40)};
  MemorySink full;
  ASSERT_TRUE(RunSweep(backend, problems, Quick(3), 7, full).ok());
  ASSERT_GE(full.trials.size(), 4u);

  // The sink holds the first half of run 7, and a whole other run that must not count.
  MemorySink half;
  const size_t kept = full.trials.size() / 2;
  for (size_t i = 0; i < kept; ++i) ASSERT_TRUE(half.RecordTrial(full.trials[i]).ok());
  ASSERT_TRUE(RunSweep(backend, problems, Quick(3), 8, half).ok());
  const size_t before = half.trials.size();
  std::vector<std::string> measured_now;
  half.after_record = [&](const Trial& t) { measured_now.push_back(t.trial_id); };
  half.recorded_asked.clear();

  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(3), 7, half);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(half.recorded_asked, (std::vector<int64_t>{7})) << "asked once, for its own run";
  EXPECT_EQ(r->trials_resumed, static_cast<int>(kept));
  EXPECT_EQ(r->trials_measured, static_cast<int>(full.trials.size() - kept));
  std::vector<std::string> rest;
  for (size_t i = kept; i < full.trials.size(); ++i) rest.push_back(full.trials[i].trial_id);
  EXPECT_EQ(measured_now, rest) << "only the trials the sink did not hold are measured";
  EXPECT_EQ(half.trials.size(), before + rest.size());
}

TEST(Sweep, ASinkThatCannotSayWhatIsRecordedStopsTheSweepBeforeItMeasures) {
  HostBackend backend;
  MemorySink sink;
  sink.fail_recorded = true;
  const std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  const absl::Status st = RunSweep(backend, problems, Quick(2), /*run_id=*/3, sink).status();
  EXPECT_TRUE(absl::IsUnavailable(st) && absl::StrContains(st.message(), "run 3")) << st;
  EXPECT_EQ(sink.recorded_asked, (std::vector<int64_t>{3}));
  EXPECT_EQ(backend.runs, 0) << "nothing measured";
  EXPECT_TRUE(sink.trials.empty() && sink.best.empty());
}

TEST(Sweep, UnsupportedConfigsAreRecordedButDoNotUseTheBudget) {
  HostBackend backend;
  backend.refuse = [](const KernelConfig& c) { return c.block_s == 16; };
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(40, 40)};
  SweepOptions o = Quick(3);
  o.strategy = SearchStrategy::kExhaustive;  // block_s 16 comes first in each variant
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok());
  int ok = 0, unsupported = 0;
  for (const Trial& t : sink.trials) {
    ok += t.outcome == TrialOutcome::kOk;
    unsupported += t.outcome == TrialOutcome::kUnsupported;
  }
  EXPECT_EQ(ok, 3 * 3);
  EXPECT_GT(unsupported, 0);
}

TEST(Sweep, FailingConfigsAreTrialsNotErrors) {
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, Quick(1), 1, sink);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(sink.trials.size(), 3u);
  for (const Trial& t : sink.trials) EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed);
  EXPECT_TRUE(r->best.empty());
  EXPECT_EQ(r->problems_finished, 1);
}

TEST(Sweep, TimeBudgetCapsEachProblem) {
  HostBackend backend;
  backend.fault = Fault::kSlow;  // ~50 ms per run, two runs per trial
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(64, 64)};
  SweepOptions o = Quick(0);  // exhaustive: 3 x 3 x 3 x 2 configs without the time cap
  o.max_seconds_per_problem = 0.6;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok());
  EXPECT_GE(sink.trials.size(), 3u) << "every variant gets a turn";
  EXPECT_LT(sink.trials.size(), 12u);
}

TEST(Sweep, PreparingAProblemsInputsDoesNotSpendItsBudget) {
  // Preparing takes twice the whole budget; the trials are fast. Were preparation counted,
  // each variant would get its one-trial minimum; the search gets its three quarters after.
  HostBackend backend;
  backend.first_allocation_delay = std::chrono::milliseconds(2000);
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(64, 64)};
  SweepOptions o = Quick(0);
  o.max_seconds_per_problem = 1.0;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(sink.trials.size(), 12u) << "the search had its budget after the inputs were made";
}

TEST(Sweep, RemainingEstimateIsCappedByTheTimeBudget) {
  HostBackend backend;
  MemorySink sink;
  // Growing problems: an uncapped per-FLOP estimate after the first would be far larger.
  std::vector<AttentionProblem> problems = {Tiny(16, 16), Tiny(128, 128), Tiny(256, 256)};
  SweepOptions o = Quick(1);
  o.max_seconds_per_problem = 0.05;
  std::vector<double> estimates;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink,
                                           [&](const SweepProgress& p) { estimates.push_back(p.estimated_remaining_seconds); });
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(estimates.size(), 3u);
  EXPECT_GT(estimates[0], 0);
  EXPECT_LE(estimates[0], 2 * 1.1 * 0.05 + 1e-9);
  EXPECT_LE(estimates[1], 1 * 1.1 * 0.05 + 1e-9);
  EXPECT_EQ(estimates[2], 0);
}

TEST(Sweep, BadInputIsAnErrorBeforeAnythingRuns) {
  HostBackend backend;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(20, 20), Tiny(20, 20)};
  problems[1].head_dim = 12;
  EXPECT_TRUE(absl::IsInvalidArgument(RunSweep(backend, problems, Quick(1), 1, sink).status()));
  EXPECT_EQ(backend.runs, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(RunSweep(backend, {}, Quick(1), 1, sink).status()));
  SweepOptions neg = Quick(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(RunSweep(backend, problems, neg, 1, sink).status()));
}


int CountStage(const std::vector<Trial>& trials, TrialStage stage) {
  return static_cast<int>(std::count_if(trials.begin(), trials.end(), [stage](const Trial& t) { return t.stage == stage; }));
}

TEST(SweepFinalRounds, InterleavedRoundsOverruleAMisleadingScreen) {
  // Each config's first timing block (its screen) is distorted: bs16 looks 30% faster than
  // it is, as a kernel does that runs first on a cool GPU. The rounds measure the truth:
  // bs64 is fastest.
  HostBackend backend;
  std::map<std::string, int> blocks;
  backend.latency_us = [&blocks](const KernelConfig& c) {
    const double truth = c.block_s == 64 ? 80.0 : 100.0;
    const bool screen = blocks[c.Key()]++ == 0;
    return screen && c.block_s == 16 ? 0.7 * truth : truth;
  };
  SweepOptions o = Quick(0);
  o.space.variants = {Variant::kFused};
  o.space.threads = {1};
  o.space.block_m = {16};
  o.final_rounds.rounds = 5;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(64, 64)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->best.size(), 1u);
  EXPECT_EQ(KernelConfig::FromKey(r->best[0].config_key)->block_s, 64) << r->best[0].config_key;
  const int finals = CountStage(sink.trials, TrialStage::kFinal);
  EXPECT_GE(finals, 3) << "at least the top 3 are re-measured";
  for (const Trial& t : sink.trials) {
    if (t.stage != TrialStage::kFinal) continue;
    EXPECT_EQ(t.samples_us.size(), 5u) << "one block median per round";
    EXPECT_EQ(t.blocks.size(), 5u);
    EXPECT_EQ(t.trial_id, TrialId(1, t.problem_key, t.config_key, 0, TrialStage::kFinal));
  }
}

TEST(SweepFinalRounds, BaselinesRunInTheSameRoundsAndGiveThePerRoundSpeedup) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) {
    return c.variant == Variant::kFused ? 100.0 : c.variant == Variant::kPartial ? 150.0 : 250.0;
  };
  SweepOptions o = Quick(0);
  o.space.threads = {1};
  o.space.block_m = {16};
  o.space.block_s = {16, 32};
  o.final_rounds.rounds = 3;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(32, 32)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->best.size(), 1u);
  std::set<Variant> in_rounds;
  for (const Trial& t : sink.trials) {
    if (t.stage == TrialStage::kFinal) in_rounds.insert(KernelConfig::FromKey(t.config_key)->variant);
  }
  EXPECT_EQ(in_rounds.size(), 3u) << "fused, partial and materialized leaders side by side";
  EXPECT_NEAR(r->best[0].speedup_vs_materialized, 2.5, 0.05);
  EXPECT_NEAR(r->best[0].speedup_vs_partial, 1.5, 0.05);
}

TEST(SweepFinalRounds, ABaselineFarSlowerThanTheFusedLeaderStaysOutOfTheRounds) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) {
    return c.variant == Variant::kFused ? 100.0 : c.variant == Variant::kPartial ? 150.0 : 1000.0;
  };
  SweepOptions o = Quick(0);
  o.space.threads = {1};
  o.space.block_m = {16};
  o.space.block_s = {16, 32};
  o.final_rounds.rounds = 3;
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(32, 32)};
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const Trial& t : sink.trials) {
    if (t.stage == TrialStage::kFinal) {
      EXPECT_NE(KernelConfig::FromKey(t.config_key)->variant, Variant::kMaterialized) << t.config_key;
    }
  }
  ASSERT_EQ(r->best.size(), 1u);
  EXPECT_NEAR(r->best[0].speedup_vs_materialized, 10.0, 0.5) << "from the medians";
}

TEST(SweepFinalRounds, ResumeReusesAWholeRoundSetAndRemeasuresAPartOne) {
  HostBackend backend;
  backend.latency_us = [](const KernelConfig& c) { return 1000.0 / c.block_s; };
  SweepOptions o = Quick(0);
  o.space.variants = {Variant::kFused};
  o.space.threads = {1};
  o.final_rounds.rounds = 3;
  std::vector<AttentionProblem> problems = {Tiny(40, 40)};
  MemorySink full;
  ASSERT_TRUE(RunSweep(backend, problems, o, 1, full).ok());

  // All of it on disk: nothing is measured again.
  MemorySink again;
  for (const Trial& t : full.trials) ASSERT_TRUE(again.RecordTrial(t).ok());
  absl::StatusOr<SweepResult> b = RunSweep(backend, problems, o, 1, again);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->trials_measured, 0);

  // A crash while the final set was being recorded: one of its trials is missing. The set
  // is measured again, whole, under attempt 1, and the pick comes from that set.
  std::vector<Trial> on_disk;
  bool dropped = false;
  for (const Trial& t : full.trials) {
    if (!dropped && t.stage == TrialStage::kFinal) {
      dropped = true;
      continue;
    }
    on_disk.push_back(t);
  }
  ASSERT_TRUE(dropped);
  MemorySink resumed;
  for (const Trial& t : on_disk) ASSERT_TRUE(resumed.RecordTrial(t).ok());
  absl::StatusOr<SweepResult> c = RunSweep(backend, problems, o, 1, resumed);
  ASSERT_TRUE(c.ok()) << c.status();
  const int finals = CountStage(full.trials, TrialStage::kFinal);
  EXPECT_EQ(c->trials_measured, finals);
  int attempt1 = 0;
  for (const Trial& t : resumed.trials) attempt1 += t.stage == TrialStage::kFinal && t.attempt == 1;
  EXPECT_EQ(attempt1, finals);
  ASSERT_EQ(c->best.size(), 1u);
  EXPECT_EQ(c->best[0].config_key, b->best[0].config_key);
}

TEST(SweepHalving, HalvesTheSurvivorsWithDoublingRounds) {
  HostBackend backend;
  // Distinct latencies: the ranking is unambiguous.
  backend.latency_us = [](const KernelConfig& c) { return 10.0 * c.block_m + c.block_s + c.threads; };
  SweepOptions o = Quick(0);
  o.strategy = SearchStrategy::kSuccessiveHalving;
  o.space.variants = {Variant::kFused};
  o.final_rounds.rounds = 3;
  o.final_rounds.max_candidates = 3;
  std::vector<AttentionProblem> problems = {Tiny(128, 128)};
  MemorySink sink;
  absl::StatusOr<SweepResult> r = RunSweep(backend, problems, o, 1, sink);
  ASSERT_TRUE(r.ok()) << r.status();
  const int screened = CountStage(sink.trials, TrialStage::kScreen);
  ASSERT_GT(screened, 6);
  std::map<int, int> per_rung;
  for (const Trial& t : sink.trials) {
    if (t.stage != TrialStage::kHalving) continue;
    ++per_rung[t.attempt / kHalvingAttemptStride];
    EXPECT_EQ(t.samples_us.size(), size_t{1} << (t.attempt / kHalvingAttemptStride)) << "2, 4, 8 ... rounds";
  }
  ASSERT_FALSE(per_rung.empty());
  EXPECT_EQ(per_rung[1], std::max(3, (screened + 1) / 2));
  for (auto it = std::next(per_rung.begin()); it != per_rung.end(); ++it) {
    EXPECT_LE(it->second, std::max(3, (std::prev(it)->second + 1) / 2));
  }
  // The screen used a quarter of the samples (at least 2).
  for (const Trial& t : sink.trials) {
    if (t.stage == TrialStage::kScreen && t.outcome == TrialOutcome::kOk) EXPECT_EQ(t.samples_us.size(), 2u);
  }
  ASSERT_EQ(r->best.size(), 1u);
  const KernelConfig best = *KernelConfig::FromKey(r->best[0].config_key);
  EXPECT_EQ(best.block_m, 16);
  EXPECT_EQ(best.block_s, 16);
  EXPECT_EQ(best.threads, 1);
}

TEST(SweepInputs, EveryConfigOfAProblemRunsOnTheSameUploadedInputs) {
  HostBackend backend;
  SweepOptions o = Quick(0);
  o.space.variants = {Variant::kFused};
  MemorySink sink;
  std::vector<AttentionProblem> problems = {Tiny(40, 40), Tiny(24, 24)};
  ASSERT_TRUE(RunSweep(backend, problems, o, 1, sink).ok());
  ASSERT_GT(sink.trials.size(), 4u);
  // Two input sets (random, adversarial) x three tensors per problem, whatever the number
  // of configs.
  EXPECT_EQ(backend.uploads, 2 * 2 * 3);
}

TEST(SweepInputs, AKernelThatMishandlesMaskedKeysFailsOnTheAdversarialInputs) {
  HostBackend backend;
  backend.fault = Fault::kInfKeysAsZero;
  SweepOptions o = Quick(2);
  o.space.variants = {Variant::kFused};
  MemorySink sink;
  // Causal: the first query rows see only masked keys, so their output must be zeros.
  std::vector<AttentionProblem> problems = {Tiny(64, 64, true)};
  ASSERT_TRUE(RunSweep(backend, problems, o, 1, sink).ok());
  ASSERT_FALSE(sink.trials.empty());
  for (const Trial& t : sink.trials) {
    EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed);
    EXPECT_NE(t.message.find("adversarial"), std::string::npos) << t.message;
  }
  // The same kernel passes the random inputs alone.
  o.runner.adversarial_check = false;
  MemorySink lenient;
  ASSERT_TRUE(RunSweep(backend, problems, o, 2, lenient).ok());
  for (const Trial& t : lenient.trials) EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
}

}  // namespace
}  // namespace fusetune
