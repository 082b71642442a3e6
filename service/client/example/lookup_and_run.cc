// Example: how inference code uses fusetune's runtime config cache.
//
// Looks up the best config for an attention problem through a ConfigCache connected to a
// tuning service (`fusetune serve`), and runs the CPU fused kernel with it. The first
// lookup of a problem is a miss and answers the default config at once; the example then
// waits briefly (Flush) so the second lookup shows the service's answer. With no service
// running it still runs, on the default config: inference never waits for the tuner.
//
//   fusetune_lookup_and_run --server 127.0.0.1:50051 --seq 256 --heads 4 --head-dim 64
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "fusetune/client/config_cache.h"
#include "fusetune/kernels/backend.h"

int main(int argc, char** argv) {
  CLI::App app{"Look up a kernel config through the fusetune cache and run the CPU fused kernel"};
  std::string server = "127.0.0.1:50051";
  std::string token;
  int seq = 256, heads = 4, head_dim = 64;
  bool causal = false;
  double wait_s = 2.0;
  app.add_option("--server", server, "tuning service address host:port");
  app.add_option("--token", token, "token, if the service guards reads");
  app.add_option("--seq", seq, "sequence length (queries = keys)")->check(CLI::Range(1, 1 << 16));
  app.add_option("--heads", heads, "query and key/value heads")->check(CLI::Range(1, 64));
  app.add_option("--head-dim", head_dim, "head dimension")->check(CLI::Range(32, 256));
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--wait", wait_s, "seconds to wait for the service's answer")->check(CLI::Range(0.0, 60.0));
  CLI11_PARSE(app, argc, argv);

  auto backend = fusetune::CreateBackend("cpu");
  if (!backend.ok()) {
    std::fprintf(stderr, "cpu backend: %s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  const std::string device_class = (*backend)->Describe().DeviceClass();

  fusetune::AttentionProblem problem;
  problem.batch = 1;
  problem.q_heads = heads;
  problem.kv_heads = heads;
  problem.q_len = seq;
  problem.kv_len = seq;
  problem.head_dim = head_dim;
  problem.causal = causal;
  if (absl::Status s = problem.Validate(); !s.ok()) {
    std::fprintf(stderr, "problem: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  fusetune::GrpcFetcherOptions fetch;
  fetch.target = server;
  fetch.device_class = device_class;
  fetch.token = token;
  auto cache = fusetune::ConfigCache::Connect(fetch);

  auto t0 = std::chrono::steady_clock::now();
  fusetune::CachedConfig first = cache->Lookup(problem);  // a miss: answers at once
  auto t1 = std::chrono::steady_clock::now();
  std::printf("first lookup  (%.1f us): %s [%s]\n",
              std::chrono::duration<double, std::micro>(t1 - t0).count(), first.config.Key().c_str(),
              std::string(fusetune::ConfigProvenanceName(first.provenance)).c_str());
  const bool answered = cache->Flush(absl::Seconds(wait_s));
  fusetune::CachedConfig chosen = cache->Lookup(problem);
  std::printf("second lookup: %s [%s]%s\n", chosen.config.Key().c_str(),
              std::string(fusetune::ConfigProvenanceName(chosen.provenance)).c_str(),
              answered ? "" : " (service did not answer in time)");

  // The cache answers for the device class; this example runs on the CPU, so the threads of
  // a config tuned elsewhere are clamped to what the backend accepts.
  fusetune::KernelConfig config = chosen.config;
  if (!(*backend)->CanImplement(problem, config).ok()) {
    std::printf("config not runnable on this CPU, using the default\n");
    config = fusetune::DefaultKernelConfig(device_class, problem);
  }

  const size_t q_elems = static_cast<size_t>(problem.QElements());
  const size_t kv_elems = static_cast<size_t>(problem.KVElements());
  std::vector<float> q(q_elems), k(kv_elems), v(kv_elems), o(q_elems, 0.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  // Device buffers through the Backend API (host memory on the CPU backend).
  const size_t q_bytes = q_elems * sizeof(float), kv_bytes = kv_elems * sizeof(float);
  auto dq = (*backend)->Allocate(q_bytes);
  auto dk = (*backend)->Allocate(kv_bytes);
  auto dv = (*backend)->Allocate(kv_bytes);
  auto dout = (*backend)->Allocate(q_bytes);
  if (!dq.ok() || !dk.ok() || !dv.ok() || !dout.ok()) {
    std::fprintf(stderr, "allocation failed\n");
    return 1;
  }
  if (!(*backend)->CopyToDevice(dq->data(), q.data(), q_bytes).ok() ||
      !(*backend)->CopyToDevice(dk->data(), k.data(), kv_bytes).ok() ||
      !(*backend)->CopyToDevice(dv->data(), v.data(), kv_bytes).ok()) {
    std::fprintf(stderr, "copy to device failed\n");
    return 1;
  }
  fusetune::AttentionBuffers buffers{dq->data(), dk->data(), dv->data(), dout->data()};
  auto r0 = std::chrono::steady_clock::now();
  absl::Status run = (*backend)->Run(problem, config, buffers);
  auto r1 = std::chrono::steady_clock::now();
  if (!run.ok()) {
    std::fprintf(stderr, "run: %s\n", std::string(run.message()).c_str());
    return 1;
  }
  if (absl::Status s = (*backend)->CopyToHost(o.data(), dout->data(), q_bytes); !s.ok()) {
    std::fprintf(stderr, "copy to host: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  double checksum = 0;
  for (float x : o) checksum += std::fabs(x);
  std::printf("ran %s with %s in %.1f us (sum |O| = %.4f)\n", problem.Key().c_str(),
              config.Key().c_str(), std::chrono::duration<double, std::micro>(r1 - r0).count(),
              checksum);
  return 0;
}
