#include "fusetune/worker/worker_metrics.h"

#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(WorkerMetrics, EveryCounterExistsAtZeroBeforeAnyJob) {
  const std::string text = RenderWorkerMetrics(WorkerStats{}, {"host-d0"}, "cpu");
  for (const char* series :
       {"fusetune_worker_jobs_total{outcome=\"completed\"} 0", "fusetune_worker_jobs_total{outcome=\"lost\"} 0",
        "fusetune_worker_trials_total{stage=\"uploaded\"} 0", "fusetune_worker_device_failures_total 0"}) {
    EXPECT_NE(text.find(series), std::string::npos) << series << "\n" << text;
  }
  EXPECT_NE(text.find("# TYPE fusetune_worker_jobs_total counter"), std::string::npos) << text;
}

TEST(WorkerMetrics, SeriesFollowTheStats) {
  WorkerStats s;
  s.jobs_completed = 3;
  s.jobs_released = 1;
  s.trials_recorded = 40;
  s.trials_uploaded = 38;
  s.device_failures = 2;
  s.devices = 2;
  const std::string text = RenderWorkerMetrics(s, {"h-d0", "h-d1"}, "cuda");
  EXPECT_NE(text.find("fusetune_worker_jobs_total{outcome=\"completed\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_worker_jobs_total{outcome=\"released\"} 1"), std::string::npos);
  EXPECT_NE(text.find("fusetune_worker_trials_total{stage=\"recorded\"} 40"), std::string::npos);
  EXPECT_NE(text.find("fusetune_worker_trials_total{stage=\"uploaded\"} 38"), std::string::npos);
  EXPECT_NE(text.find("fusetune_worker_device_failures_total 2"), std::string::npos);
  EXPECT_NE(text.find("fusetune_worker_devices 2"), std::string::npos);
  EXPECT_NE(text.find("fusetune_worker_device_info{backend=\"cuda\",worker_id=\"h-d1\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace fusetune
