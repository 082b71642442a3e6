// fusetune bench-serve: this build as one side of an interleaved comparison. Another fusetune
// (`regress`) starts it and sends it cells to verify and blocks to measure, one JSON line each
// way on stdin and stdout (regress/src/protocol.h); nothing else is written to stdout. With
// --capi-library it serves another build's kernels through that build's C ABI library instead
// of its own (regress/include/fusetune/regress/capi_backend.h): how builds older than bench-serve
// are compared and bisected. A driver may also have it load another build's C ABI library as a
// further side (the protocol's open_side), measured by the same Runner on the same inputs: how
// `regress` measures two builds in one process.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_suite.h"
#include "commands.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/capi_backend.h"
#include "fusetune/regress/planted_slowdown.h"
#include "fusetune/regress/suite_bench.h"
#include "fusetune/records/commit.h"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct BenchServeFlags {
  std::string backend = "cpu";
  int device = 0;
  TimingOptions block;
  std::vector<std::string> plant_slowdowns;
  int timing_cpu = -1;
  std::string capi_library;
  std::string capi_commit = kUnknownCommit;
};

int RunBenchServe(const BenchServeFlags& f) {
  int exit_code = kExitOk;
  std::unique_ptr<Backend> backend = CreateMeasuredBackend("bench-serve", f.backend, f.device, f.plant_slowdowns, &exit_code);
  if (backend == nullptr) return exit_code;
  std::string commit = BuiltCommit();
  if (!f.capi_library.empty()) {
    if (!f.plant_slowdowns.empty()) return Failure("bench-serve", "--plant-slowdown and --capi-library do not combine", 2);
    absl::StatusOr<std::unique_ptr<Backend>> library =
        regress::OpenCapiBackend(f.capi_library, f.backend, f.device, std::move(backend));
    if (!library.ok()) return Failure("bench-serve", std::string(library.status().message()), 2);
    backend = std::move(*library);
    absl::StatusOr<std::string> capi_commit = CanonicalCommit(f.capi_commit);
    if (!capi_commit.ok()) return Failure("bench-serve", "--capi-commit: " + std::string(capi_commit.status().message()), 2);
    commit = *std::move(capi_commit);
  }
  regress::RunnerBlockSource source(*backend, commit, f.block, RunnerOptions{}, f.timing_cpu);
  // The planted slowdowns a planted side gets, parsed once (CreateMeasuredBackend checked them).
  absl::StatusOr<std::vector<regress::PlantedSlowdown>> parsed = regress::ParsePlantedSlowdowns(f.plant_slowdowns);
  if (!parsed.ok()) return Failure("bench-serve", std::string(parsed.status().message()), 2);
  const std::vector<regress::PlantedSlowdown> slowdowns = *std::move(parsed);
  const regress::SideOpener open_side = [&](const std::string& library, const std::string& side_commit,
                                            bool planted) -> absl::StatusOr<regress::BlockSource*> {
    if (planted && slowdowns.empty()) {
      return absl::InvalidArgumentError("a planted side needs --plant-slowdown specs; this bench-serve has none");
    }
    absl::StatusOr<std::unique_ptr<Backend>> memory = CreateBackend(f.backend, f.device);
    if (!memory.ok()) return memory.status();
    absl::StatusOr<std::unique_ptr<Backend>> kernels =
        regress::OpenCapiBackend(library, f.backend, f.device, *std::move(memory));
    if (!kernels.ok()) return kernels.status();
    if (planted) {
      *kernels = std::make_unique<regress::PlantedSlowdownBackend>(*std::move(kernels), slowdowns);
    }
    return source.AddSide(*std::move(kernels), side_commit);
  };
  absl::Status served = regress::ServeBlocks(source, stdin, stdout, open_side);
  if (!served.ok()) {
    std::fprintf(stderr, "fusetune bench-serve: %s\n", std::string(served.message()).c_str());
    return 2;
  }
  return kExitOk;
}

}  // namespace

void AddBenchServeCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BenchServeFlags>();
  CLI::App* serve = app.add_subcommand(
      "bench-serve", "Measure cells for another fusetune's 'regress' (a JSON line protocol on stdin/stdout).");
  AddBackendOptions(serve, &flags->backend, &flags->device);
  serve->add_option("--warmup", flags->block.warmup, "untimed launches before each block")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  serve->add_option("--repeats", flags->block.repeats, "timed launches per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  serve->add_option("--block-seconds", flags->block.max_seconds, "stop a block after this long (>= 3 launches)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve->add_option("--flush-l2", flags->block.flush_l2, "GPU: evict L2 before each timed launch")->capture_default_str();
  serve->add_flag("--graph-timing", flags->block.graph,
                  "GPU: time each block as one CUDA graph where the backend can (CUDA)");
  AddPlantSlowdownOption(serve, &flags->plant_slowdowns);
  serve->add_option("--timing-cpu", flags->timing_cpu, "pin the measuring thread to this CPU during each block (-1: no)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 4095));
  serve->add_option("--capi-library", flags->capi_library,
                    "serve the kernels of another build's libfusetune_capi.so (C ABI version 1 or 2) instead of this build's");
  serve->add_option("--capi-commit", flags->capi_commit, "the commit of --capi-library's build, as the hello reports it")
      ->capture_default_str();
  SetAction(serve, context, [flags] { return RunBenchServe(*flags); });
}

}  // namespace fusetune::cli
