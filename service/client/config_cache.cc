#include "fusetune/client/config_cache.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "fusetune/base/backoff.h"
#include "fusetune/kernels/default_config.h"

namespace fusetune {
namespace {

std::atomic<uint64_t> next_cache_id{1};

// Each reader thread's view: the snapshot it last used and the version it had. Holding
// the shared_ptr here keeps that snapshot alive without touching its reference count on
// every lookup.
struct ReaderSlot {
  uint64_t cache_id = 0;
  uint64_t version = 0;
  std::shared_ptr<const void> snapshot;
};
thread_local ReaderSlot reader_slot;

}  // namespace

KernelConfig DefaultKernelConfig(std::string_view device_class, const AttentionProblem& problem) {
  return DefaultConfigOfDeviceClass(device_class, problem);
}

ProblemCacheKey ProblemCacheKey::Of(const AttentionProblem& p) {
  ProblemCacheKey k;
  if (!p.cu_seqlens_q.empty() || !p.cu_seqlens_k.empty() || !p.kv_valid_lens.empty()) {
    k.lengths_hash = absl::Hash<std::tuple<const std::vector<int32_t>&, const std::vector<int32_t>&,
                                           const std::vector<int32_t>&>>{}(
        std::tie(p.cu_seqlens_q, p.cu_seqlens_k, p.kv_valid_lens));
    if (k.lengths_hash == 0) k.lengths_hash = 1;  // 0 means "no lists"
  }
  k.batch = p.batch;
  k.q_heads = p.q_heads;
  k.kv_heads = p.kv_heads;
  k.q_len = p.q_len;
  k.kv_len = p.kv_len;
  k.head_dim = p.head_dim;
  k.page_block_size = p.page_block_size;
  k.kv_pool_pages = p.kv_pool_pages;
  k.block_table_width = p.block_table_width;
  k.shared_prefix_pages = p.shared_prefix_pages;
  k.softmax_scale = p.softmax_scale;
  k.kind = static_cast<uint8_t>(p.kind);
  k.dtype = static_cast<uint8_t>(p.dtype);
  k.causal = p.causal ? 1 : 0;
  k.kv_storage = static_cast<uint8_t>(p.kv_storage);
  return k;
}

ConfigCache::ConfigCache(std::unique_ptr<BestConfigFetcher> fetcher, ConfigCacheOptions options)
    : fetcher_(std::move(fetcher)),
      options_(std::move(options)),
      cache_id_(next_cache_id.fetch_add(1)) {
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_ = std::make_shared<const Snapshot>();
  }
  thread_ = std::thread([this] { FetchLoop(); });
}

std::unique_ptr<ConfigCache> ConfigCache::Connect(const GrpcFetcherOptions& fetcher_options,
                                                  ConfigCacheOptions options) {
  if (options.device_class.empty()) options.device_class = fetcher_options.device_class;
  GrpcFetcherOptions bounded = fetcher_options;
  bounded.reconnect_initial = options.retry_initial;
  bounded.reconnect_max = options.retry_max;
  return std::make_unique<ConfigCache>(CreateGrpcFetcher(bounded), std::move(options));
}

ConfigCache::~ConfigCache() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

const ConfigCache::Snapshot* ConfigCache::ReaderSnapshot() const {
  ReaderSlot& slot = reader_slot;
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (slot.cache_id != cache_id_ || slot.version != version) {
    // Rare: a new snapshot was published (or this thread last used another cache).
    absl::MutexLock lock(&snapshot_mu_);
    slot.snapshot = snapshot_;
    slot.cache_id = cache_id_;
    slot.version = version;
  }
  return static_cast<const Snapshot*>(slot.snapshot.get());
}

CachedConfig ConfigCache::Lookup(const AttentionProblem& problem) const {
  const ProblemCacheKey key = ProblemCacheKey::Of(problem);
  const Snapshot* snapshot = ReaderSnapshot();
  if (auto it = snapshot->map.find(key); it != snapshot->map.end()) return it->second;
  Enqueue(key, problem);
  return CachedConfig{DefaultKernelConfig(options_.device_class, problem), ConfigProvenance::kFallback, 0};
}

void ConfigCache::Enqueue(const ProblemCacheKey& key, const AttentionProblem& problem) const {
  absl::MutexLock lock(&mu_);
  ++stats_.misses;
  if (pending_.contains(key) || registered_.contains(key)) return;
  if (pending_.size() + registered_.size() >= options_.max_entries) return;
  pending_.emplace(key, problem);
  wake_ = true;
}

void ConfigCache::Prefetch(std::span<const AttentionProblem> problems) {
  absl::MutexLock lock(&mu_);
  for (const AttentionProblem& p : problems) {
    const ProblemCacheKey key = ProblemCacheKey::Of(p);
    if (pending_.contains(key) || registered_.contains(key)) continue;
    if (pending_.size() + registered_.size() >= options_.max_entries) break;
    pending_.emplace(key, p);
    wake_ = true;
  }
}

bool ConfigCache::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  wake_ = true;
  retry_after_ = absl::InfinitePast();  // try now, even while backing off
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (pending_.empty() && !fetch_in_flight_ && !wake_);
  };
  return mu_.AwaitWithTimeout(absl::Condition(&drained), timeout) && !stop_;
}

ConfigCacheStats ConfigCache::stats() const {
  absl::MutexLock lock(&mu_);
  ConfigCacheStats s = stats_;
  s.entries = static_cast<int64_t>(registered_.size());
  s.pending = static_cast<int64_t>(pending_.size());
  return s;
}

bool ConfigCache::FetchAndPublish(std::vector<std::pair<ProblemCacheKey, AttentionProblem>> batch) {
  std::vector<AttentionProblem> problems;
  problems.reserve(batch.size());
  for (const auto& [key, problem] : batch) problems.push_back(problem);

  absl::StatusOr<std::vector<absl::StatusOr<CachedConfig>>> answers = fetcher_->Fetch(problems);
  const absl::Time now = absl::Now();
  if (answers.ok() && answers->size() != batch.size()) {
    answers = absl::InternalError("fetcher answered a different number of problems");
  }
  if (!answers.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.fetches_failed;
    return false;
  }

  auto next = std::make_shared<Snapshot>();
  {
    absl::MutexLock lock(&snapshot_mu_);
    next->map = snapshot_->map;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const absl::StatusOr<CachedConfig>& a = (*answers)[i];
    // A refused problem is remembered as the fallback so it is not asked for on every miss.
    next->map[batch[i].first] =
        a.ok() ? *a
               : CachedConfig{DefaultKernelConfig(options_.device_class, problems[i]), ConfigProvenance::kFallback, 0};
  }
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_ = std::move(next);
  }
  version_.fetch_add(1, std::memory_order_acq_rel);

  absl::MutexLock lock(&mu_);
  ++stats_.fetches_ok;
  ++stats_.snapshots_published;
  for (auto& [key, problem] : batch) {
    pending_.erase(key);
    registered_.insert_or_assign(key, Registered{std::move(problem), now});
  }
  return true;
}

void ConfigCache::FetchLoop() {
  // Capped exponential backoff with jitter while fetches fail; stale entries and the
  // fallback keep serving meanwhile.
  BackoffOptions backoff_options;
  backoff_options.initial_ms = absl::ToInt64Milliseconds(options_.retry_initial);
  backoff_options.max_ms = absl::ToInt64Milliseconds(options_.retry_max);
  Backoff backoff(backoff_options, cache_id_ * 0x9E3779B97F4A7C15ull + 1);
  while (true) {
    std::vector<std::pair<ProblemCacheKey, AttentionProblem>> batch;
    {
      absl::MutexLock lock(&mu_);
      // Sleep until woken, until backoff allows the queued misses to go, or until the
      // oldest entry needs its refresh.
      absl::Time deadline = absl::InfiniteFuture();
      if (!pending_.empty()) deadline = std::max(retry_after_, absl::Now());
      for (const auto& [key, reg] : registered_) {
        deadline = std::min(deadline, std::max(reg.fetched_at + options_.ttl, retry_after_));
      }
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || wake_; };
      mu_.AwaitWithDeadline(absl::Condition(&woken), deadline);
      if (stop_) return;
      wake_ = false;
      const absl::Time now = absl::Now();
      if (now < retry_after_) continue;
      if (!pending_.empty()) {
        // Let a burst of misses arrive so they share one call.
        auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
        mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.batch_window);
        if (stop_) return;
        for (const auto& [key, problem] : pending_) {
          if (batch.size() >= options_.max_batch) break;
          batch.emplace_back(key, problem);
        }
      } else {
        for (const auto& [key, reg] : registered_) {
          if (batch.size() >= options_.max_batch) break;
          if (reg.fetched_at + options_.ttl <= now) batch.emplace_back(key, reg.problem);
        }
      }
      if (batch.empty()) continue;
      fetch_in_flight_ = true;
    }
    const bool ok = FetchAndPublish(std::move(batch));
    absl::MutexLock lock(&mu_);
    fetch_in_flight_ = false;
    if (ok) {
      backoff.Reset();
      retry_after_ = absl::InfinitePast();
    } else {
      retry_after_ = absl::Now() + absl::Milliseconds(backoff.NextDelayMs());
    }
  }
}

}  // namespace fusetune
