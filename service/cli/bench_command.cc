// fusetune bench: time given configs on given problems with the Runner (verified first) and
// print a table, storing nothing; or measure a suite's cells in blocks (--suite, stored as a
// bench run with --db); or write a suite from a database's best configs (--from-db).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_suite.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/tuner/runner.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct BenchFlags {
  ProblemFlags problem;
  std::string backend = "cpu";
  int device = 0;
  std::vector<std::string> configs;
  std::vector<std::string> variants;
  int block_m = 64;
  int block_s = 64;
  int threads = 0;  // 0 = all hardware threads (CPU) / 128 (GPU)
  std::string precision;
  int repeats = 10;
  int warmup = 1;
  double timing_seconds = 2.0;
  bool json = false;
  SuiteBenchFlags suite;
  SuiteFromDbFlags from_db;
};

int RunBenchCommand(const BenchFlags& f) {
  const std::string cmd = "bench";
  if (!f.from_db.db.empty()) return WriteSuiteFromDatabase(f.from_db);
  if (!f.suite.suite.empty()) {
    SuiteBenchFlags suite = f.suite;
    suite.json = f.json;
    return RunSuiteBench(suite, f.backend, f.device);
  }
  absl::StatusOr<std::vector<AttentionProblem>> problems = f.problem.Build();
  if (!problems.ok()) return UsageError(cmd, std::string(problems.status().message()));
  int exit_code = kExitOk;
  std::unique_ptr<Backend> backend = CreateLocalBackend(cmd, f.backend, f.device, &exit_code);
  if (backend == nullptr) return exit_code;
  const DeviceInfo device = backend->Describe();

  std::vector<KernelConfig> configs;
  for (const std::string& key : f.configs) {
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(key);
    if (!c.ok()) return UsageError(cmd, fmt::format("--config {}: {}", key, std::string(c.status().message())));
    configs.push_back(*c);
  }
  if (configs.empty() || !f.variants.empty()) {
    std::vector<std::string> names = f.variants;
    if (names.empty()) names = {"fused", "partial", "materialized"};
    absl::StatusOr<std::vector<Variant>> variants = ParseVariants(names);
    if (!variants.ok()) return UsageError(cmd, std::string(variants.status().message()));
    for (Variant v : *variants) {
      KernelConfig c;
      c.variant = v;
      c.block_m = f.block_m;
      c.block_s = f.block_s;
      c.threads = f.threads > 0 ? f.threads : (device.backend == "cpu" ? std::max(1, device.sm_count) : 128);
      if (!f.precision.empty()) {
        absl::StatusOr<Precision> p = ParsePrecision(f.precision);
        if (!p.ok()) return UsageError(cmd, fmt::format("--precision: {}", std::string(p.status().message())));
        c.precision = *p;
      }
      if (absl::Status s = c.Validate(); !s.ok()) return UsageError(cmd, std::string(s.message()));
      configs.push_back(c);
    }
  }

  RunnerOptions options;
  options.timing.repeats = f.repeats;
  options.timing.warmup = f.warmup;
  options.timing.max_seconds = f.timing_seconds;
  Runner runner(*backend, options);
  nlohmann::json rows = nlohmann::json::array();
  if (!f.json) std::printf("device %s\n", device.DeviceClass().c_str());
  for (const AttentionProblem& problem : *problems) {
    std::vector<Trial> trials;
    double materialized_us = 0;
    for (const KernelConfig& c : configs) {
      trials.push_back(runner.Measure(problem, c, /*run_id=*/0));
      const Trial& t = trials.back();
      if (t.outcome == TrialOutcome::kOk && c.variant == Variant::kMaterialized &&
          (materialized_us == 0 || t.median_us < materialized_us)) {
        materialized_us = t.median_us;
      }
    }
    if (!f.json) {
      std::printf("\n%s\n\n| config | outcome | median us | p10-p90 us | TFLOP/s | K/V GB/s | vs materialized "
                  "| max rel error |\n",
                  problem.Key().c_str());
      std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    }
    for (const Trial& t : trials) {
      const bool ok = t.outcome == TrialOutcome::kOk;
      const double tflops = ok && t.median_us > 0 ? t.flops / (t.median_us * 1e-6) / 1e12 : 0;
      // Decode's figure of merit: the bytes of K and V a kernel must read over its time.
      const double kv_gbps = ok && t.median_us > 0 ? problem.KVBytesRead() / (t.median_us * 1e-6) / 1e9 : 0;
      const double vs = ok && materialized_us > 0 ? materialized_us / t.median_us : 0;
      if (f.json) {
        nlohmann::json row = {{"problem", t.problem_key}, {"config", t.config_key},
                              {"outcome", std::string(TrialOutcomeName(t.outcome))}, {"message", t.message},
                              {"median_us", t.median_us}, {"p10_us", t.p10_us}, {"p90_us", t.p90_us},
                              {"samples", t.samples_us.size()}, {"tflops", tflops}, {"kv_gbps", kv_gbps},
                              {"speedup_vs_materialized", vs}, {"max_rel_error", t.max_rel_error}};
        if (problem.is_kv_quantized()) row["unquantised_rel_error"] = t.unquantised_rel_error;
        rows.push_back(std::move(row));
        continue;
      }
      if (ok) {
        // K/V stored as e4m3: the error against the unquantised reference beside the kernel's.
        const std::string error = problem.is_kv_quantized()
                                      ? fmt::format("{:.1e} (vs unquantised {:.1e})", t.max_rel_error,
                                                    t.unquantised_rel_error)
                                      : fmt::format("{:.1e}", t.max_rel_error);
        std::printf("| %s | ok | %.1f | %.1f-%.1f | %.4g | %.4g | %s | %s |\n", t.config_key.c_str(), t.median_us,
                    t.p10_us, t.p90_us, tflops, kv_gbps, vs > 0 ? fmt::format("{:.2f}x", vs).c_str() : "-",
                    error.c_str());
      } else {
        std::printf("| %s | %s: %s | - | - | - | - | - | %s |\n", t.config_key.c_str(),
                    std::string(TrialOutcomeName(t.outcome)).c_str(), t.message.c_str(),
                    t.checked_elements > 0 ? fmt::format("{:.1e}", t.max_rel_error).c_str() : "-");
      }
    }
  }
  if (f.json) std::printf("%s\n", rows.dump(2).c_str());
  return kExitOk;
}

}  // namespace

void AddBenchCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Verify and time given configs (or one config per variant) on problems, no database; or measure a bench "
               "suite (--suite, stored with --db); or write a suite from a database (--from-db).");
  flags->problem.Register(bench, /*allow_list=*/true);
  AddBackendOptions(bench, &flags->backend, &flags->device);
  bench->add_option("--config", flags->configs, "config key, e.g. fused/bm64/bs64/t2/fp32/st1 (repeatable)");
  bench->add_option("--variants", flags->variants,
                    "comma-separated variants timed with --block-m/--block-s/--threads (default all, "
                    "unless --config is given)")
      ->delimiter(',');
  bench->add_option("--block-m", flags->block_m, "query rows per tile")->capture_default_str()->check(CLI::Range(1, 1024));
  bench->add_option("--block-s", flags->block_s, "keys per tile")->capture_default_str()->check(CLI::Range(1, 1024));
  bench->add_option("--threads", flags->threads, "threads (0 = CPU: all hardware threads, GPU: 128)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  bench->add_option("--precision", flags->precision, "fp32, tf32, fp16 or bf16 (default fp32)");
  bench->add_option("--repeats", flags->repeats, "timed launches")->capture_default_str()->check(CLI::Range(1, 100000));
  bench->add_option("--warmup", flags->warmup, "untimed launches first")->capture_default_str()->check(CLI::Range(0, 1000));
  bench->add_option("--timing-seconds", flags->timing_seconds, "stop timing after this long (>= 3 samples)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  bench->add_flag("--json", flags->json, "print JSON");
  CLI::Option* suite = bench->add_option("--suite", flags->suite.suite,
                                         "measure the cells of this suite file in blocks (suites/README.md); "
                                         "exit 0 ok, 1 a cell failed verification, 2 error");
  bench->add_option("--db", flags->suite.db, "with --suite: store the measurement as a bench run in this database");
  bench->add_option("--blocks", flags->suite.blocks, "with --suite: blocks per cell (default: the suite's)")
      ->check(CLI::Range(3, 1000));
  AddPlantSlowdownOption(bench, &flags->suite.plant_slowdowns);
  CLI::Option* from_db = bench->add_option("--from-db", flags->from_db.db,
                                           "write a suite of this database's best configs (with --suite-out)");
  bench->add_option("--suite-out", flags->from_db.out, "with --from-db: the suite file to write");
  bench->add_option("--device-class", flags->from_db.device_class,
                    "with --from-db: whose best configs (default: the only device class in the database)");
  bench->add_option("--name", flags->from_db.name, "with --from-db: the suite's name (default: the file's stem)");
  suite->excludes(from_db);
  SetAction(bench, context, [flags] { return RunBenchCommand(*flags); });
}

}  // namespace fusetune::cli
