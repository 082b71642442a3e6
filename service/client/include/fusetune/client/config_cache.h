// ConfigCache: the best kernel config for an attention problem, answered from memory.
//
// Inference code calls Lookup(problem) on its hot path; the cache never blocks it on the
// network. A hit returns the config the tuning service chose for this problem on this
// device class. A miss returns the cache's default config at once (provenance kFallback)
// and queues the problem; a background thread fetches queued problems in batches
// (BatchGetBestConfig) and publishes the answers, so later lookups of that problem hit.
// Every entry is re-fetched once it is older than `ttl`. While the service is unreachable
// the cache keeps answering with what it has (stale entries, or the default) and retries
// with a capped, jittered backoff.
//
// How a hit stays under 100 ns (see docs/perf.md "Client cache" for measurements):
//   * the problem is reduced to a compact binary key (ProblemCacheKey: the scalar fields
//     and one 64-bit hash of the length lists, if any) hashed with absl::Hash: no Key()
//     string is built (that alone costs more than 100 ns);
//   * answers live in an immutable hash map snapshot. The fetch thread copies the map,
//     adds its answers and publishes the copy (read-copy-update), bumping a version
//     number. Each reader thread keeps its own reference to the snapshot it last used
//     and only re-reads the shared pointer (under a mutex) when the version changed. A
//     hit therefore does one relaxed-cost atomic load of a cache line that is written
//     only on publish, one hash and one probe: no lock, no reference-count traffic, no
//     shared writes, so readers on many cores do not slow each other down. A sharded
//     mutex map was the alternative; its reader lock writes a shared cache line on every
//     lookup, which is what costs under contention.
//   The price: publishing copies the map (fine for read-mostly data refreshed every few
//   minutes), and a reader thread holds on to an old snapshot until its next lookup.
//
// Varlen and padded problems are keyed by a 64-bit hash of their length lists; a
// collision would return the config of another problem with the same scalar shape — a
// valid config (every config computes the same result), just possibly not the fastest.
//
// Thread-safety: Lookup, Prefetch, Flush and stats are safe to call from any number of
// threads concurrently. Destroying the cache stops its thread (a fetch in flight is
// abandoned after its deadline); no call may be in progress or follow.
#ifndef FUSETUNE_CLIENT_CONFIG_CACHE_H_
#define FUSETUNE_CLIENT_CONFIG_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/wire/provenance.h"

namespace fusetune {

// Where an answer came from: ConfigProvenance (fusetune/wire/provenance.h, the definition
// the service answers with), kFallback when the answer is the cache's own default.

// What Lookup returns; a small value type (no strings) so a hit copies a few words.
struct CachedConfig {
  KernelConfig config;
  ConfigProvenance provenance = ConfigProvenance::kFallback;
  double median_us = 0;  // measured latency on the source problem (0 when unknown)
};

// The fallback for `problem` on `device_class`: DefaultConfigOfDeviceClass
// (fusetune/kernels/default_config.h), the DefaultConfig of the class's backend that the
// service answers with when it has nothing tuned, so inference runs the same thing during an
// outage as after one. A class whose backend fusetune does not know (or an empty class) gets
// the CPU default.
KernelConfig DefaultKernelConfig(std::string_view device_class, const AttentionProblem& problem);

// The compact key a problem is cached under (exposed for tests and the benchmark).
struct ProblemCacheKey {
  uint64_t lengths_hash = 0;  // hash of cu_seqlens_q/k and kv_valid_lens; 0 when all empty
  int32_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  int32_t page_block_size = 0, kv_pool_pages = 0, block_table_width = 0, shared_prefix_pages = 0;
  float softmax_scale = 0;
  uint8_t kind = 0, dtype = 0, causal = 0, kv_storage = 0;

  static ProblemCacheKey Of(const AttentionProblem& problem);
  friend bool operator==(const ProblemCacheKey&, const ProblemCacheKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ProblemCacheKey& k) {
    return H::combine(std::move(h), k.lengths_hash, k.batch, k.q_heads, k.kv_heads, k.q_len,
                      k.kv_len, k.head_dim, k.page_block_size, k.kv_pool_pages, k.block_table_width,
                      k.shared_prefix_pages, k.softmax_scale, k.kind, k.dtype, k.causal, k.kv_storage);
  }
};

// The network side of the cache: answers a batch of problems. Replaceable for tests.
class BestConfigFetcher {
 public:
  virtual ~BestConfigFetcher() = default;
  // One answer per problem, in order; an entry is an error when the service refused that
  // problem (it is then cached as kFallback and not asked again until the TTL expires).
  // A whole-call error (Unavailable, DeadlineExceeded, ...) means "try again later".
  // Called from the cache's one background thread only.
  virtual absl::StatusOr<std::vector<absl::StatusOr<CachedConfig>>> Fetch(
      std::span<const AttentionProblem> problems) = 0;
};

struct GrpcFetcherOptions {
  // "host:port", or several replicas' "host:port,host:port": a fetch that finds the current
  // one away (UNAVAILABLE, DEADLINE_EXCEEDED) sends the next fetch to the next address.
  std::string target;
  std::string device_class;    // whose best configs to ask for
  std::string token;           // sent as "authorization: Bearer <token>" when not empty
  absl::Duration deadline = absl::Seconds(2);  // per BatchGetBestConfig call
  // PEM root certificates: TLS when set, plaintext otherwise.
  std::string tls_root_certs;
  // Bounds of the channel's reconnect backoff while the service is away (gRPC's own default
  // grows to 120 s). ConfigCache::Connect sets them to its retry_initial / retry_max.
  absl::Duration reconnect_initial = absl::Milliseconds(100);
  absl::Duration reconnect_max = absl::Seconds(10);
};
// A fetcher over gRPC (TuningService.BatchGetBestConfig). Creating it does not connect;
// the channel connects lazily and reconnects by itself.
std::unique_ptr<BestConfigFetcher> CreateGrpcFetcher(const GrpcFetcherOptions& options);

struct ConfigCacheOptions {
  std::string device_class;                     // whose DefaultKernelConfig to fall back to
  absl::Duration ttl = absl::Minutes(5);        // re-fetch entries older than this
  absl::Duration batch_window = absl::Milliseconds(2);  // gather misses this long first
  size_t max_batch = 1024;                      // problems per fetch (the service's limit)
  size_t max_entries = 1 << 16;                 // beyond this, misses are not queued
  absl::Duration retry_initial = absl::Milliseconds(100);  // backoff while unreachable
  absl::Duration retry_max = absl::Seconds(10);
};

struct ConfigCacheStats {
  int64_t misses = 0;            // lookups answered with kFallback because not cached
  int64_t entries = 0;           // problems cached (any provenance)
  int64_t pending = 0;           // problems queued for a fetch
  int64_t fetches_ok = 0;        // successful fetch calls
  int64_t fetches_failed = 0;    // failed fetch calls (service unreachable, deadline, ...)
  int64_t snapshots_published = 0;
};

class ConfigCache {
 public:
  // Starts the background thread. `fetcher` must not be null.
  ConfigCache(std::unique_ptr<BestConfigFetcher> fetcher, ConfigCacheOptions options);
  // A cache over CreateGrpcFetcher(fetcher_options); device_class comes from it, and the
  // channel's reconnect backoff is bounded by options.retry_initial / retry_max.
  static std::unique_ptr<ConfigCache> Connect(const GrpcFetcherOptions& fetcher_options,
                                              ConfigCacheOptions options = {});
  ~ConfigCache();
  ConfigCache(const ConfigCache&) = delete;
  ConfigCache& operator=(const ConfigCache&) = delete;

  // The cached answer for `problem`, or DefaultKernelConfig(device_class, problem) with
  // kFallback (and the problem
  // queued for a fetch). Never blocks on the network; never fails. Invalid problems are
  // queued like any other and answered kFallback once the service refuses them.
  CachedConfig Lookup(const AttentionProblem& problem) const;

  // Queues problems for fetching without looking them up (e.g. at model load).
  void Prefetch(std::span<const AttentionProblem> problems);

  // Wakes the background thread and waits up to `timeout` until nothing is queued and no
  // fetch is in flight. True when drained. For start-up, tests and examples; not for the
  // hot path.
  bool Flush(absl::Duration timeout);

  ConfigCacheStats stats() const;

 private:
  struct Snapshot {
    absl::flat_hash_map<ProblemCacheKey, CachedConfig> map;
  };
  struct Registered {   // what the fetch thread needs to refresh an entry
    AttentionProblem problem;
    absl::Time fetched_at;
  };

  const Snapshot* ReaderSnapshot() const;
  void Enqueue(const ProblemCacheKey& key, const AttentionProblem& problem) const;
  void FetchLoop();
  // Fetches `batch`, publishes the answers; false when the call failed.
  bool FetchAndPublish(std::vector<std::pair<ProblemCacheKey, AttentionProblem>> batch);

  const std::unique_ptr<BestConfigFetcher> fetcher_;
  const ConfigCacheOptions options_;
  const uint64_t cache_id_;  // distinguishes caches in the readers' thread-local slots

  // Published snapshot: replaced under snapshot_mu_, then version_ is bumped.
  mutable absl::Mutex snapshot_mu_;
  std::shared_ptr<const Snapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  std::atomic<uint64_t> version_{1};

  // Queue of misses and the fetch thread's state.
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<ProblemCacheKey, AttentionProblem> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ProblemCacheKey, Registered> registered_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool fetch_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  mutable bool wake_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // backoff
  mutable ConfigCacheStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // FetchLoop; last member, so it starts after the rest exists
};

}  // namespace fusetune

#endif  // FUSETUNE_CLIENT_CONFIG_CACHE_H_
