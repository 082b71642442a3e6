// Durability and concurrency of the store across connections and processes: concurrent
// writers never see SQLITE_BUSY, and a writer killed with SIGKILL loses no committed trial.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace fusetune {
namespace {

using db_test::OpenOrDie;
using db_test::RawQuery;
using db_test::ScopedTempDir;
using db_test::TestRun;
using db_test::TestTrial;

constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q512/k512/d64/causal0/fp32";

// Two Store instances (two connections) on one file, two writer threads each, plus a
// reader: every call succeeds (the busy timeout absorbs lock waits) and nothing is lost.
TEST(StoreConcurrency, TwoConnectionsWriteConcurrentlyWithoutBusyErrors) {
  ScopedTempDir dir;
  const std::string path = dir.File("concurrent.db");
  auto a = OpenOrDie(path);
  auto b = OpenOrDie(path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const int64_t run = *a->BeginRun(TestRun());
  constexpr int kThreads = 4;
  constexpr int kTrialsPerThread = 100;
  std::atomic<int> failures{0};
  std::atomic<bool> writers_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store* s = t % 2 == 0 ? a.get() : b.get();
      for (int i = 0; i < kTrialsPerThread; ++i) {
        const std::string config =
            "fused/bm64/bs32/w" + std::to_string(t) + "/fp32/st" + std::to_string(i);
        absl::Status st = s->RecordTrial(TestTrial(run, kProblem, config));
        if (!st.ok()) {
          ADD_FAILURE() << st;
          ++failures;
        }
        if (i % 10 == 0) {
          BestConfig best;
          best.device_class = "cpu/Test-CPU/x86_64-avx2";
          best.problem_key = kProblem;
          best.config_key = config;
          best.median_us = 10 + i;
          best.run_id = run;
          st = s->UpsertBestConfig(best);
          if (!st.ok()) {
            ADD_FAILURE() << st;
            ++failures;
          }
          Job job;
          job.device_class = "cpu/Test-CPU/x86_64-avx2";
          job.problem_keys = {kProblem};
          absl::StatusOr<int64_t> id = s->EnqueueJob(job);
          if (!id.ok()) {
            ADD_FAILURE() << id.status();
            ++failures;
          }
        }
      }
    });
  }
  std::thread reader([&] {
    while (!writers_done.load()) {
      absl::StatusOr<int64_t> n = b->CountTrials(run);
      if (!n.ok()) {
        ADD_FAILURE() << n.status();
        ++failures;
      }
      absl::StatusOr<std::vector<BestConfig>> best = a->ListBestConfigs();
      if (!best.ok()) {
        ADD_FAILURE() << best.status();
        ++failures;
      }
    }
  });
  for (std::thread& th : threads) th.join();
  writers_done = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*a->CountTrials(run), kThreads * kTrialsPerThread);
  EXPECT_EQ(*b->CountTrials(run), kThreads * kTrialsPerThread);
  EXPECT_EQ(b->ListJobs()->size(), static_cast<size_t>(kThreads * kTrialsPerThread / 10));
  EXPECT_EQ(a->ListBestConfigs()->size(), 1u);
}

// Two processes (as a server and a local sweep would be) write the same file at once.
TEST(StoreConcurrency, TwoProcessesWriteConcurrently) {
  ScopedTempDir dir;
  const std::string path = dir.File("processes.db");
  int64_t run = 0;
  {
    auto s = OpenOrDie(path);
    ASSERT_NE(s, nullptr);
    run = *s->BeginRun(TestRun());
  }  // closed before fork: a SQLite connection must not cross fork()
  constexpr int kPerProcess = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path);
      if (!s.ok()) _exit(2);
      for (int i = 0; i < kPerProcess; ++i) {
        const std::string config = "fused/p" + std::to_string(p) + "/" + std::to_string(i);
        if (!(*s)->RecordTrial(TestTrial(run, kProblem, config)).ok()) _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed to write (2 = open, 3 = record)";
  }
  auto s = OpenOrDie(path);
  EXPECT_EQ(*s->CountTrials(run), 2 * kPerProcess);
}

// Several processes open (and so create and migrate) a brand-new file at the same moment:
// exactly one migrates, the others wait on the lock and find the schema in place.
TEST(StoreConcurrency, ProcessesCreatingTheSameNewFileAtOnceAllSucceed) {
  ScopedTempDir dir;
  const std::string path = dir.File("fresh.db");
  constexpr int kProcesses = 4;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(5);  // released together when the parent closes
      absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path);
      if (!s.ok()) {
        fprintf(stderr, "child %d: %s\n", p, s.status().ToString().c_str());
        _exit(2);
      }
      absl::StatusOr<int64_t> run = (*s)->BeginRun(TestRun("c" + std::to_string(p)));
      if (!run.ok()) _exit(3);
      if (!(*s)->RecordTrial(TestTrial(*run, kProblem, "fused/x")).ok()) _exit(4);
      _exit(0);
    }
    children.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2 = open, 3 = run, 4 = trial failed";
  }
  EXPECT_EQ(RawQuery(path, "PRAGMA user_version"), std::to_string(Store::LatestSchemaVersion()));
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM runs"), std::to_string(kProcesses));
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM trials"), std::to_string(kProcesses));
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"), "wal");
}

// Reads lines from `fd` into `lines` until `want` lines are there (0 = until EOF) or the
// timeout passes. Returns false on timeout. Partial trailing lines are left in `partial`.
bool ReadLines(int fd, size_t want, std::vector<std::string>* lines, std::string* partial,
               int timeout_ms) {
  char buf[4096];
  while (want == 0 || lines->size() < want) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, timeout_ms);
    if (ready <= 0) return false;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return want == 0;  // EOF
    partial->append(buf, static_cast<size_t>(n));
    size_t pos;
    while ((pos = partial->find('\n')) != std::string::npos) {
      lines->push_back(partial->substr(0, pos));
      partial->erase(0, pos + 1);
    }
  }
  return true;
}

class StoreCrash : public ::testing::TestWithParam<Durability> {};

// A child process records trials in a loop, writing each trial id to a pipe after
// RecordTrial returns (rounds 0 and 1), or each batch's ids after RecordTrials returns
// (round 2); the parent SIGKILLs it mid-stream, at a different point each round. After each
// kill the database must pass integrity_check, contain every reported id, hold only whole
// batches (a transaction is all or nothing), and accept the next sweep's writes into the
// same unfinished run.
TEST_P(StoreCrash, SigkilledWriterLosesNoCommittedTrial) {
  ScopedTempDir dir;
  const std::string path = dir.File("crash.db");
  StoreOptions options;
  options.durability = GetParam();
  int64_t run = 0;
  {
    auto s = OpenOrDie(path, options);
    ASSERT_NE(s, nullptr);
    run = *s->BeginRun(TestRun("crashcommit", "sweep"));
  }
  constexpr int kBatch = 5;
  std::vector<std::string> reported;
  for (int round = 0; round < 3; ++round) {
    const int batch_size = round == 2 ? kBatch : 1;
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path, options);
      if (!s.ok()) _exit(2);
      for (int i = 0;; ++i) {
        std::vector<Trial> batch;
        for (int k = 0; k < batch_size; ++k) {
          const std::string config = "fused/r" + std::to_string(round) + "/i" + std::to_string(i) +
                                     "/k" + std::to_string(k);
          batch.push_back(TestTrial(run, kProblem, config));
        }
        const absl::Status recorded =
            batch_size == 1 ? (*s)->RecordTrial(batch[0]) : (*s)->RecordTrials(batch);
        if (!recorded.ok()) _exit(3);
        std::string lines;
        for (const Trial& t : batch) lines += t.trial_id + "\n";
        if (write(fds[1], lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
          _exit(4);
        }
      }
    }
    close(fds[1]);
    std::vector<std::string> lines;
    std::string partial;
    const size_t kill_after = 40 + 35 * round;  // different points in the stream
    const bool got = ReadLines(fds[0], kill_after, &lines, &partial, 30000);
    kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    // Whatever the child wrote before dying is still in the pipe.
    ReadLines(fds[0], 0, &lines, &partial, 1000);
    close(fds[0]);
    ASSERT_TRUE(got) << "child stopped reporting early; status " << status;
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "child exited on its own with " << status;
    reported.insert(reported.end(), lines.begin(), lines.end());

    EXPECT_EQ(RawQuery(path, "PRAGMA integrity_check"), "ok");
    auto s = OpenOrDie(path, options);
    ASSERT_NE(s, nullptr);
    for (const std::string& id : reported) {
      absl::StatusOr<bool> has = s->HasTrial(id);
      ASSERT_TRUE(has.ok()) << has.status();
      EXPECT_TRUE(*has) << "committed trial " << id << " lost after SIGKILL in round " << round;
    }
    const int64_t stored = *s->CountTrials(run);
    EXPECT_GE(stored, static_cast<int64_t>(reported.size()));
    if (batch_size > 1) {
      absl::StatusOr<std::vector<Trial>> trials = s->ListTrials(run);
      ASSERT_TRUE(trials.ok()) << trials.status();
      int in_round = 0;
      for (const Trial& t : *trials) {
        if (t.config_key.rfind("fused/r" + std::to_string(round) + "/", 0) == 0) ++in_round;
      }
      EXPECT_EQ(in_round % batch_size, 0) << "a batch was partially committed";
    }
    // The next sweep finds the unfinished run and resumes writing into it.
    absl::StatusOr<RunInfo> resumed =
        s->FindUnfinishedRun("crashcommit", db_test::TestDevice().DeviceClass(), "sweep");
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->run_id, run);
  }
  auto s = OpenOrDie(path, options);
  std::vector<Trial> last;
  for (int k = 0; k < kBatch; ++k)
    last.push_back(TestTrial(run, kProblem, "resume/" + std::to_string(k)));
  ASSERT_TRUE(s->RecordTrials(last).ok());
  ASSERT_TRUE(s->FinishRun(run).ok());
  EXPECT_EQ(RawQuery(path, "PRAGMA integrity_check"), "ok");
}

INSTANTIATE_TEST_SUITE_P(Durability, StoreCrash,
                         ::testing::Values(Durability::kPowerLoss, Durability::kProcessCrash),
                         [](const ::testing::TestParamInfo<Durability>& info) {
                           return info.param == Durability::kPowerLoss ? "SynchronousFull"
                                                                       : "SynchronousNormal";
                         });

}  // namespace
}  // namespace fusetune
