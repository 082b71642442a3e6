// Uses the installed C++ client as inference code would: looks up the config for a problem
// through a ConfigCache whose service is not running (the answer is the cache's fallback, at
// once), then runs that config through the C ABI on the CPU backend. Exit 0 when the lookup
// answered the documented default and the run matched an fp64 reference.
#include <cstdio>
#include <string>
#include <vector>

#include "fusetune/c_api.h"
#include "fusetune/client/config_cache.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "reference.h"

int main() {
  constexpr int kLen = 9, kHeads = 2, kDim = 64;
  fusetune::AttentionProblem problem;
  problem.q_heads = kHeads;
  problem.kv_heads = kHeads;
  problem.q_len = kLen;
  problem.kv_len = kLen;
  problem.head_dim = kDim;
  if (absl::Status s = problem.Validate(); !s.ok()) {
    std::printf("problem: %s\n", s.ToString().c_str());
    return 1;
  }

  // Nothing listens on port 1: the cache answers from its fallback and retries in the background.
  const std::string device_class = "cpu/consumer/x86-64";
  auto cache = fusetune::ConfigCache::Connect({.target = "127.0.0.1:1", .device_class = device_class});
  const fusetune::CachedConfig answer = cache->Lookup(problem);
  const std::string key = answer.config.Key();
  const bool is_default = key == fusetune::DefaultKernelConfig(device_class, problem).Key();
  std::printf("lookup %s: %s [%s]%s\n", problem.Key().c_str(), key.c_str(),
              std::string(fusetune::ConfigProvenanceName(answer.provenance)).c_str(),
              is_default ? " (the default config)" : "");
  if (answer.provenance != fusetune::ConfigProvenance::kFallback || !is_default) return 1;

  char err[256] = "";
  fusetune_config config;
  int rc = fusetune_config_from_key(key.c_str(), &config, err, sizeof err);
  fusetune_handle* handle = nullptr;
  if (rc == FUSETUNE_OK) rc = fusetune_create("cpu", 0, &handle, err, sizeof err);
  std::vector<float> q(kLen * kHeads * kDim), k(q.size()), v(q.size()), o(q.size());
  consumer_fill(q.data(), static_cast<int>(q.size()), 1);
  consumer_fill(k.data(), static_cast<int>(k.size()), 2);
  consumer_fill(v.data(), static_cast<int>(v.size()), 3);
  fusetune_problem p{};
  p.batch = 1;
  p.q_heads = kHeads;
  p.kv_heads = kHeads;
  p.q_len = kLen;
  p.kv_len = kLen;
  p.head_dim = kDim;
  p.dtype = FUSETUNE_FP32;
  if (rc == FUSETUNE_OK) rc = fusetune_run(handle, &p, &config, q.data(), k.data(), v.data(), o.data(), err, sizeof err);
  fusetune_destroy(handle);
  if (rc != FUSETUNE_OK) {
    std::printf("c_api run of %s: %s: %s\n", key.c_str(), fusetune_status_name(rc), err);
    return 1;
  }
  const double max_error = consumer_max_error(q.data(), k.data(), v.data(), o.data(), kLen, kHeads,
                                              kHeads, kDim, 0);
  std::printf("c_api cpu run of %s: OK, max error %.2e\n", key.c_str(), max_error);
  return max_error >= 0 && max_error < 1e-5 ? 0 : 1;
}
