// The job queue's state machine: queued -> leased -> done | failed, leased -> queued on
// expiry or release; one lease per job at a time, even across connections.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "fusetune/base/time.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "test_util.h"
#include "testing/store_backends.h"

namespace fusetune {
namespace {

using db_test::OpenOrDie;
using db_test::ScopedTempDir;

// Every TEST_P below runs on SQLite and on PostgreSQL (testing/store_backends.h).
class StoreJobs : public db_test::StoreBackendTest {};
FUSETUNE_STORE_BACKENDS(StoreJobs);

constexpr char kCpuClass[] = "cpu/Test-CPU/x86_64-avx2";
constexpr char kGpuClass[] = "cuda/NVIDIA-H200/sm90";
constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kLeaseMs = 30'000;

Job TestJob(const std::string& device_class = kCpuClass) {
  Job j;
  j.device_class = device_class;
  j.commit = "abc123";
  j.problem_keys = {"prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32",
                    "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32"};
  j.spec_json = R"({"problems":[],"budget":{"max_trials":8}})";
  j.max_trials = 8;
  j.max_seconds = 12.5;
  return j;
}

TEST_P(StoreJobs, EnqueuedJobRoundTripsAndStartsQueued) {
  auto store = OpenOrDie(Location());
  Job in = TestJob();
  in.state = JobState::kDone;  // ignored: a new job is always queued
  in.leased_by = "someone";
  in.attempts = 5;
  in.created_unix_ms = kT0;
  absl::StatusOr<int64_t> id = store->EnqueueJob(in);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<Job> out = store->GetJob(*id);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->job_id, *id);
  EXPECT_EQ(out->state, JobState::kQueued);
  EXPECT_EQ(out->device_class, kCpuClass);
  EXPECT_EQ(out->commit, "abc123");
  EXPECT_EQ(out->problem_keys, in.problem_keys);
  EXPECT_EQ(out->spec_json, in.spec_json);
  EXPECT_EQ(out->max_trials, 8);
  EXPECT_EQ(out->max_seconds, 12.5);
  EXPECT_EQ(out->leased_by, "");
  EXPECT_EQ(out->lease_expiry_unix_ms, 0);
  EXPECT_EQ(out->attempts, 0);
  EXPECT_EQ(out->run_id, 0);
  EXPECT_EQ(out->error, "");
  EXPECT_EQ(out->created_unix_ms, kT0);
  EXPECT_EQ(out->finished_unix_ms, 0);
  EXPECT_EQ(store->GetJob(*id + 1).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreJobs, LeaseTakesOldestQueuedJobOfTheDeviceClass) {
  auto store = OpenOrDie(Location());
  const int64_t gpu_job = *store->EnqueueJob(TestJob(kGpuClass));
  const int64_t first = *store->EnqueueJob(TestJob());
  const int64_t second = *store->EnqueueJob(TestJob());

  absl::StatusOr<Job> leased = store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs);
  ASSERT_TRUE(leased.ok()) << leased.status();
  EXPECT_EQ(leased->job_id, first);
  EXPECT_EQ(leased->state, JobState::kLeased);
  EXPECT_EQ(leased->leased_by, "w1");
  EXPECT_EQ(leased->lease_expiry_unix_ms, kT0 + kLeaseMs);
  EXPECT_EQ(leased->attempts, 1);
  EXPECT_EQ(store->LeaseJob("w2", kCpuClass, kT0, kLeaseMs)->job_id, second);
  EXPECT_EQ(store->LeaseJob("w3", kCpuClass, kT0, kLeaseMs).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->LeaseJob("g1", kGpuClass, kT0, kLeaseMs)->job_id, gpu_job);
  EXPECT_EQ(store->LeaseJob("w1", "hip/none/gfx90a", kT0, kLeaseMs).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreJobs, ExpiredLeaseReturnsJobToQueueAndAttemptsCountLeases) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());

  // Before expiry nobody else gets it.
  EXPECT_EQ(store->LeaseJob("w2", kCpuClass, kT0 + kLeaseMs - 1, kLeaseMs).status().code(),
            absl::StatusCode::kNotFound);
  // Expiry alone puts it back in the queue and counts nothing.
  absl::StatusOr<int> expired = store->ExpireLeases(kT0 + kLeaseMs);
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, 1);
  absl::StatusOr<Job> queued = store->GetJob(id);
  EXPECT_EQ(queued->state, JobState::kQueued);
  EXPECT_EQ(queued->leased_by, "");
  EXPECT_EQ(queued->attempts, 1);
  EXPECT_EQ(*store->ExpireLeases(kT0 + kLeaseMs), 0);

  absl::StatusOr<Job> again = store->LeaseJob("w2", kCpuClass, kT0 + kLeaseMs + 5, kLeaseMs);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->job_id, id);
  EXPECT_EQ(again->leased_by, "w2");
  EXPECT_EQ(again->attempts, 2);

  // The old holder lost it: renew, complete and release are all refused.
  EXPECT_EQ(store->RenewLease(id, "w1", kNoLeaseToken, kT0 + kLeaseMs + 6, kLeaseMs).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->CompleteJob(id, "w1", kNoLeaseToken, true, "", kT0 + kLeaseMs + 6).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->ReleaseJob(id, "w1", kNoLeaseToken).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->GetJob(id)->leased_by, "w2");
}

TEST_P(StoreJobs, LeaseJobReclaimsExpiredLeasesItself) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  absl::StatusOr<Job> stolen = store->LeaseJob("w2", kCpuClass, kT0 + 2 * kLeaseMs, kLeaseMs);
  ASSERT_TRUE(stolen.ok()) << stolen.status();
  EXPECT_EQ(stolen->job_id, id);
  EXPECT_EQ(stolen->attempts, 2);
}

TEST_P(StoreJobs, ExpiryIsCommittedEvenWhenNothingMatchesTheLeaser) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob(kGpuClass));
  ASSERT_TRUE(store->LeaseJob("g1", kGpuClass, kT0, kLeaseMs).ok());
  // A CPU worker finds nothing, but its call still returned the GPU job to the queue.
  EXPECT_EQ(store->LeaseJob("c1", kCpuClass, kT0 + 2 * kLeaseMs, kLeaseMs).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->GetJob(id)->state, JobState::kQueued);
}

TEST_P(StoreJobs, RenewExtendsOnlyTheHoldersLease) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  ASSERT_TRUE(store->RenewLease(id, "w1", kNoLeaseToken, kT0 + 20'000, kLeaseMs).ok());
  EXPECT_EQ(store->GetJob(id)->lease_expiry_unix_ms, kT0 + 20'000 + kLeaseMs);
  // The renewed lease outlives the original expiry.
  EXPECT_EQ(*store->ExpireLeases(kT0 + kLeaseMs + 1), 0);
  EXPECT_EQ(store->GetJob(id)->state, JobState::kLeased);
  EXPECT_EQ(store->RenewLease(id, "w2", kNoLeaseToken, kT0 + 20'000, kLeaseMs).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->RenewLease(id + 7, "w1", kNoLeaseToken, kT0, kLeaseMs).code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreJobs, CompletesExactlyOnce) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  // Not leased yet: nobody can complete it.
  EXPECT_EQ(store->CompleteJob(id, "w1", kNoLeaseToken, true, "", kT0).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  EXPECT_EQ(store->CompleteJob(id, "w2", kNoLeaseToken, true, "", kT0 + 1).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->CompleteJob(id, "w1", kNoLeaseToken, true, "", kT0 + 100).ok());
  absl::StatusOr<Job> done = store->GetJob(id);
  EXPECT_EQ(done->state, JobState::kDone);
  EXPECT_EQ(done->finished_unix_ms, kT0 + 100);

  // A retry by the same worker: OK, nothing changes (not even a flipped success flag).
  ASSERT_TRUE(store->CompleteJob(id, "w1", kNoLeaseToken, false, "late retry", kT0 + 500).ok());
  done = store->GetJob(id);
  EXPECT_EQ(done->state, JobState::kDone);
  EXPECT_EQ(done->finished_unix_ms, kT0 + 100);
  EXPECT_EQ(done->error, "");
  // Anyone else: refused. A done job is never leased again or expired back.
  EXPECT_EQ(store->CompleteJob(id, "w2", kNoLeaseToken, true, "", kT0 + 600).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->ReleaseJob(id, "w1", kNoLeaseToken).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->RenewLease(id, "w1", kNoLeaseToken, kT0, kLeaseMs).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store->ExpireLeases(kT0 + 10 * kLeaseMs), 0);
  EXPECT_EQ(store->LeaseJob("w3", kCpuClass, kT0 + 10 * kLeaseMs, kLeaseMs).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->CompleteJob(id + 1, "w1", kNoLeaseToken, true, "", kT0).code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreJobs, FailedCompletionKeepsTheError) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  ASSERT_TRUE(store->CompleteJob(id, "w1", kNoLeaseToken, false, "backend unavailable", kT0 + 5).ok());
  absl::StatusOr<Job> failed = store->GetJob(id);
  EXPECT_EQ(failed->state, JobState::kFailed);
  EXPECT_EQ(failed->error, "backend unavailable");
  EXPECT_EQ(failed->finished_unix_ms, kT0 + 5);
  EXPECT_TRUE(store->CompleteJob(id, "w1", kNoLeaseToken, false, "backend unavailable", kT0 + 9).ok());
  EXPECT_EQ(store->GetJob(id)->finished_unix_ms, kT0 + 5);
}

TEST_P(StoreJobs, ReleaseReturnsJobToQueueForTheNextWorker) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  EXPECT_EQ(store->ReleaseJob(id, "w1", kNoLeaseToken).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  EXPECT_EQ(store->ReleaseJob(id, "w2", kNoLeaseToken).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->ReleaseJob(id, "w1", kNoLeaseToken).ok());
  absl::StatusOr<Job> queued = store->GetJob(id);
  EXPECT_EQ(queued->state, JobState::kQueued);
  EXPECT_EQ(queued->leased_by, "");
  EXPECT_EQ(queued->lease_expiry_unix_ms, 0);
  EXPECT_EQ(queued->attempts, 1);
  absl::StatusOr<Job> next = store->LeaseJob("w2", kCpuClass, kT0 + 1, kLeaseMs);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->job_id, id);
  EXPECT_EQ(next->attempts, 2);
  EXPECT_EQ(store->ReleaseJob(id + 3, "w2", kNoLeaseToken).code(), absl::StatusCode::kNotFound);
}

// What a replica polls to learn that another replica changed the queue or the best configs:
// every such change shows in the stamp, seen through a second connection.
TEST_P(StoreJobs, TheSharedStateStampChangesWithEveryQueueAndBestConfigChange) {
  auto writer = OpenOrDie(Location());
  auto reader = OpenOrDie(Location());
  auto stamp = [&] {
    absl::StatusOr<SharedStateStamp> s = reader->ReadSharedStateStamp();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.value_or(SharedStateStamp{});
  };
  SharedStateStamp before = stamp();
  EXPECT_EQ(before.best_configs, 0);
  EXPECT_EQ(before.queued_jobs, 0);
  auto expect_queue_changed = [&](const char* what) {
    const SharedStateStamp now = stamp();
    EXPECT_FALSE(now.SameQueue(before)) << what;
    EXPECT_TRUE(now.SameBestConfigs(before)) << what;
    before = now;
  };
  const int64_t id = *writer->EnqueueJob(TestJob());
  expect_queue_changed("submit");
  EXPECT_EQ(before.queued_jobs, 1);
  EXPECT_EQ(before.newest_open_job, id);
  absl::StatusOr<Job> leased = writer->LeaseJob("w1", kCpuClass, kT0, kLeaseMs);
  ASSERT_TRUE(leased.ok()) << leased.status();
  expect_queue_changed("lease");
  ASSERT_TRUE(writer->ReleaseJob(id, "w1", leased->lease_token).ok());
  expect_queue_changed("release");
  leased = writer->LeaseJob("w2", kCpuClass, kT0, kLeaseMs);
  ASSERT_TRUE(leased.ok()) << leased.status();
  expect_queue_changed("lease again");
  ASSERT_EQ(*writer->ExpireLeases(kT0 + kLeaseMs + 1), 1);
  expect_queue_changed("expiry");
  leased = writer->LeaseJob("w3", kCpuClass, kT0 + kLeaseMs + 2, kLeaseMs);
  ASSERT_TRUE(leased.ok()) << leased.status();
  expect_queue_changed("lease after expiry");
  ASSERT_TRUE(writer->CompleteJob(id, "w3", leased->lease_token, true, "", kT0 + kLeaseMs + 3).ok());
  expect_queue_changed("completion");
  EXPECT_TRUE(stamp().SameQueue(before)) << "nothing changed";

  const int64_t run = *writer->BeginRun(db_test::TestRun());
  BestConfig best;
  best.device_class = kCpuClass;
  best.problem_key = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
  best.config_key = "fused/bm64/bs64/t1/fp32/st1";
  best.median_us = 10;
  best.run_id = run;
  best.commit = "abc123";
  best.updated_unix_ms = kT0;
  ASSERT_TRUE(writer->UpsertBestConfig(best).ok());
  SharedStateStamp now = stamp();
  EXPECT_FALSE(now.SameBestConfigs(before));
  EXPECT_TRUE(now.SameQueue(before));
  EXPECT_EQ(now.best_configs, 1);
  before = now;
  best.config_key = "fused/bm32/bs64/t1/fp32/st1";  // replaced by a later tune: same row count
  best.updated_unix_ms = kT0 + 5;
  ASSERT_TRUE(writer->UpsertBestConfig(best).ok());
  now = stamp();
  EXPECT_FALSE(now.SameBestConfigs(before));
  EXPECT_EQ(now.best_configs, 1);
}

TEST_P(StoreJobs, SetJobRunLinksAnExistingRun) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  ASSERT_TRUE(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs).ok());
  const int64_t run = *store->BeginRun(db_test::TestRun());
  ASSERT_TRUE(store->SetJobRun(id, run).ok());
  EXPECT_EQ(store->GetJob(id)->run_id, run);
  EXPECT_EQ(store->SetJobRun(id, run + 10).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->SetJobRun(id + 10, run).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->GetJob(id)->run_id, run);
}

TEST_P(StoreJobs, ListAndCountByState) {
  auto store = OpenOrDie(Location());
  const int64_t a = *store->EnqueueJob(TestJob());
  const int64_t b = *store->EnqueueJob(TestJob());
  const int64_t c = *store->EnqueueJob(TestJob());
  (void)c;
  ASSERT_EQ(store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs)->job_id, a);
  ASSERT_EQ(store->LeaseJob("w2", kCpuClass, kT0, kLeaseMs)->job_id, b);
  ASSERT_TRUE(store->CompleteJob(b, "w2", kNoLeaseToken, false, "boom", kT0 + 1).ok());

  absl::StatusOr<std::vector<std::pair<JobState, int64_t>>> counts = store->CountJobsByState();
  ASSERT_TRUE(counts.ok()) << counts.status();
  ASSERT_EQ(counts->size(), 4u);
  for (const auto& [state, n] : *counts) {
    switch (state) {
      case JobState::kQueued:
        EXPECT_EQ(n, 1) << "queued";
        break;
      case JobState::kLeased:
        EXPECT_EQ(n, 1) << "leased";
        break;
      case JobState::kDone:
        EXPECT_EQ(n, 0) << "done";
        break;
      case JobState::kFailed:
        EXPECT_EQ(n, 1) << "failed";
        break;
    }
  }
  absl::StatusOr<std::vector<Job>> all = store->ListJobs();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_GT((*all)[0].job_id, (*all)[2].job_id);  // newest first
  absl::StatusOr<std::vector<Job>> leased = store->ListJobs(JobState::kLeased);
  ASSERT_EQ(leased->size(), 1u);
  EXPECT_EQ((*leased)[0].job_id, a);
  EXPECT_EQ(store->ListJobs(std::nullopt, 2)->size(), 2u);
  EXPECT_EQ(JobStateName(JobState::kFailed), "failed");
}

// Two connections (as two server processes would have) race for one job many times: each
// round exactly one lease succeeds.
TEST_P(StoreJobs, TwoWorkersRacingForOneJobOnlyOneWins) {
  const std::string path = Location();
  auto a = OpenOrDie(path);
  auto b = OpenOrDie(path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kRounds = 25;
  for (int round = 0; round < kRounds; ++round) {
    const int64_t id = *a->EnqueueJob(TestJob());
    std::atomic<bool> go{false};
    absl::StatusOr<Job> got_a = absl::UnknownError("unset");
    absl::StatusOr<Job> got_b = absl::UnknownError("unset");
    std::thread ta([&] {
      while (!go.load()) {
      }
      got_a = a->LeaseJob("wa", kCpuClass, kT0, kLeaseMs);
    });
    std::thread tb([&] {
      while (!go.load()) {
      }
      got_b = b->LeaseJob("wb", kCpuClass, kT0, kLeaseMs);
    });
    go = true;
    ta.join();
    tb.join();
    ASSERT_NE(got_a.ok(), got_b.ok())
        << "round " << round << ": " << got_a.status() << " / " << got_b.status();
    const absl::StatusOr<Job>& loser = got_a.ok() ? got_b : got_a;
    const absl::StatusOr<Job>& winner = got_a.ok() ? got_a : got_b;
    EXPECT_EQ(loser.status().code(), absl::StatusCode::kNotFound) << loser.status();
    EXPECT_EQ(winner->job_id, id);
    EXPECT_EQ(winner->attempts, 1);
    ASSERT_TRUE(a->CompleteJob(id, winner->leased_by, kNoLeaseToken, true, "", kT0 + 1).ok());
  }
}

// Many jobs, four leasing threads over two connections, each completing what it leased: every
// job leased exactly once.
TEST_P(StoreJobs, ConcurrentLeasersNeverShareAJob) {
  const std::string path = Location();
  auto a = OpenOrDie(path);
  auto b = OpenOrDie(path);
  constexpr int kJobs = 60;
  for (int i = 0; i < kJobs; ++i) ASSERT_TRUE(a->EnqueueJob(TestJob()).ok());
  std::vector<std::vector<int64_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Store* s = (t % 2 == 0) ? a.get() : b.get();
      const std::string worker = "w" + std::to_string(t);
      while (true) {
        absl::StatusOr<Job> j = s->LeaseJob(worker, kCpuClass, kT0, kLeaseMs);
        if (!j.ok()) {
          EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound) << j.status();
          return;
        }
        got[t].push_back(j->job_id);
        // As a device does: finish the job before asking for the next.
        if (absl::Status done = s->CompleteJob(j->job_id, worker, kNoLeaseToken, true, "", kT0); !done.ok()) {
          ADD_FAILURE() << done;
          return;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::vector<int64_t> all;
  for (const auto& v : got) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a job was leased twice";
}

TEST_P(StoreJobs, EachLeaseGetsALargerTokenThanEveryEarlierOne) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  EXPECT_EQ(store->GetJob(id)->lease_token, 0);
  absl::StatusOr<Job> first = store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->lease_token, 0);
  ASSERT_TRUE(store->ReleaseJob(id, "w1", first->lease_token).ok());
  absl::StatusOr<Job> second = store->LeaseJob("w1", kCpuClass, kT0 + 1, kLeaseMs);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->lease_token, first->lease_token);
  // The same worker's earlier delivery is fenced off too: it is not the current lease.
  absl::Status stale = store->CompleteJob(id, "w1", first->lease_token, true, "", kT0 + 2);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_TRUE(store->CompleteJob(id, "w1", second->lease_token, true, "", kT0 + 2).ok());
}

TEST_P(StoreJobs, AStaleHolderIsRefusedOnceTheExpiredJobIsLeasedAgain) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  const Job old_lease = *store->LeaseJob("w1", kCpuClass, kT0, kLeaseMs);
  // w1 stalls past its expiry; w2 leases the job again.
  const Job new_lease = *store->LeaseJob("w2", kCpuClass, kT0 + 2 * kLeaseMs, kLeaseMs);
  ASSERT_GT(new_lease.lease_token, old_lease.lease_token);

  const int64_t later = kT0 + 2 * kLeaseMs + 10;
  for (const absl::Status& refused :
       {store->RenewLease(id, "w1", old_lease.lease_token, later, kLeaseMs),
        store->CompleteJob(id, "w1", old_lease.lease_token, true, "", later),
        store->ReleaseJob(id, "w1", old_lease.lease_token)}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(std::string(refused.message()).find("stale"), std::string::npos) << refused;
  }
  // The current holder is untouched by the stale one's attempts.
  EXPECT_EQ(store->GetJob(id)->leased_by, "w2");
  EXPECT_TRUE(store->RenewLease(id, "w2", new_lease.lease_token, later, kLeaseMs).ok());
  EXPECT_TRUE(store->CompleteJob(id, "w2", new_lease.lease_token, true, "", later).ok());
  // Its retry is answered OK; the stale token still is not.
  EXPECT_TRUE(store->CompleteJob(id, "w2", new_lease.lease_token, true, "", later + 1).ok());
  EXPECT_EQ(store->CompleteJob(id, "w2", old_lease.lease_token, true, "", later + 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->GetJob(id)->state, JobState::kDone);
}

TEST_P(StoreJobs, TheDatabaseClockSetsExpiryWhenAskedFor) {
  auto store = OpenOrDie(Location());
  const int64_t id = *store->EnqueueJob(TestJob());
  const int64_t before = NowUnixMs();
  absl::StatusOr<Job> leased = store->LeaseJob("w1", kCpuClass, kDatabaseClock, kLeaseMs);
  ASSERT_TRUE(leased.ok()) << leased.status();
  // The database runs on this host here: its clock is this host's, give or take a minute
  // (no timing assumption: only that both clocks tell roughly the same time).
  EXPECT_GT(leased->lease_expiry_unix_ms, before + kLeaseMs - 60'000);
  EXPECT_LT(leased->lease_expiry_unix_ms, before + kLeaseMs + 60'000);
  // Not expired by the database's clock now: nothing is reclaimed.
  EXPECT_EQ(*store->ExpireLeases(kDatabaseClock), 0);
  EXPECT_TRUE(store->RenewLease(id, "w1", leased->lease_token, kDatabaseClock, kLeaseMs).ok());
}

TEST_P(StoreJobs, BadInputIsInvalidArgument) {
  auto store = OpenOrDie(Location());
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  Job no_class = TestJob("");
  EXPECT_EQ(store->EnqueueJob(no_class).status().code(), kInvalid);
  Job no_problems = TestJob();
  no_problems.problem_keys.clear();
  EXPECT_EQ(store->EnqueueJob(no_problems).status().code(), kInvalid);
  Job empty_problem = TestJob();
  empty_problem.problem_keys.push_back("");
  EXPECT_EQ(store->EnqueueJob(empty_problem).status().code(), kInvalid);
  Job negative_trials = TestJob();
  negative_trials.max_trials = -1;
  EXPECT_EQ(store->EnqueueJob(negative_trials).status().code(), kInvalid);
  Job nan_seconds = TestJob();
  nan_seconds.max_seconds = std::nan("");
  EXPECT_EQ(store->EnqueueJob(nan_seconds).status().code(), kInvalid);
  Job negative_seconds = TestJob();
  negative_seconds.max_seconds = -2;
  EXPECT_EQ(store->EnqueueJob(negative_seconds).status().code(), kInvalid);
  Job bad_utf8 = TestJob();
  bad_utf8.problem_keys = {"prefill/\xff\xfe"};
  EXPECT_EQ(store->EnqueueJob(bad_utf8).status().code(), kInvalid);
  EXPECT_TRUE(store->ListJobs()->empty());

  EXPECT_EQ(store->GetJob(0).status().code(), kInvalid);
  EXPECT_EQ(store->GetJob(-4).status().code(), kInvalid);
  EXPECT_EQ(store->ListJobs(std::nullopt, 0).status().code(), kInvalid);
  EXPECT_EQ(store->LeaseJob("", kCpuClass, kT0, kLeaseMs).status().code(), kInvalid);
  EXPECT_EQ(store->LeaseJob("w", "", kT0, kLeaseMs).status().code(), kInvalid);
  EXPECT_EQ(store->LeaseJob("w", kCpuClass, -1, kLeaseMs).status().code(), kInvalid);
  EXPECT_EQ(store->LeaseJob("w", kCpuClass, kT0, 0).status().code(), kInvalid);
  EXPECT_EQ(store->LeaseJob("w", kCpuClass, kT0, -5).status().code(), kInvalid);
  EXPECT_EQ(store->RenewLease(-1, "w", kNoLeaseToken, kT0, kLeaseMs).code(), kInvalid);
  EXPECT_EQ(store->RenewLease(1, "", kNoLeaseToken, kT0, kLeaseMs).code(), kInvalid);
  EXPECT_EQ(store->RenewLease(1, "w", kNoLeaseToken, kT0, 0).code(), kInvalid);
  EXPECT_EQ(store->SetJobRun(0, 1).code(), kInvalid);
  EXPECT_EQ(store->SetJobRun(1, -1).code(), kInvalid);
  EXPECT_EQ(store->CompleteJob(-1, "w", kNoLeaseToken, true, "", kT0).code(), kInvalid);
  EXPECT_EQ(store->CompleteJob(1, "", kNoLeaseToken, true, "", kT0).code(), kInvalid);
  EXPECT_EQ(store->CompleteJob(1, "w", kNoLeaseToken, true, "", -1).code(), kInvalid);
  EXPECT_EQ(store->ReleaseJob(0, "w", kNoLeaseToken).code(), kInvalid);
  EXPECT_EQ(store->ReleaseJob(1, "", kNoLeaseToken).code(), kInvalid);
  EXPECT_EQ(store->ExpireLeases(-1).status().code(), kInvalid);
}

}  // namespace
}  // namespace fusetune
