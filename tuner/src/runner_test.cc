#include "fusetune/tuner/runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/reference.h"
#include "gtest/gtest.h"
#include "testing/host_backend.h"

namespace fusetune {
namespace {

using testing::Fault;
using testing::HostBackend;

AttentionProblem Small(DType dtype = DType::kFp32) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = 19;
  p.kv_len = 23;
  p.head_dim = 32;
  p.causal = true;
  p.dtype = dtype;
  return p;
}

// Larger than full_check_max_elements below, so rows are sampled.
AttentionProblem Large() {
  AttentionProblem p;
  p.batch = 3;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.q_len = 70;
  p.kv_len = 70;
  p.head_dim = 32;
  return p;
}

KernelConfig Fused() {
  KernelConfig c;
  c.block_m = 16;
  c.block_s = 16;
  return c;
}

TEST(Runner, CorrectBackendIsOkAndTimed) {
  HostBackend backend;
  Runner runner(backend);
  Trial t = runner.Measure(Small(), Fused(), /*run_id=*/7, /*attempt=*/0);
  EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
  EXPECT_EQ(t.run_id, 7);
  EXPECT_EQ(t.trial_id, TrialId(7, Small().Key(), Fused().Key(), 0));
  EXPECT_EQ(t.checked_elements, Small().OElements());  // small: every element checked
  EXPECT_LT(t.max_rel_error, ToleranceFor(Precision::kFp32, DType::kFp32));
  EXPECT_EQ(static_cast<int>(t.samples_us.size()), runner.options().timing.repeats);
  EXPECT_LE(t.p10_us, t.median_us);
  EXPECT_LE(t.median_us, t.p90_us);
  EXPECT_GT(t.flops, 0);
  EXPECT_GT(t.created_unix_ms, 0);
}

TEST(Runner, WrongValueIsVerifyFailed) {
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  Trial t = Runner(backend).Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed);
  EXPECT_NE(t.message.find("exceeds tolerance"), std::string::npos) << t.message;
  EXPECT_GT(t.max_rel_error, ToleranceFor(Precision::kFp32, DType::kFp32));
  EXPECT_TRUE(t.samples_us.empty());
}

TEST(Runner, NanOutputIsVerifyFailed) {
  HostBackend backend;
  backend.fault = Fault::kNan;
  Trial t = Runner(backend).Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed);
  EXPECT_NE(t.message.find("NaN"), std::string::npos) << t.message;
}

TEST(Runner, UnwrittenElementIsCaughtByPoisonEvenWhenRowsAreSampled) {
  HostBackend backend;
  backend.fault = Fault::kUnwritten;
  RunnerOptions options;
  options.full_check_max_elements = 16;  // force sampling
  options.sampled_rows = 4;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    AttentionProblem p = Large();
    p.dtype = dtype;
    Trial t = Runner(backend, options).Measure(p, Fused(), 1);
    EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed) << DTypeName(dtype);
    EXPECT_NE(t.message.find("NaN"), std::string::npos) << t.message;
  }
}

TEST(Runner, SampledCheckCoversFirstAndLastRowOfEachSequence) {
  // The wrong element is in the last row of the last sequence: a 6-row sample of a
  // 210-row problem finds it only if the last rows are always included.
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  RunnerOptions options;
  options.full_check_max_elements = 16;
  options.sampled_rows = 6;
  Trial t = Runner(backend, options).Measure(Large(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed) << t.message;
  EXPECT_EQ(t.checked_elements, 6 * Large().q_heads * Large().head_dim);
}

TEST(Runner, SixteenBitStorageIsOkWithinItsTolerance) {
  HostBackend backend;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    KernelConfig c = Fused();
    c.precision = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
    Trial t = Runner(backend).Measure(Small(dtype), c, 1);
    EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
    EXPECT_GT(t.max_abs_error, 0) << "rounding to 16 bits must show some error";
  }
}

TEST(Runner, CanImplementRefusalIsUnsupportedAndNothingRuns) {
  HostBackend backend;
  backend.fault = Fault::kCannotImplement;
  Trial t = Runner(backend).Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kUnsupported);
  EXPECT_NE(t.message.find("cannot implement"), std::string::npos);
  EXPECT_EQ(backend.runs, 0);
}

TEST(Runner, InvalidProblemIsUnsupportedNotACrash) {
  HostBackend backend;
  AttentionProblem p = Small();
  p.kv_heads = 3;  // does not divide q_heads
  Trial t = Runner(backend).Measure(p, Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kUnsupported);
  EXPECT_NE(t.message.find("kv_heads"), std::string::npos) << t.message;
  EXPECT_EQ(backend.runs, 0);
}

TEST(Runner, RunErrorAndThrowAreLaunchFailed) {
  for (Fault f : {Fault::kRunError, Fault::kThrows}) {
    HostBackend backend;
    backend.fault = f;
    Trial t = Runner(backend).Measure(Small(), Fused(), 1);
    EXPECT_EQ(t.outcome, TrialOutcome::kLaunchFailed);
    EXPECT_FALSE(t.message.empty());
  }
}

TEST(Runner, RunOverTheTimeLimitIsTimedOut) {
  HostBackend backend;
  backend.fault = Fault::kSlow;
  RunnerOptions options;
  options.trial_time_limit_seconds = 0.01;
  Trial t = Runner(backend, options).Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kTimedOut);
  EXPECT_TRUE(t.samples_us.empty());
}

TEST(Runner, EveryConfigOfAProblemSeesTheSameInputsAndTheSeedChangesThem) {
  // The fault backend adds an error proportional to one output value; the measured error
  // therefore follows the inputs: equal across configs and attempts of one problem (made
  // once, uploaded once), different under another seed, equal again in a fresh Runner.
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  Runner runner(backend);
  const Trial a = runner.Measure(Small(), Fused(), 1, 0);
  KernelConfig other = Fused();
  other.block_s = 32;
  const Trial b = runner.Measure(Small(), other, 1, 1);
  EXPECT_EQ(a.max_abs_error, b.max_abs_error);
  EXPECT_EQ(backend.uploads, 6) << "two input sets of three tensors, once";
  RunnerOptions reseeded;
  reseeded.seed = 2;
  const Trial c = Runner(backend, reseeded).Measure(Small(), Fused(), 1, 0);
  EXPECT_NE(a.max_abs_error, c.max_abs_error);
  const Trial d = Runner(backend).Measure(Small(), Fused(), 1, 0);
  EXPECT_EQ(a.max_abs_error, d.max_abs_error) << "reproducible";
}

TEST(Runner, AnotherProblemGetsItsOwnInputs) {
  HostBackend backend;
  Runner runner(backend);
  AttentionProblem wider = Small();
  wider.kv_len += 8;
  EXPECT_EQ(runner.Measure(Small(), Fused(), 1).outcome, TrialOutcome::kOk);
  EXPECT_EQ(runner.Measure(wider, Fused(), 1).outcome, TrialOutcome::kOk);
  EXPECT_EQ(runner.Measure(Small(), Fused(), 1).outcome, TrialOutcome::kOk);
  EXPECT_EQ(backend.uploads, 18);
}

TEST(Runner, PrepareInputsMakesThemOnceAndTheFirstTrialReusesThem) {
  // The sweep prepares a problem before its time budget starts; the trials after must not
  // make (and upload) the inputs again.
  HostBackend backend;
  Runner runner(backend);
  ASSERT_TRUE(runner.PrepareInputs(Small()).ok());
  EXPECT_EQ(backend.uploads, 6) << "two input sets of three tensors";
  ASSERT_TRUE(runner.PrepareInputs(Small()).ok());
  EXPECT_EQ(runner.Measure(Small(), Fused(), 1).outcome, TrialOutcome::kOk);
  EXPECT_EQ(backend.uploads, 6) << "prepared once, reused by the trial";
}

TEST(Runner, PrepareInputsOfAnInvalidProblemIsAnErrorNotACrash) {
  HostBackend backend;
  Runner runner(backend);
  AttentionProblem bad = Small();
  bad.head_dim = 0;
  EXPECT_FALSE(runner.PrepareInputs(bad).ok());
  EXPECT_EQ(runner.Measure(bad, Fused(), 1).outcome, TrialOutcome::kUnsupported);
}

TEST(Runner, MeasureRoundsGivesOneBlockPerRoundInAFreshOrderEachRound) {
  HostBackend backend;
  std::vector<std::string> order;
  backend.latency_us = [&order](const KernelConfig& c) {
    order.push_back(c.Key());
    return 10.0 * c.block_s;
  };
  Runner runner(backend);
  std::vector<KernelConfig> configs;
  for (int bs : {16, 32, 64, 128}) {
    KernelConfig c = Fused();
    c.block_s = bs;
    configs.push_back(c);
  }
  TimingOptions block{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = true};
  std::vector<Trial> trials =
      runner.MeasureRounds(Small(), configs, 6, block, /*order_seed=*/9, 1, TrialStage::kFinal, 0);
  ASSERT_EQ(trials.size(), 4u);
  for (size_t i = 0; i < trials.size(); ++i) {
    EXPECT_EQ(trials[i].outcome, TrialOutcome::kOk) << trials[i].message;
    EXPECT_EQ(trials[i].config_key, configs[i].Key());
    EXPECT_EQ(trials[i].stage, TrialStage::kFinal);
    ASSERT_EQ(trials[i].samples_us.size(), 6u);
    EXPECT_EQ(trials[i].blocks.size(), 6u);
    EXPECT_EQ(trials[i].blocks[0].samples, 3);
  }
  ASSERT_EQ(order.size(), 24u);
  std::set<std::vector<std::string>> orders;
  std::set<std::string> firsts;
  for (size_t r = 0; r < 6; ++r) {
    std::vector<std::string> round(order.begin() + 4 * r, order.begin() + 4 * (r + 1));
    EXPECT_EQ(std::set<std::string>(round.begin(), round.end()).size(), 4u) << "each config once per round";
    orders.insert(round);
    firsts.insert(round.front());
  }
  EXPECT_GT(orders.size(), 1u) << "the order changes between rounds";
  EXPECT_GT(firsts.size(), 1u) << "no config always goes first";
}

TEST(Runner, BlocksSayWhetherTheBackendTimedThemThroughAGraph) {
  HostBackend backend;
  backend.takes_graph_timing = true;
  Runner runner(backend);
  const std::vector<KernelConfig> configs = {Fused()};
  for (bool graph : {false, true}) {
    TimingOptions block{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = true, .graph = graph};
    std::vector<Trial> trials = runner.MeasureRounds(Small(), configs, 2, block, 9, 1, TrialStage::kFinal, 0);
    ASSERT_EQ(trials.size(), 1u);
    ASSERT_EQ(trials[0].outcome, TrialOutcome::kOk) << trials[0].message;
    ASSERT_EQ(trials[0].blocks.size(), 2u);
    for (const SampleBlock& b : trials[0].blocks) EXPECT_EQ(b.graphed, graph);
  }
  // A backend that cannot ignores the option: its blocks are not graphed.
  HostBackend plain;
  Runner plain_runner(plain);
  TimingOptions block{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = true, .graph = true};
  std::vector<Trial> trials = plain_runner.MeasureRounds(Small(), configs, 2, block, 9, 1, TrialStage::kFinal, 0);
  ASSERT_EQ(trials.size(), 1u);
  ASSERT_EQ(trials[0].blocks.size(), 2u);
  for (const SampleBlock& b : trials[0].blocks) EXPECT_FALSE(b.graphed);
}

TEST(Runner, AStopDuringARoundDropsThatRoundFromEveryConfig) {
  HostBackend backend;
  std::atomic<bool> stop{false};
  // Each block is one Run: the 8th is the 2nd config of the 3rd round.
  backend.on_run = [&](int run) {
    if (run == 8) stop = true;
  };
  Runner runner(backend);
  runner.SetStopToken(StopToken(&stop));
  std::vector<KernelConfig> configs;
  for (int bs : {16, 32, 64}) {
    KernelConfig c = Fused();
    c.block_s = bs;
    configs.push_back(c);
  }
  TimingOptions block{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = true};
  std::vector<Trial> trials = runner.MeasureRounds(Small(), configs, 5, block, 9, 1, TrialStage::kFinal, 0);
  ASSERT_EQ(trials.size(), 3u);
  for (const Trial& t : trials) {
    EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
    EXPECT_EQ(t.samples_us.size(), 2u) << "the two whole rounds, paired by index";
    EXPECT_EQ(t.blocks.size(), 2u);
  }
  EXPECT_EQ(backend.runs, 8) << "nothing started after the stop";
}

TEST(Runner, AStopBeforeTheFirstRoundEndsIsInterruptedNotAFailure) {
  HostBackend backend;
  Runner runner(backend);
  runner.SetStopToken(StopToken(nullptr, StopToken::Clock::now()));  // a budget already spent
  std::vector<KernelConfig> configs = {Fused()};
  TimingOptions block{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = true};
  std::vector<Trial> trials = runner.MeasureRounds(Small(), configs, 3, block, 9, 1, TrialStage::kFinal, 0);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].outcome, TrialOutcome::kInterrupted);
  EXPECT_NE(trials[0].message.find("time budget"), std::string::npos) << trials[0].message;
  EXPECT_TRUE(trials[0].samples_us.empty());
}

TEST(Runner, AStoppedLaunchIsInterruptedAndOutOfMemoryIsResourceExhausted) {
  HostBackend backend;
  std::atomic<bool> stop{true};
  Runner runner(backend);
  runner.SetStopToken(StopToken(&stop));
  Trial t = runner.Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kInterrupted) << t.message;
  EXPECT_NE(t.message.find("signal"), std::string::npos) << t.message;

  stop = false;
  backend.fault = Fault::kOutOfMemory;
  t = runner.Measure(Small(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kResourceExhausted) << t.message;
  EXPECT_NE(t.message.find("out of host memory"), std::string::npos) << t.message;
}

TEST(MeasurementMemory, CountsBothInputSetsTheOutputAndTheReferenceRows) {
  AttentionProblem p = Small();
  const int64_t q = p.QElements(), kv = p.KVElements(), o = p.OElements();
  RunnerOptions options;
  const MemoryNeed need = MeasurementMemory(p, options);
  EXPECT_EQ(need.device_bytes, 2 * (q + 2 * kv) * 4 + o * 4);
  EXPECT_GE(need.host_bytes, 4 * (q + 2 * kv) + o * 4 + 2 * o * 8) << "floats, output copy, fp64 reference";
  options.adversarial_check = false;
  EXPECT_EQ(MeasurementMemory(p, options).device_bytes, (q + 2 * kv) * 4 + o * 4);
}

TEST(CheckMemoryFits, RefusesWhatTheDeviceCannotHoldAndNamesTheBytes) {
  DeviceInfo gpu;
  gpu.backend = "cuda";
  gpu.name = "small GPU";
  gpu.memory_bytes = 4096;
  const absl::Status st = CheckMemoryFits(Small(), gpu);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_NE(st.message().find("small GPU has 4.0 KiB"), std::string::npos) << st;
  gpu.memory_bytes = int64_t{1} << 30;
  EXPECT_TRUE(CheckMemoryFits(Small(), gpu).ok());
  DeviceInfo cpu;
  cpu.backend = "cpu";
  EXPECT_TRUE(CheckMemoryFits(Small(), cpu).ok());
  EXPECT_GT(HostMemoryAvailableBytes(), int64_t{1} << 20);
}

TEST(Runner, MeasureRoundsKeepsAFailingConfigsFirstErrorAndMeasuresTheOthers) {
  HostBackend backend;
  backend.refuse = [](const KernelConfig& c) { return c.block_s == 32; };
  Runner runner(backend);
  KernelConfig good = Fused(), bad = Fused();
  bad.block_s = 32;
  std::vector<KernelConfig> configs = {good, bad};
  TimingOptions block{.warmup = 0, .repeats = 2, .max_seconds = 1, .flush_l2 = true};
  std::vector<Trial> trials = runner.MeasureRounds(Small(), configs, 3, block, 1, 1, TrialStage::kFinal, 0);
  EXPECT_EQ(trials[0].outcome, TrialOutcome::kOk);
  EXPECT_EQ(trials[0].samples_us.size(), 3u);
  EXPECT_EQ(trials[1].outcome, TrialOutcome::kUnsupported);
  EXPECT_NE(trials[1].message.find("round 1"), std::string::npos) << trials[1].message;
  EXPECT_TRUE(trials[1].samples_us.empty());
}

// Decode against a paged cache: 3 new tokens per sequence over cache lengths that are not
// multiples of the page, one sequence longer than the others, one empty cache.
AttentionProblem PagedDecode() {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 4;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.q_len = 3;
  p.kv_len = 45;
  p.kv_valid_lens = {13, 45, 0, 22};
  p.head_dim = 32;
  p.causal = true;
  p.page_block_size = 4;
  return p;
}

TEST(Runner, PagedDecodeIsOkAgainstTheReferenceGatheredThroughItsTable) {
  HostBackend backend;
  Runner runner(backend);
  const Trial t = runner.Measure(PagedDecode(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
  EXPECT_EQ(t.checked_elements, PagedDecode().OElements());
  ASSERT_EQ(backend.block_tables.size(), 3u) << "random, adversarial, timed";
  EXPECT_NE(backend.block_tables[0], backend.block_tables[1]) << "each input set has its own table";
  EXPECT_EQ(backend.block_tables[0], backend.block_tables[2]) << "the random set is the timed one";
  EXPECT_EQ(backend.uploads, 8) << "two sets of three tensors and a table";
}

TEST(Runner, KernelThatIgnoresTheBlockTableIsVerifyFailed) {
  HostBackend backend;
  backend.fault = Fault::kIgnoresBlockTable;
  const Trial t = Runner(backend).Measure(PagedDecode(), Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kVerifyFailed) << t.message;
}

TEST(Runner, PagedPrefillOverASharedPrefixAndAnUndersizedPoolAreOk) {
  AttentionProblem prefix = PagedDecode();
  prefix.kind = ProblemKind::kPrefill;
  prefix.q_len = 9;
  prefix.kv_valid_lens = {17, 45, 20, 22};
  prefix.shared_prefix_pages = 4;
  AttentionProblem small_pool = PagedDecode();
  small_pool.kv_pool_pages = 5;  // fewer than the 22 pages needed: pages are reused
  AttentionProblem page_one = PagedDecode();
  page_one.page_block_size = 1;
  for (const AttentionProblem& p : {prefix, small_pool, page_one}) {
    ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
    HostBackend backend;
    const Trial t = Runner(backend).Measure(p, Fused(), 1);
    EXPECT_EQ(t.outcome, TrialOutcome::kOk) << p.Key() << ": " << t.message;
    ASSERT_FALSE(backend.block_tables.empty());
    EXPECT_TRUE(ValidateBlockTable(p, backend.block_tables[0].data(), p.BlockTableEntries()).ok());
  }
}

TEST(Runner, MeasureRoundsPassesTheBlockTable) {
  HostBackend backend;
  Runner runner(backend);
  const std::vector<KernelConfig> configs = {Fused()};
  const std::vector<Trial> trials =
      runner.MeasureRounds(PagedDecode(), configs, 2, TimingOptions{}, 1, 1, TrialStage::kFinal, 0);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].outcome, TrialOutcome::kOk) << trials[0].message;
}

// The CPU backend's paged kernels under the Runner's inputs: every config it offers passes on
// the random and adversarial sets of a paged decode (shuffled pages, an empty cache, lengths
// off the page), of page size 1 and of a prefill over a shared prefix with a small pool.
TEST(Runner, CpuBackendPassesEveryPagedCandidate) {
  auto backend = CreateCpuBackend();
  AttentionProblem prefix = PagedDecode();
  prefix.kind = ProblemKind::kPrefill;
  prefix.q_len = 9;
  prefix.kv_valid_lens = {17, 45, 20, 22};
  prefix.shared_prefix_pages = 4;
  prefix.kv_pool_pages = 9;
  AttentionProblem page_one = PagedDecode();
  page_one.page_block_size = 1;
  for (const AttentionProblem& p : {PagedDecode(), page_one, prefix}) {
    const std::vector<KernelConfig> configs = backend->CandidateConfigs(p);
    ASSERT_FALSE(configs.empty()) << p.Key();
    Runner runner(*backend);
    for (const KernelConfig& c : configs) {
      const Trial t = runner.Measure(p, c, 1);
      EXPECT_EQ(t.outcome, TrialOutcome::kOk) << p.Key() << " " << c.Key() << ": " << t.message;
    }
  }
}

// K/V stored as e4m3: the runner quantises its inputs per head, hands the backend the bytes and
// the scales, checks against the reference of the quantised values and records the error
// against the reference of the unquantised ones beside it.
TEST(Runner, E4m3CacheIsCheckedOnItsQuantisedValuesAndRecordsWhatTheFormatCosts) {
  auto backend = CreateCpuBackend();
  AttentionProblem paged = PagedDecode();
  paged.dtype = DType::kBf16;
  paged.kv_storage = KvStorage::kE4m3;
  AttentionProblem contiguous = Small(DType::kFp16);
  contiguous.kv_storage = KvStorage::kE4m3;
  for (const AttentionProblem& p : {paged, contiguous}) {
    ASSERT_TRUE(p.Validate().ok()) << p.Validate();
    const std::vector<KernelConfig> configs = backend->CandidateConfigs(p);
    ASSERT_FALSE(configs.empty()) << p.Key();
    Runner runner(*backend);
    ASSERT_TRUE(runner.PrepareInputs(p).ok());
    for (const KernelConfig& c : configs) {
      const Trial t = runner.Measure(p, c, 1);
      ASSERT_EQ(t.outcome, TrialOutcome::kOk) << p.Key() << " " << c.Key() << ": " << t.message;
      EXPECT_LE(t.max_rel_error, ToleranceFor(c.precision, p.dtype)) << c.Key();
      // e4m3 keeps 4 significant bits: the output moves by about 2^-5 of its range, far more
      // than the kernel's own error at fp32, and far less than the output itself.
      EXPECT_GT(t.unquantised_rel_error, 1e-3) << c.Key();
      EXPECT_LT(t.unquantised_rel_error, 0.2) << c.Key();
      if (c.precision == Precision::kFp32) EXPECT_GT(t.unquantised_rel_error, 10 * t.max_rel_error) << c.Key();
    }
  }
  // Not quantised: 0.
  AttentionProblem plain = paged;
  plain.kv_storage = KvStorage::kDType;
  const Trial t = Runner(*backend).Measure(plain, Fused(), 1);
  EXPECT_EQ(t.outcome, TrialOutcome::kOk) << t.message;
  EXPECT_EQ(t.unquantised_rel_error, 0.0);
}

TEST(Runner, E4m3KernelThatIgnoresTheScalesIsVerifyFailed) {
  AttentionProblem p = PagedDecode();
  p.dtype = DType::kFp16;
  p.kv_storage = KvStorage::kE4m3;
  HostBackend backend;
  const Trial ok = Runner(backend).Measure(p, Fused(), 1);
  EXPECT_EQ(ok.outcome, TrialOutcome::kOk) << ok.message;
  EXPECT_EQ(backend.uploads, 12) << "two sets of Q, K and V bytes, their two scales and a table";
  EXPECT_GT(ok.unquantised_rel_error, ok.max_rel_error);
  backend.fault = Fault::kIgnoresKvScales;
  const Trial ignored = Runner(backend).Measure(p, Fused(), 1);
  EXPECT_EQ(ignored.outcome, TrialOutcome::kVerifyFailed) << ignored.message;
}

TEST(MeasurementMemory, AnE4m3CacheTakesOneByteAnElementOnTheDeviceAndItsScales) {
  AttentionProblem p = PagedDecode();
  p.dtype = DType::kFp16;
  p.kv_storage = KvStorage::kE4m3;
  const int64_t q = p.QElements(), kv = p.KVElements(), o = p.OElements();
  const int64_t table = p.BlockTableEntries() * 4, scales = 2 * p.kv_heads * 4;
  RunnerOptions options;
  EXPECT_EQ(MeasurementMemory(p, options).device_bytes, 2 * (q * 2 + 2 * kv + table + scales) + o * 2);
  AttentionProblem plain = p;
  plain.kv_storage = KvStorage::kDType;
  // The unquantised K/V and their reference rows stay on the host beside the quantised ones.
  EXPECT_GT(MeasurementMemory(p, options).host_bytes, MeasurementMemory(plain, options).host_bytes + 8 * kv);
}

TEST(GenerateBlockTable, ShufflesPagesSharesThePrefixAndGivesEverySequenceItsOwnPages) {
  AttentionProblem p = PagedDecode();
  p.kv_valid_lens = {13, 45, 8, 22};
  p.shared_prefix_pages = 2;
  const std::vector<int32_t> table = GenerateBlockTable(p, 7);
  ASSERT_EQ(static_cast<int64_t>(table.size()), p.BlockTableEntries());
  ASSERT_TRUE(ValidateBlockTable(p, table.data(), p.BlockTableEntries()).ok());
  const int width = p.BlockTableWidth();
  std::set<int32_t> own;
  int64_t own_count = 0;
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.PagesOfSequence(b); ++i) {
      const int32_t page = table[static_cast<size_t>(b * width + i)];
      if (i < p.shared_prefix_pages) {
        EXPECT_EQ(page, table[static_cast<size_t>(i)]) << "prefix page " << i << " of sequence " << b;
      } else {
        own.insert(page);
        ++own_count;
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(own.size()), own_count) << "no page shared outside the prefix";
  EXPECT_EQ(own_count + p.shared_prefix_pages, p.PagesNeeded());
  EXPECT_EQ(own.count(table[0]) + own.count(table[1]), 0u);
  // Shuffled: not the identity layout, and another seed gives another table.
  bool in_order = true;
  for (int i = 0; i + 1 < p.PagesOfSequence(1); ++i) in_order &= table[width + i] + 1 == table[width + i + 1];
  EXPECT_FALSE(in_order);
  EXPECT_NE(table, GenerateBlockTable(p, 8));
  EXPECT_EQ(table, GenerateBlockTable(p, 7));
}

TEST(GenerateBlockTable, LargerPoolLeavesPagesUnusedSmallerPoolReusesThem) {
  AttentionProblem large = PagedDecode();
  large.kv_pool_pages = 100;
  const std::vector<int32_t> table = GenerateBlockTable(large, 3);
  ASSERT_TRUE(ValidateBlockTable(large, table.data(), large.BlockTableEntries()).ok());
  std::set<int32_t> used;
  for (int b = 0; b < large.batch; ++b) {
    for (int i = 0; i < large.PagesOfSequence(b); ++i) {
      used.insert(table[static_cast<size_t>(b * large.BlockTableWidth() + i)]);
    }
  }
  EXPECT_EQ(static_cast<int64_t>(used.size()), large.PagesNeeded());
  EXPECT_GT(*used.rbegin(), large.PagesNeeded()) << "drawn from the whole pool";

  AttentionProblem small = PagedDecode();
  small.kv_pool_pages = 3;
  const std::vector<int32_t> reused = GenerateBlockTable(small, 3);
  ASSERT_TRUE(ValidateBlockTable(small, reused.data(), small.BlockTableEntries()).ok());
  std::set<int32_t> pages(reused.begin(), reused.end());
  EXPECT_EQ(pages.size(), 3u);
  EXPECT_TRUE(GenerateBlockTable(Small(), 3).empty()) << "contiguous";
}

TEST(Tolerance, LooserForNarrowerPrecisionAndStorage) {
  EXPECT_LT(ToleranceFor(Precision::kFp32, DType::kFp32), ToleranceFor(Precision::kTf32, DType::kFp32));
  EXPECT_LT(ToleranceFor(Precision::kTf32, DType::kFp32), ToleranceFor(Precision::kFp16, DType::kFp16));
  EXPECT_LT(ToleranceFor(Precision::kFp16, DType::kFp16), ToleranceFor(Precision::kBf16, DType::kBf16));
  EXPECT_GE(ToleranceFor(Precision::kFp32, DType::kBf16), 1.6e-2);
}

// Large-magnitude inputs: Q, K, V uniform in [-8, 8] (logits up to ~200 at the default scale,
// 20x the bound of the runner's own inputs), d = 64, fp32 storage.
struct LargeInputs {
  AttentionProblem problem;
  std::vector<float> q, k, v;
};
LargeInputs LargeMagnitudeInputs() {
  LargeInputs in;
  in.problem.batch = 1;
  in.problem.q_heads = 2;
  in.problem.kv_heads = 2;
  in.problem.q_len = 256;
  in.problem.kv_len = 256;
  in.problem.head_dim = 64;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (auto* t : {&in.q, &in.k, &in.v}) {
    t->resize(static_cast<size_t>(in.problem.QElements()));
    for (float& x : *t) x = dist(rng);
  }
  return in;
}

// The CPU backend's fused kernel with tf32 products: it rounds every operand of both products
// to tf32 exactly as the tensor cores do, with fp32 accumulation (a correct TF32 kernel).
std::vector<float> CpuTf32Output(const LargeInputs& in) {
  auto backend = CreateCpuBackend();
  KernelConfig c = Fused();
  c.precision = Precision::kTf32;
  EXPECT_TRUE(backend->CanImplement(in.problem, c).ok()) << backend->CanImplement(in.problem, c);
  const size_t bytes = in.q.size() * sizeof(float);
  auto dq = backend->Allocate(bytes), dk = backend->Allocate(bytes), dv = backend->Allocate(bytes),
       d_o = backend->Allocate(bytes);
  EXPECT_TRUE(dq.ok() && dk.ok() && dv.ok() && d_o.ok());
  EXPECT_TRUE(backend->CopyToDevice(dq->data(), in.q.data(), bytes).ok());
  EXPECT_TRUE(backend->CopyToDevice(dk->data(), in.k.data(), bytes).ok());
  EXPECT_TRUE(backend->CopyToDevice(dv->data(), in.v.data(), bytes).ok());
  EXPECT_TRUE(backend->Run(in.problem, c, {dq->data(), dk->data(), dv->data(), d_o->data()}).ok());
  std::vector<float> out(in.q.size());
  EXPECT_TRUE(backend->CopyToHost(out.data(), d_o->data(), bytes).ok());
  return out;
}

// The runner's metric: max |out - ref| / max |ref|.
double RelativeError(const std::vector<float>& out, const std::vector<double>& ref) {
  double worst = 0, max_ref = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  return worst / max_ref;
}

double LargeInputsTf32Tolerance(const LargeInputs& in) {
  return ToleranceFor(Precision::kTf32, DType::kFp32, LogitBound(in.problem, in.q, in.k),
                      in.problem.head_dim);
}

TEST(Tolerance, ExactTf32EmulationOnLargeMagnitudeInputsPasses) {
  const LargeInputs in = LargeMagnitudeInputs();
  auto ref = ReferenceAttention(in.problem, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const double error = RelativeError(CpuTf32Output(in), *ref);
  const double tolerance = LargeInputsTf32Tolerance(in);
  std::printf("[ info ] tf32 emulation error %.3g, fixed tolerance %.3g, derived %.3g (logit bound %.3g)\n",
              error, ToleranceFor(Precision::kTf32, DType::kFp32), tolerance,
              LogitBound(in.problem, in.q, in.k));
  // The fixed tolerance would fail this correct kernel; the derived one must not.
  EXPECT_GT(error, ToleranceFor(Precision::kTf32, DType::kFp32));
  EXPECT_LE(error, tolerance);
}

TEST(Tolerance, DefectsOnLargeMagnitudeInputsStillFail) {
  const LargeInputs in = LargeMagnitudeInputs();
  auto ref = ReferenceAttention(in.problem, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<float> good = CpuTf32Output(in);
  const double tolerance = LargeInputsTf32Tolerance(in);
  const size_t row = static_cast<size_t>(in.problem.head_dim);
  const size_t heads = static_cast<size_t>(in.problem.q_heads);

  // One wrong row: token 100, head 1 holds token 101's output.
  std::vector<float> wrong_row = good;
  std::copy_n(good.begin() + (101 * heads + 1) * row, row, wrong_row.begin() + (100 * heads + 1) * row);
  const double wrong_row_error = RelativeError(wrong_row, *ref);

  // A dropped key tile: the output of a kernel that skipped the last 64 keys.
  AttentionProblem short_keys = in.problem;
  short_keys.kv_valid_lens = {in.problem.kv_len - 64};
  auto dropped = ReferenceAttention(short_keys, in.q, in.k, in.v);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  const std::vector<float> dropped_tile(dropped->begin(), dropped->end());
  const double dropped_error = RelativeError(dropped_tile, *ref);

  std::printf("[ info ] tolerance %.3g: one wrong row %.3g, a dropped key tile %.3g\n", tolerance,
              wrong_row_error, dropped_error);
  EXPECT_GT(wrong_row_error, tolerance);
  EXPECT_GT(dropped_error, tolerance);
}

TEST(Tolerance, RunnerInputsKeepTheFixedTolerance) {
  // Inputs in [-1, 1] at the default scale never exceed the calibrated logit bound.
  AttentionProblem p = Small();
  std::vector<float> q(static_cast<size_t>(p.QElements()), 1.0f), k(static_cast<size_t>(p.KVElements()), -0.5f);
  EXPECT_LE(LogitBound(p, q, k), std::sqrt(static_cast<double>(p.head_dim)) * (1 + 1e-6));
  for (Precision precision : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    EXPECT_DOUBLE_EQ(ToleranceFor(precision, DType::kFp32, LogitBound(p, q, k), p.head_dim),
                     ToleranceFor(precision, DType::kFp32));
  }
}

TEST(Quantile, InterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(Quantile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({10, 0}, 0.1), 1);
  EXPECT_DOUBLE_EQ(Quantile({}, 0.5), 0);
}

}  // namespace
}  // namespace fusetune
