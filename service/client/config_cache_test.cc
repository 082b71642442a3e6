#include "fusetune/client/config_cache.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "fusetune/kernels/default_config.h"

namespace fusetune {
namespace {

AttentionProblem Shape(int len, int head_dim = 64) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 4;
  p.kv_heads = 4;
  p.q_len = len;
  p.kv_len = len;
  p.head_dim = head_dim;
  return p;
}

// The "service": answers block_s = q_len / 2 (so each problem's answer is recognisable) and
// block_m = 16 * generation, where generation counts calls. Can be made to fail, to refuse
// head_dim 48, or to block.
class FakeFetcher : public BestConfigFetcher {
 public:
  absl::StatusOr<std::vector<absl::StatusOr<CachedConfig>>> Fetch(
      std::span<const AttentionProblem> problems) override {
    if (block_.load()) release_.WaitForNotification();
    absl::MutexLock lock(&mu_);
    ++calls_;
    batch_sizes_.push_back(static_cast<int>(problems.size()));
    if (fail_) return absl::UnavailableError("service down");
    std::vector<absl::StatusOr<CachedConfig>> out;
    for (const AttentionProblem& p : problems) {
      if (p.head_dim == 48) {
        out.push_back(absl::InvalidArgumentError("head_dim 48 unsupported"));
        continue;
      }
      asked_.push_back(p.q_len);
      CachedConfig c;
      c.config.block_s = p.q_len / 2;
      c.config.block_m = 16 * calls_;
      c.provenance = ConfigProvenance::kExact;
      c.median_us = 10.0;
      out.push_back(c);
    }
    return out;
  }
  void set_fail(bool f) {
    absl::MutexLock lock(&mu_);
    fail_ = f;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<int> batch_sizes() {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  std::atomic<bool> block_{false};
  absl::Notification release_;

 private:
  absl::Mutex mu_;
  int calls_ = 0;
  bool fail_ = false;
  std::vector<int> batch_sizes_;
  std::vector<int> asked_;
};

ConfigCacheOptions TestOptions() {
  ConfigCacheOptions o;
  o.device_class = "cpu/test/x86_64";
  o.batch_window = absl::Milliseconds(1);
  o.retry_initial = absl::Milliseconds(5);
  o.retry_max = absl::Milliseconds(20);
  return o;
}

// Polls `pred` until it holds or 10 s pass.
template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return pred();
}

TEST(ConfigCache, MissAnswersTheDefaultAtOnceThenHitsAfterTheFetch) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  ConfigCache cache(std::move(fetcher), TestOptions());
  CachedConfig first = cache.Lookup(Shape(256));
  EXPECT_EQ(first.provenance, ConfigProvenance::kFallback);
  EXPECT_EQ(first.config, DefaultKernelConfig("cpu/test/x86_64", Shape(256)));
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  CachedConfig hit = cache.Lookup(Shape(256));
  EXPECT_EQ(hit.provenance, ConfigProvenance::kExact);
  EXPECT_EQ(hit.config.block_s, 128);
  EXPECT_EQ(hit.median_us, 10.0);
  EXPECT_EQ(f->calls(), 1);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(ConfigCache, MissesAreFetchedInBatchesOfAtMostMaxBatch) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  ConfigCacheOptions o = TestOptions();
  o.max_batch = 40;
  ConfigCache cache(std::move(fetcher), o);
  std::vector<AttentionProblem> problems;
  for (int i = 1; i <= 100; ++i) problems.push_back(Shape(2 * i));
  cache.Prefetch(problems);
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  std::vector<int> sizes = f->batch_sizes();
  int total = 0;
  for (int s : sizes) {
    EXPECT_LE(s, 40);
    total += s;
  }
  EXPECT_EQ(total, 100);
  EXPECT_EQ(sizes.size(), 3u);
  for (const AttentionProblem& p : problems) {
    EXPECT_EQ(cache.Lookup(p).config.block_s, p.q_len / 2);
  }
}

TEST(ConfigCache, LookupNeverWaitsForAFetchInFlight) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  f->block_ = true;  // the "network" hangs until released
  ConfigCache cache(std::move(fetcher), TestOptions());
  cache.Lookup(Shape(64));
  // The fetch thread is now stuck in Fetch; lookups (hits and misses) still return.
  ASSERT_TRUE(Eventually([&] { return cache.stats().pending == 1 && !cache.Flush(absl::Milliseconds(1)); }));
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(cache.Lookup(Shape(64 + i)).provenance, ConfigProvenance::kFallback);
  }
  f->release_.Notify();
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  EXPECT_EQ(cache.Lookup(Shape(64)).provenance, ConfigProvenance::kExact);
}

TEST(ConfigCache, ServesDefaultsWhileUnreachableAndRecoversWhenBack) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  f->set_fail(true);
  ConfigCache cache(std::move(fetcher), TestOptions());
  EXPECT_EQ(cache.Lookup(Shape(128)).provenance, ConfigProvenance::kFallback);
  ASSERT_TRUE(Eventually([&] { return cache.stats().fetches_failed >= 3; }));  // retried
  EXPECT_EQ(cache.Lookup(Shape(128)).provenance, ConfigProvenance::kFallback);
  EXPECT_EQ(cache.stats().pending, 1);  // still queued, not dropped
  f->set_fail(false);
  ASSERT_TRUE(Eventually([&] { return cache.Lookup(Shape(128)).provenance == ConfigProvenance::kExact; }));
}

TEST(ConfigCache, RefreshesOnTtlAndKeepsStaleEntriesWhileUnreachable) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  ConfigCacheOptions o = TestOptions();
  o.ttl = absl::Milliseconds(30);
  ConfigCache cache(std::move(fetcher), o);
  cache.Lookup(Shape(512));
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  const int first_block_m = cache.Lookup(Shape(512)).config.block_m;
  // A refresh is a new call, whose answer carries a larger block_m.
  ASSERT_TRUE(Eventually([&] { return cache.Lookup(Shape(512)).config.block_m > first_block_m; }));
  f->set_fail(true);
  const int failed_before = static_cast<int>(cache.stats().fetches_failed);
  ASSERT_TRUE(Eventually([&] { return cache.stats().fetches_failed > failed_before + 2; }));
  CachedConfig stale = cache.Lookup(Shape(512));
  EXPECT_EQ(stale.provenance, ConfigProvenance::kExact);  // stale, but still the tuned answer
  EXPECT_EQ(stale.config.block_s, 256);
}

TEST(ConfigCache, RefusedProblemIsCachedAsFallbackAndNotAskedAgain) {
  auto fetcher = std::make_unique<FakeFetcher>();
  FakeFetcher* f = fetcher.get();
  ConfigCache cache(std::move(fetcher), TestOptions());
  cache.Lookup(Shape(64, 48));
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  const int calls = f->calls();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cache.Lookup(Shape(64, 48)).provenance, ConfigProvenance::kFallback);
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  EXPECT_EQ(f->calls(), calls);
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(ConfigCache, StopsQueueingBeyondMaxEntries) {
  auto fetcher = std::make_unique<FakeFetcher>();
  ConfigCacheOptions o = TestOptions();
  o.max_entries = 5;
  ConfigCache cache(std::move(fetcher), o);
  for (int i = 1; i <= 20; ++i) cache.Lookup(Shape(i));
  ASSERT_TRUE(cache.Flush(absl::Seconds(10)));
  EXPECT_EQ(cache.stats().entries, 5);
  EXPECT_EQ(cache.Lookup(Shape(20)).provenance, ConfigProvenance::kFallback);
}

TEST(ConfigCache, VarlenProblemsWithDifferentLengthsAreDifferentEntries) {
  AttentionProblem a = Shape(8);
  a.batch = 2;
  a.cu_seqlens_q = {0, 3, 8};
  a.cu_seqlens_k = {0, 3, 8};
  AttentionProblem b = a;
  b.cu_seqlens_q = {0, 5, 8};
  b.cu_seqlens_k = {0, 5, 8};
  EXPECT_FALSE(ProblemCacheKey::Of(a) == ProblemCacheKey::Of(b));
  EXPECT_TRUE(ProblemCacheKey::Of(a) == ProblemCacheKey::Of(AttentionProblem(a)));
  EXPECT_FALSE(ProblemCacheKey::Of(a) == ProblemCacheKey::Of(Shape(8)));
  AttentionProblem causal = Shape(8);
  causal.causal = true;
  EXPECT_FALSE(ProblemCacheKey::Of(causal) == ProblemCacheKey::Of(Shape(8)));
}

TEST(ConfigCache, PagedCachesThatDifferInAnyPagedFieldAreDifferentEntries) {
  AttentionProblem paged = Shape(8);
  paged.kind = ProblemKind::kDecode;
  paged.q_len = 1;
  paged.kv_len = 64;
  paged.page_block_size = 16;
  AttentionProblem pool = paged, width = paged, prefix = paged;
  pool.kv_pool_pages = 9;
  width.block_table_width = 5;
  prefix.shared_prefix_pages = 1;
  EXPECT_FALSE(ProblemCacheKey::Of(paged) == ProblemCacheKey::Of(paged.Unpaged()));
  for (const AttentionProblem& other : {pool, width, prefix}) {
    ASSERT_TRUE(other.Validate().ok()) << other.Key();
    EXPECT_FALSE(ProblemCacheKey::Of(paged) == ProblemCacheKey::Of(other)) << other.Key();
  }
}

TEST(ConfigCache, AnE4m3CacheIsAnotherEntryThanTheSameShapeInItsDtype) {
  AttentionProblem plain = Shape(8);
  plain.dtype = DType::kBf16;
  AttentionProblem e4m3 = plain;
  e4m3.kv_storage = KvStorage::kE4m3;
  ASSERT_TRUE(e4m3.Validate().ok());
  EXPECT_FALSE(ProblemCacheKey::Of(plain) == ProblemCacheKey::Of(e4m3));
  EXPECT_TRUE(ProblemCacheKey::Of(e4m3) == ProblemCacheKey::Of(AttentionProblem(e4m3)));
}

TEST(ConfigCache, ConcurrentReadersSeeOnlyDefaultsOrTheRightAnswer) {
  auto fetcher = std::make_unique<FakeFetcher>();
  ConfigCacheOptions o = TestOptions();
  o.ttl = absl::Milliseconds(5);  // keep publishing while readers read
  ConfigCache cache(std::move(fetcher), o);
  std::atomic<bool> bad{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      // Read until several snapshots were published under us (or 10 s pass).
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      for (int i = 0;; ++i) {
        if (i % 1000 == 0 && i >= 20000 &&
            (cache.stats().snapshots_published >= 3 || absl::Now() > deadline)) {
          break;
        }
        const int len = 2 * (1 + (i + t) % 50);
        CachedConfig c = cache.Lookup(Shape(len));
        if (c.provenance == ConfigProvenance::kExact ? c.config.block_s != len / 2
                                                     : !(c.config == DefaultKernelConfig(o.device_class, Shape(len)))) {
          bad = true;
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_FALSE(bad);
  EXPECT_GE(cache.stats().snapshots_published, 3);
}

// The fallback served while the service is down is the service's own default, per problem:
// for fp16/bf16 on a GPU it computes in the storage dtype (the only precision the CUDA
// kernel compiles at every head_dim), not fp32.
TEST(ConfigCache, FallbackIsTheServicesDefaultForTheProblem) {
  for (const char* cls : {"cpu/x/y", "cuda/NVIDIA-H200/sm90", "hip/MI250/gfx90a"}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      for (int d : {64, 128}) {
        AttentionProblem p = Shape(256);
        p.dtype = dtype;
        p.head_dim = d;
        EXPECT_EQ(DefaultKernelConfig(cls, p), *DefaultConfig(BackendOfDeviceClass(cls), p)) << cls;
      }
    }
  }
  AttentionProblem half = Shape(256);
  half.dtype = DType::kBf16;
  half.head_dim = 128;
  EXPECT_EQ(DefaultKernelConfig("cuda/NVIDIA-H200/sm90", half).precision, Precision::kBf16);
  // Unknown or missing classes get the CPU default, which needs no device.
  EXPECT_EQ(DefaultKernelConfig("", half), *DefaultConfig("cpu", half));
  EXPECT_EQ(DefaultKernelConfig("tpu/v5", half), *DefaultConfig("cpu", half));
}

TEST(ConfigCache, MissOnAHalfPrecisionProblemFallsBackToItsOwnDefault) {
  auto fetcher = std::make_unique<FakeFetcher>();
  ConfigCacheOptions o = TestOptions();
  o.device_class = "cuda/NVIDIA-H200/sm90";
  ConfigCache cache(std::move(fetcher), o);
  AttentionProblem p = Shape(256);
  p.dtype = DType::kFp16;
  p.head_dim = 128;
  CachedConfig c = cache.Lookup(p);
  EXPECT_EQ(c.provenance, ConfigProvenance::kFallback);
  EXPECT_EQ(c.config.precision, Precision::kFp16);
  EXPECT_EQ(c.config.stages, 2);
}

}  // namespace
}  // namespace fusetune
