// Latency of ConfigCache::Lookup: the hit path (the inference hot path) and the miss path.
// Numbers: docs/perf.md, "Client cache".
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "fusetune/client/config_cache.h"

namespace fusetune {
namespace {

// Answers every problem at once; the benchmark only measures lookups.
class InstantFetcher : public BestConfigFetcher {
 public:
  absl::StatusOr<std::vector<absl::StatusOr<CachedConfig>>> Fetch(
      std::span<const AttentionProblem> problems) override {
    std::vector<absl::StatusOr<CachedConfig>> out;
    for (const AttentionProblem& p : problems) {
      CachedConfig c;
      c.config.block_s = p.q_len >= 256 ? 64 : 32;
      c.provenance = ConfigProvenance::kExact;
      out.push_back(c);
    }
    return out;
  }
};

std::vector<AttentionProblem> Problems(int n) {
  std::vector<AttentionProblem> out;
  for (int i = 0; i < n; ++i) {
    AttentionProblem p;
    p.batch = 1 + i % 4;
    p.q_heads = 32;
    p.kv_heads = 8;
    p.q_len = 128 * (1 + i / 4);
    p.kv_len = p.q_len;
    p.head_dim = 128;
    p.causal = true;
    p.dtype = DType::kBf16;
    out.push_back(p);
  }
  return out;
}

ConfigCache& WarmCache(int entries) {
  static ConfigCache* cache = [entries] {
    ConfigCacheOptions o;
    o.device_class = "cuda/NVIDIA-H200/sm90";
    auto* c = new ConfigCache(std::make_unique<InstantFetcher>(), o);
    std::vector<AttentionProblem> ps = Problems(entries);
    c->Prefetch(ps);
    c->Flush(absl::Seconds(30));
    return c;
  }();
  return *cache;
}

constexpr int kEntries = 1024;

// A hit: the problem was fetched before. Threads(n) runs n readers at once.
void BM_LookupHit(benchmark::State& state) {
  ConfigCache& cache = WarmCache(kEntries);
  std::vector<AttentionProblem> ps = Problems(kEntries);
  size_t i = static_cast<size_t>(state.thread_index()) * 97;
  for (auto _ : state) {
    CachedConfig c = cache.Lookup(ps[i % ps.size()]);
    benchmark::DoNotOptimize(c);
    i += 7;
  }
  if (state.thread_index() == 0 && cache.Lookup(ps[0]).provenance != ConfigProvenance::kExact) {
    state.SkipWithError("cache was not warm");
  }
}
BENCHMARK(BM_LookupHit)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// A miss on a problem that is already queued (the steady state of an unreachable service):
// default answer plus one mutex-guarded queue probe.
void BM_LookupMiss(benchmark::State& state) {
  ConfigCacheOptions o;
  o.device_class = "cpu/bench/x86_64";
  o.max_entries = 0;  // nothing is ever fetched: every lookup is a miss
  ConfigCache cache(std::make_unique<InstantFetcher>(), o);
  std::vector<AttentionProblem> ps = Problems(64);
  size_t i = 0;
  for (auto _ : state) {
    CachedConfig c = cache.Lookup(ps[i++ % ps.size()]);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_LookupMiss);

// For scale: what building the canonical key string costs (why the cache does not).
void BM_ProblemKeyString(benchmark::State& state) {
  std::vector<AttentionProblem> ps = Problems(64);
  size_t i = 0;
  for (auto _ : state) {
    std::string k = ps[i++ % ps.size()].Key();
    benchmark::DoNotOptimize(k);
  }
}
BENCHMARK(BM_ProblemKeyString);

void BM_ProblemCacheKey(benchmark::State& state) {
  std::vector<AttentionProblem> ps = Problems(64);
  size_t i = 0;
  for (auto _ : state) {
    ProblemCacheKey k = ProblemCacheKey::Of(ps[i++ % ps.size()]);
    benchmark::DoNotOptimize(k);
  }
}
BENCHMARK(BM_ProblemCacheKey);

}  // namespace
}  // namespace fusetune
