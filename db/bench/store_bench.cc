// Store throughput on this machine's disk: the cost of a durable commit per trial (the
// number behind the synchronous=FULL vs NORMAL choice), batching, best-config reads, a full
// job lease/complete cycle, and leases per second on SQLite and PostgreSQL.
//
//   build-*/db/db_store_bench --benchmark_min_time=1
//   FUSETUNE_BENCH_POSTGRES_URL=postgresql://... build-*/db/db_store_bench --benchmark_filter=Lease
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "fusetune/db/store.h"

namespace fusetune {
namespace {

constexpr char kProblem[] = "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32";

// A store on a real file in a fresh directory under TMPDIR (or /tmp), removed afterwards.
class BenchStore {
 public:
  explicit BenchStore(Durability durability) {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/fusetune_bench_XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
    StoreOptions options;
    options.durability = durability;
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(dir_ + "/bench.db", options);
    if (s.ok()) store_ = std::move(*s);
  }
  ~BenchStore() {
    store_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  Store* get() const { return store_.get(); }

 private:
  std::string dir_;
  std::unique_ptr<Store> store_;
};

RunInfo BenchRun() {
  RunInfo r;
  r.commit = "bench";
  r.host = "bench";
  r.device.backend = "cpu";
  r.device.name = "bench";
  r.device.arch = "x86_64";
  r.label = "bench";
  return r;
}

Trial BenchTrial(int64_t run, int64_t i) {
  Trial t;
  t.run_id = run;
  t.problem_key = kProblem;
  t.config_key = "fused/bm64/bs32/w2/fp32/st" + std::to_string(i);
  t.trial_id = TrialId(run, t.problem_key, t.config_key, 0);
  t.samples_us = std::vector<double>(20, 123.456);
  t.median_us = 123.456;
  t.p10_us = 120.0;
  t.p90_us = 130.0;
  t.checked_elements = 1 << 20;
  return t;
}

// One trial per transaction, as a sweep records them. Arg 0: FULL, 1: NORMAL.
void BM_RecordTrialOnePerCommit(benchmark::State& state) {
  BenchStore store(state.range(0) == 0 ? Durability::kPowerLoss : Durability::kProcessCrash);
  if (store.get() == nullptr) return state.SkipWithError("could not open the store");
  const int64_t run = *store.get()->BeginRun(BenchRun());
  int64_t i = 0;
  for (auto _ : state) {
    if (!store.get()->RecordTrial(BenchTrial(run, i++)).ok()) return state.SkipWithError("write");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "synchronous=FULL" : "synchronous=NORMAL");
}
BENCHMARK(BM_RecordTrialOnePerCommit)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// 64 trials per transaction (a worker's ReportTrials batch), synchronous=FULL.
void BM_RecordTrialsBatch64(benchmark::State& state) {
  BenchStore store(Durability::kPowerLoss);
  if (store.get() == nullptr) return state.SkipWithError("could not open the store");
  const int64_t run = *store.get()->BeginRun(BenchRun());
  int64_t i = 0;
  for (auto _ : state) {
    std::vector<Trial> batch;
    for (int k = 0; k < 64; ++k) batch.push_back(BenchTrial(run, i++));
    if (!store.get()->RecordTrials(batch).ok()) return state.SkipWithError("write");
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_RecordTrialsBatch64)->Unit(benchmark::kMicrosecond);

void BM_GetBestConfigHit(benchmark::State& state) {
  BenchStore store(Durability::kPowerLoss);
  if (store.get() == nullptr) return state.SkipWithError("could not open the store");
  for (int p = 0; p < 1000; ++p) {
    BestConfig b;
    b.device_class = "cpu/bench/x86_64";
    b.problem_key = std::string(kProblem) + "/" + std::to_string(p);
    b.config_key = "fused/bm64/bs32/w2/fp32/st1";
    (void)store.get()->UpsertBestConfig(b);
  }
  int p = 0;
  for (auto _ : state) {
    auto got = store.get()->GetBestConfig("cpu/bench/x86_64",
                                          std::string(kProblem) + "/" + std::to_string(p++ % 1000));
    if (!got.ok()) return state.SkipWithError("read");
    benchmark::DoNotOptimize(got->median_us);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GetBestConfigHit)->Unit(benchmark::kMicrosecond);

// Enqueue, lease and complete one job: three write transactions.
void BM_JobEnqueueLeaseComplete(benchmark::State& state) {
  BenchStore store(Durability::kPowerLoss);
  if (store.get() == nullptr) return state.SkipWithError("could not open the store");
  Job job;
  job.device_class = "cpu/bench/x86_64";
  job.problem_keys = {kProblem};
  int64_t now = 1'700'000'000'000;
  for (auto _ : state) {
    absl::StatusOr<int64_t> id = store.get()->EnqueueJob(job);
    absl::StatusOr<Job> leased = store.get()->LeaseJob("w", job.device_class, ++now, 30000);
    if (!id.ok() || !leased.ok() || !store.get()->CompleteJob(*id, "w", kNoLeaseToken, true, "", now).ok()) {
      return state.SkipWithError("job cycle failed");
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_JobEnqueueLeaseComplete)->Unit(benchmark::kMicrosecond);

// The server's lease path: lease the queued job under the database's clock and complete it
// under its lease token (two write transactions; the enqueue is not timed). Arg 0: SQLite
// (a file, synchronous=FULL); arg 1: PostgreSQL at $FUSETUNE_BENCH_POSTGRES_URL (skipped when
// unset; its tables are created there, so give it an empty database). Wall time: for
// PostgreSQL most of the time is the server's, not this process's CPU.
void BM_LeaseAndComplete(benchmark::State& state) {
  std::unique_ptr<BenchStore> file;
  std::unique_ptr<Store> postgres;
  Store* store = nullptr;
  if (state.range(0) == 0) {
    file = std::make_unique<BenchStore>(Durability::kPowerLoss);
    store = file->get();
  } else {
    const char* url = getenv("FUSETUNE_BENCH_POSTGRES_URL");
    if (url == nullptr || *url == '\0') return state.SkipWithError("FUSETUNE_BENCH_POSTGRES_URL is not set");
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url);
    if (!s.ok()) return state.SkipWithError(std::string(s.status().message()).c_str());
    postgres = std::move(*s);
    store = postgres.get();
  }
  if (store == nullptr) return state.SkipWithError("could not open the store");
  Job job;
  job.device_class = "cpu/bench-lease/x86_64";
  job.problem_keys = {kProblem};
  for (auto _ : state) {
    state.PauseTiming();
    absl::StatusOr<int64_t> id = store->EnqueueJob(job);
    state.ResumeTiming();
    absl::StatusOr<Job> leased = store->LeaseJob("w", job.device_class, kDatabaseClock, 30000);
    if (!id.ok() || !leased.ok() ||
        !store->CompleteJob(leased->job_id, "w", leased->lease_token, true, "", kDatabaseClock).ok()) {
      return state.SkipWithError("lease cycle failed");
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "sqlite" : "postgresql");
}
BENCHMARK(BM_LeaseAndComplete)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The PostgreSQL store at $FUSETUNE_BENCH_POSTGRES_URL (null, and the benchmark skipped, when
// unset or unreachable).
std::unique_ptr<Store> BenchPostgres(benchmark::State& state) {
  const char* url = getenv("FUSETUNE_BENCH_POSTGRES_URL");
  if (url == nullptr || *url == '\0') {
    state.SkipWithError("FUSETUNE_BENCH_POSTGRES_URL is not set");
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(url);
  if (!s.ok()) {
    state.SkipWithError(std::string(s.status().message()).c_str());
    return nullptr;
  }
  return std::move(*s);
}

// A trial upload's transaction on PostgreSQL: Arg trials per transaction (1: a worker sending
// each trial as it is measured; 64: a batch). Wall time per transaction; items are trials.
void BM_PostgresRecordTrials(benchmark::State& state) {
  std::unique_ptr<Store> store = BenchPostgres(state);
  if (store == nullptr) return;
  const int64_t run = *store->BeginRun(BenchRun());
  int64_t i = 0;
  for (auto _ : state) {
    std::vector<Trial> batch;
    for (int k = 0; k < state.range(0); ++k) batch.push_back(BenchTrial(run, i++));
    if (!store->RecordTrials(batch).ok()) return state.SkipWithError("write");
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_PostgresRecordTrials)->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

// What each replica of the service reads every --replica-poll-ms (ReadSharedStateStamp), with
// 1000 best configs and 1000 finished jobs stored. Arg 0: SQLite, 1: PostgreSQL.
void BM_SharedStateStamp(benchmark::State& state) {
  std::unique_ptr<BenchStore> file;
  std::unique_ptr<Store> postgres;
  Store* store = nullptr;
  if (state.range(0) == 0) {
    file = std::make_unique<BenchStore>(Durability::kPowerLoss);
    store = file->get();
  } else {
    postgres = BenchPostgres(state);
    store = postgres.get();
  }
  if (store == nullptr) return;
  const int64_t run = *store->BeginRun(BenchRun());
  for (int i = 0; i < 1000; ++i) {
    BestConfig b;
    b.device_class = "cpu/bench-stamp/x86_64";
    b.problem_key = kProblem + std::to_string(i);
    b.config_key = "fused/bm64/bs64/t1/fp32/st1";
    b.median_us = 10;
    b.run_id = run;
    b.commit = "bench";
    b.updated_unix_ms = 1700000000000 + i;
    (void)store->UpsertBestConfig(b);
  }
  for (auto _ : state) {
    if (!store->ReadSharedStateStamp().ok()) return state.SkipWithError("read");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) == 0 ? "sqlite" : "postgresql");
}
BENCHMARK(BM_SharedStateStamp)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fusetune
