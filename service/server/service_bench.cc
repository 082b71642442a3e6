// fusetune_service_bench: GetBestConfig over loopback gRPC against an in-process Server with
// a seeded SQLite database; closed-loop clients (each on its own channel and TCP connection)
// for a fixed time at each concurrency. Prints p50/p99 latency and throughput as a Markdown
// table (docs/perf.md, "Service: GetBestConfig over loopback").
//
//   fusetune_service_bench [--clients 1,8,64] [--seconds 3] [--warmup 0.5] [--lookup exact|nearest|default]
//                          [--replicas 1] [--db PATH_OR_URL]
//
// --replicas N starts N servers over the one database (replicas of the service, each with its
// own store connection and shared-state poll) and spreads the clients over them round-robin;
// --db seeds and serves that database (an SQLite file or a postgresql:// URL of an empty
// database) instead of a temporary SQLite file.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <memory>
#include <vector>

#include "CLI/CLI.hpp"
#include "fusetune/wire/connection.h"
#include "fusetune/db/store.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/service/server.h"
#include "grpcpp/grpcpp.h"

namespace fusetune {
namespace {

constexpr char kToken[] = "bench-token-0123456789";
constexpr char kClass[] = "cpu/Bench-CPU/x86_64";

struct ClientResult {
  std::vector<double> micros;
  int64_t errors = 0;
};

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

int Main(int argc, char** argv) {
  CLI::App app{"GetBestConfig over loopback gRPC: p50/p99 latency and throughput by concurrency"};
  std::vector<int> clients = {1, 8, 64};
  double seconds = 3, warmup = 0.5;
  std::string lookup = "exact";
  int replicas = 1;
  std::string db_location;
  app.add_option("--clients", clients, "concurrent closed-loop clients")->delimiter(',');
  app.add_option("--seconds", seconds, "measured time per concurrency level");
  app.add_option("--warmup", warmup, "unmeasured time before each level");
  app.add_option("--lookup", lookup, "exact, nearest or default answers")->check(CLI::IsMember({"exact", "nearest", "default"}));
  app.add_option("--replicas", replicas, "servers over the one database; clients spread round-robin")
      ->check(CLI::Range(1, 16));
  app.add_option("--db", db_location, "database to seed and serve (default: a temporary SQLite file)");
  CLI11_PARSE(app, argc, argv);

  const std::string dir = (std::filesystem::temp_directory_path() / ("fusetune-bench-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string db = db_location.empty() ? dir + "/bench.db" : db_location;
  {
    // 50 tuned shapes: the seed shapes at 5 lengths x 10 head counts.
    auto store = Store::Open(db);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      return 1;
    }
    RunInfo run;
    run.commit = "bench";
    run.device.backend = "cpu";
    const int64_t run_id = (*store)->BeginRun(run).value();
    for (int heads = 1; heads <= 10; ++heads) {
      for (int s : {128, 256, 512, 1024, 2048}) {
        AttentionProblem p;
        p.q_heads = p.kv_heads = heads;
        p.q_len = p.kv_len = s;
        BestConfig b;
        b.device_class = kClass;
        b.problem_key = p.Key();
        b.config_key = "fused/bm64/bs64/t1/fp32/st1";
        b.median_us = s;
        b.run_id = run_id;
        b.commit = "bench";
        (void)(*store)->UpsertBestConfig(b);
      }
    }
  }
  ServerOptions options;
  options.db_path = db;
  options.token = kToken;
  options.metrics_address = "127.0.0.1:0";
  options.max_threads = 512;
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < replicas; ++i) {
    auto server = Server::Start(options);
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
      return 1;
    }
    addresses.push_back("127.0.0.1:" + std::to_string((*server)->port()));
    servers.push_back(*std::move(server));
  }

  v1::GetBestConfigRequest request;
  AttentionProblem p;
  p.q_heads = p.kv_heads = 8;
  p.q_len = p.kv_len = lookup == "exact" ? 1024 : 1536;  // 1536 is untuned: nearest
  if (lookup == "default") p.head_dim = 128;            // nothing tuned at d128
  ProblemToProto(p, request.mutable_problem());
  request.set_device_class(kClass);

  std::printf("| clients | requests | throughput (req/s) | p50 (µs) | p99 (µs) | mean (µs) | errors |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int n : clients) {
    std::vector<ClientResult> results(static_cast<size_t>(n));
    std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one TCP connection per client
        auto channel = grpc::CreateCustomChannel(addresses[static_cast<size_t>(i) % addresses.size()],
                                                 grpc::InsecureChannelCredentials(), args);
        auto stub = v1::TuningService::NewStub(channel);
        ClientResult& r = results[static_cast<size_t>(i)];
        r.micros.reserve(1 << 16);
        v1::GetBestConfigResponse response;
        while (phase.load(std::memory_order_relaxed) < 2) {
          grpc::ClientContext ctx;
          AddBearerToken(ctx, kToken);
          const auto t0 = std::chrono::steady_clock::now();
          grpc::Status s = stub->GetBestConfig(&ctx, request, &response);
          const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
          if (phase.load(std::memory_order_relaxed) == 1) {
            if (s.ok()) {
              r.micros.push_back(us);
            } else {
              ++r.errors;
            }
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
    phase = 1;
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    phase = 2;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (auto& t : threads) t.join();
    std::vector<double> all;
    int64_t errors = 0;
    for (auto& r : results) {
      all.insert(all.end(), r.micros.begin(), r.micros.end());
      errors += r.errors;
    }
    double sum = 0;
    for (double v : all) sum += v;
    const double mean = all.empty() ? 0 : sum / static_cast<double>(all.size());
    const double p50 = Percentile(all, 0.50), p99 = Percentile(all, 0.99);
    std::printf("| %d | %zu | %.0f | %.0f | %.0f | %.0f | %lld |\n", n, all.size(),
                static_cast<double>(all.size()) / elapsed, p50, p99, mean, static_cast<long long>(errors));
    std::fflush(stdout);
  }
  for (auto& server : servers) server->Shutdown();
  servers.clear();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
}  // namespace fusetune

int main(int argc, char** argv) { return fusetune::Main(argc, argv); }
