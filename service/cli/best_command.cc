// fusetune best: the recorded best config of one problem on one device class.
#include <cstdio>
#include <memory>
#include <string>

#include "best_config_json.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#ifdef FUSETUNE_WITH_SERVICE
#include "server_connection.h"
#endif

namespace fusetune::cli {
namespace {

struct BestFlags {
  ProblemFlags problem;
  std::string db = "./fusetune.db";
  std::string backend = "cpu";
  int device = 0;
  std::string device_class;
  bool json = false;
#ifdef FUSETUNE_WITH_SERVICE
  ServerConnectionFlags remote;  // --server: ask a fusetune server instead of --db
#endif
};

int RunBestCommand(const BestFlags& f) {
  const std::string cmd = "best";
  absl::StatusOr<std::vector<AttentionProblem>> problems = f.problem.Build();
  if (!problems.ok()) return UsageError(cmd, std::string(problems.status().message()));
  const AttentionProblem& problem = problems->front();
  std::string device_class = f.device_class;
  if (device_class.empty()) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(f.backend, f.device);
    if (!backend.ok()) {
      return UsageError(cmd, fmt::format("{} (or give --device-class)", std::string(backend.status().message())));
    }
    device_class = (*backend)->Describe().DeviceClass();
  }
#ifdef FUSETUNE_WITH_SERVICE
  if (!f.remote.server.empty()) return RunRemoteBest(problem, device_class, f.remote, f.json);
#endif
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
  absl::StatusOr<BestConfig> best = (*store)->GetBestConfig(device_class, problem.Key());
  if (absl::IsNotFound(best.status())) {
    std::fprintf(stderr, "fusetune best: no best config recorded for %s on %s (run 'fusetune sweep' first)\n",
                 problem.Key().c_str(), device_class.c_str());
    return kExitNotFound;
  }
  if (!best.ok()) return Failure(cmd, std::string(best.status().message()));
  if (f.json) {
    const nlohmann::json j = BestConfigJson(*best);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s\n", best->config_key.c_str());
    std::printf("  problem   %s\n  device    %s\n  median    %.1f us (p10 %.1f, p90 %.1f)\n", best->problem_key.c_str(),
                best->device_class.c_str(), best->median_us, best->p10_us, best->p90_us);
    std::printf("  speedup   %.2fx vs materialized, %.2fx vs partial (fused)\n  from      run %lld, commit %s\n",
                best->speedup_vs_materialized, best->speedup_vs_partial, static_cast<long long>(best->run_id),
                best->commit.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddBestCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BestFlags>();
  CLI::App* best = app.add_subcommand("best", "Print the recorded best config for one problem (exit 3 if none).");
  flags->problem.Register(best, /*allow_list=*/false);
  AddDatabaseOption(best, &flags->db, "SQLite database file (only read)");
  best->add_option("--backend", flags->backend, "backend whose device class to look up")->capture_default_str();
  best->add_option("--device", flags->device, "device index")->capture_default_str()->check(CLI::NonNegativeNumber);
  best->add_option("--device-class", flags->device_class, "look up this device class instead, e.g. cuda/NVIDIA-H200/sm90");
  best->add_flag("--json", flags->json, "print JSON");
#ifdef FUSETUNE_WITH_SERVICE
  best->add_option("--server", flags->remote.server,
                   "ask this fusetune server (host:port) instead of --db: exact, nearest or default answer");
  flags->remote.Register(best, /*with_server=*/false);
#endif
  SetAction(best, context, [flags] { return RunBestCommand(*flags); });
}

}  // namespace fusetune::cli
