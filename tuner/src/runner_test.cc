#include "fusetune/tuner/runner.h"

#include <cmath>

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

TEST(Runner, InputsDifferBetweenTrialsButAreReproducible) {
  // The fault backend adds an error proportional to one output value; the measured error
  // therefore follows the inputs: equal for the same (config, attempt), different otherwise.
  HostBackend backend;
  backend.fault = Fault::kWrongValue;
  Runner runner(backend);
  const Trial a = runner.Measure(Small(), Fused(), 1, 0);
  const Trial b = runner.Measure(Small(), Fused(), 1, 0);
  const Trial c = runner.Measure(Small(), Fused(), 1, 1);
  EXPECT_EQ(a.max_abs_error, b.max_abs_error);
  EXPECT_NE(a.max_abs_error, c.max_abs_error);
}

TEST(Tolerance, LooserForNarrowerPrecisionAndStorage) {
  EXPECT_LT(ToleranceFor(Precision::kFp32, DType::kFp32), ToleranceFor(Precision::kTf32, DType::kFp32));
  EXPECT_LT(ToleranceFor(Precision::kTf32, DType::kFp32), ToleranceFor(Precision::kFp16, DType::kFp16));
  EXPECT_LT(ToleranceFor(Precision::kFp16, DType::kFp16), ToleranceFor(Precision::kBf16, DType::kBf16));
  EXPECT_GE(ToleranceFor(Precision::kFp32, DType::kBf16), 1.6e-2);
}

TEST(Quantile, InterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(Quantile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(Quantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Quantile({10, 0}, 0.1), 1);
  EXPECT_DOUBLE_EQ(Quantile({}, 0.5), 0);
}

}  // namespace
}  // namespace fusetune
