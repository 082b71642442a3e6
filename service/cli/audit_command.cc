// fusetune audit: re-measure recorded best configs against their whole space, interleaved,
// and record how much slower each pick is than the fastest config (its regret).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/tuner/audit.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct AuditFlags {
  ProblemFlags problem;
  bool all = false;
  std::string backend = "cpu";
  int device = 0;
  std::string db = "./fusetune.db";
  std::vector<std::string> variants;
  std::vector<std::string> precisions;
  int rounds = AuditOptions{}.rounds;
  int repeats = AuditOptions{}.runner.timing.repeats;
  int warmup = AuditOptions{}.runner.timing.warmup;
  uint64_t seed = AuditOptions{}.seed;
  bool json = false;
};

std::string Percent(double fraction) { return fmt::format("{:.2f}%", 100 * fraction); }

// One line per problem, for people: what was recorded, what is fastest, and how sure.
std::string SummaryLine(const AuditSummary& a) {
  return fmt::format(
      "{}: recorded {} {:.1f} us, best {} {:.1f} us, regret {} (90% CI {} to {}), {} rounds, {} configs "
      "measured{}",
      a.problem_key, a.recorded_config_key, a.recorded_us, a.best_config_key, a.best_us, Percent(a.regret),
      Percent(a.regret_low), Percent(a.regret_high), a.rounds, a.configs_measured,
      a.configs_failed > 0 ? fmt::format(", {} failed", a.configs_failed) : "");
}

nlohmann::json SummaryJson(const AuditSummary& a, double seconds) {
  return {{"audit_id", a.audit_id},
          {"run_id", a.run_id},
          {"device_class", a.device_class},
          {"problem", a.problem_key},
          {"recorded_config", a.recorded_config_key},
          {"recorded_us", a.recorded_us},
          {"best_config", a.best_config_key},
          {"best_us", a.best_us},
          {"regret", a.regret},
          {"regret_low", a.regret_low},
          {"regret_high", a.regret_high},
          {"rounds", a.rounds},
          {"configs_measured", a.configs_measured},
          {"configs_failed", a.configs_failed},
          {"commit", a.commit},
          {"seconds", seconds}};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int RunAuditCommand(const AuditFlags& f) {
  const std::string cmd = "audit";
  const bool problem_flags_given = !f.problem.preset.empty() || !f.problem.problem_key.empty() || !f.problem.seq.empty();
  if (f.all && problem_flags_given) return UsageError(cmd, "use either --all or --seq/--problem/--preset, not both");
  std::vector<AttentionProblem> problems;
  if (!f.all) {
    absl::StatusOr<std::vector<AttentionProblem>> built = f.problem.Build();
    if (!built.ok()) {
      return UsageError(cmd, std::string(built.status().message()) + " (or --all for every recorded best config)");
    }
    problems = *std::move(built);
  }
  absl::StatusOr<ConfigSpaceOptions> space = ParseSpaceFilters(f.variants, f.precisions);
  if (!space.ok()) return UsageError(cmd, std::string(space.status().message()));

  AuditOptions options;
  options.space = *space;
  options.rounds = f.rounds;
  options.runner.timing.repeats = f.repeats;
  options.runner.timing.warmup = f.warmup;
  options.seed = f.seed;

  int exit_code = kExitOk;
  std::unique_ptr<Backend> backend = CreateLocalBackend(cmd, f.backend, f.device, &exit_code);
  if (backend == nullptr) return exit_code;
  const DeviceInfo device = backend->Describe();
  const std::string device_class = device.DeviceClass();
  // Check the options against the device before touching the database.
  if (absl::Status s = CheckSpaces(problems, *backend, options.space); !s.ok()) {
    return UsageError(cmd, std::string(s.message()));
  }

  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStoreForWriting(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));

  // The recorded best config of each problem; a problem without one is named and skipped.
  struct Target {
    AttentionProblem problem;
    KernelConfig recorded;
  };
  std::vector<Target> targets;
  int failures = 0;
  if (f.all) {
    absl::StatusOr<std::vector<BestConfig>> best = (*store)->ListBestConfigs(device_class);
    if (!best.ok()) return Failure(cmd, std::string(best.status().message()));
    if (best->empty()) {
      std::fprintf(stderr, "fusetune audit: no best configs recorded on %s in %s (run 'fusetune sweep' first)\n",
                   device_class.c_str(), f.db.c_str());
      return kExitNotFound;
    }
    for (const BestConfig& b : *best) {
      absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(b.problem_key);
      if (!p.ok()) {
        // Varlen and padded keys carry only a hash of their lengths: the shape is not in the
        // database, so such a problem is audited by naming it in full, not from its record.
        std::fprintf(stderr, "fusetune audit: %s: skipped, the problem cannot be rebuilt from its key (%s)\n",
                     b.problem_key.c_str(), std::string(p.status().message()).c_str());
        continue;
      }
      absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(b.config_key);
      if (!c.ok()) {
        std::fprintf(stderr, "fusetune audit: %s: recorded config '%s' cannot be read: %s\n", b.problem_key.c_str(),
                     b.config_key.c_str(), std::string(c.status().message()).c_str());
        ++failures;
        continue;
      }
      if (absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(*p, *backend, options.space); !space.ok()) {
        std::fprintf(stderr, "fusetune audit: %s: %s\n", b.problem_key.c_str(),
                     std::string(space.status().message()).c_str());
        ++failures;
        continue;
      }
      targets.push_back({*p, *c});
    }
  } else {
    for (const AttentionProblem& p : problems) {
      absl::StatusOr<BestConfig> best = (*store)->GetBestConfig(device_class, p.Key());
      if (absl::IsNotFound(best.status())) {
        std::fprintf(stderr, "fusetune audit: %s: no best config recorded on %s (run 'fusetune sweep' first)\n",
                     p.Key().c_str(), device_class.c_str());
        continue;
      }
      if (!best.ok()) return Failure(cmd, std::string(best.status().message()));
      absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(best->config_key);
      if (!c.ok()) {
        std::fprintf(stderr, "fusetune audit: %s: recorded config '%s' cannot be read: %s\n", p.Key().c_str(),
                     best->config_key.c_str(), std::string(c.status().message()).c_str());
        ++failures;
        continue;
      }
      targets.push_back({p, *c});
    }
  }
  if (targets.empty()) return failures > 0 ? kExitFailure : kExitNotFound;

  const std::string commit = BuiltCommit();
  absl::StatusOr<int64_t> run_id = (*store)->BeginRun(LocalRunInfo(device, commit, "audit"));
  if (!run_id.ok()) return Failure(cmd, std::string(run_id.status().message()));
  if (!f.json) {
    std::printf("audit run %lld on %s: %zu problem(s), %d rounds\n", static_cast<long long>(*run_id),
                device_class.c_str(), targets.size(), options.rounds);
    std::fflush(stdout);
  }

  // SIGINT/SIGTERM stop the audit between measurements; audits already finished stay recorded.
  std::optional<StopOnSignal> stop_on_signal;
  stop_on_signal.emplace();
  std::vector<AuditSummary> audited;
  nlohmann::json rows = nlohmann::json::array();
  bool cancelled = false;
  for (const Target& t : targets) {
    absl::StatusOr<AuditResult> result =
        RunAudit(*backend, t.problem, t.recorded, options, *run_id, stop_on_signal->flag());
    if (absl::IsCancelled(result.status())) {
      cancelled = true;
      break;
    }
    if (!result.ok()) {
      std::fprintf(stderr, "fusetune audit: %s: %s\n", t.problem.Key().c_str(),
                   std::string(result.status().message()).c_str());
      ++failures;
      continue;
    }
    AuditSummary summary = result->summary;
    summary.run_id = *run_id;
    summary.device_class = device_class;
    summary.commit = commit;
    if (absl::Status s = (*store)->RecordTrials(result->trials); !s.ok()) {
      return Failure(cmd, fmt::format("recording the audit's trials: {}", s.ToString()));
    }
    absl::StatusOr<int64_t> audit_id = (*store)->RecordAudit(summary);
    if (!audit_id.ok()) return Failure(cmd, fmt::format("recording the audit: {}", audit_id.status().ToString()));
    summary.audit_id = *audit_id;
    if (f.json) {
      rows.push_back(SummaryJson(summary, result->seconds));
    } else {
      std::printf("%s\n", SummaryLine(summary).c_str());
      std::fflush(stdout);
    }
    audited.push_back(std::move(summary));
    // A signal during the last measurement of an audit that still completed: keep the
    // audit, start no other.
    if (stop_on_signal->stop_requested()) {
      cancelled = true;
      break;
    }
  }
  stop_on_signal.reset();
  // The run holds what was measured, whole audits only; there is nothing to resume.
  if (absl::Status s = (*store)->FinishRun(*run_id); !s.ok()) return Failure(cmd, std::string(s.ToString()));

  if (f.json) {
    std::printf("%s\n", rows.dump(2).c_str());
  } else if (!audited.empty()) {
    std::vector<double> regrets;
    const AuditSummary* worst = nullptr;
    for (const AuditSummary& a : audited) {
      if (!std::isfinite(a.regret)) continue;  // an audit without a verdict (NaN) has no place in either
      regrets.push_back(a.regret);
      if (worst == nullptr || a.regret > worst->regret) worst = &a;
    }
    if (worst != nullptr) {
      std::printf("audited %zu problem(s) in run %lld: median regret %s, worst %s (%s)\n", audited.size(),
                  static_cast<long long>(*run_id), Percent(Median(regrets)).c_str(), Percent(worst->regret).c_str(),
                  worst->problem_key.c_str());
    }
  }
  if (cancelled) {
    std::fprintf(stderr, "fusetune audit: stopped by a signal after %zu of %zu problem(s)\n", audited.size(),
                 targets.size());
    return kExitCancelled;
  }
  return failures > 0 ? kExitFailure : kExitOk;
}

}  // namespace

void AddAuditCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<AuditFlags>();
  CLI::App* audit = app.add_subcommand(
      "audit",
      "Re-measure each problem's recorded best config against every config of its space, interleaved, and "
      "record its regret (how much slower it is than the fastest) with a 90% confidence interval.");
  flags->problem.Register(audit, /*allow_list=*/true);
  audit->add_flag("--all", flags->all, "audit every best config recorded for this backend's device class");
  AddBackendOptions(audit, &flags->backend, &flags->device);
  AddDatabaseOption(audit, &flags->db, "SQLite database file holding the best configs (must exist)");
  AddSpaceFilterOptions(audit, &flags->variants, &flags->precisions);
  audit->add_option("--rounds", flags->rounds, "interleaved rounds of the final comparison")
      ->capture_default_str()
      ->check(CLI::Range(3, 1000));
  audit->add_option("--repeats", flags->repeats, "timed launches per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  audit->add_option("--warmup", flags->warmup, "untimed launches before each block")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  audit->add_option("--seed", flags->seed, "seed of the round order")->capture_default_str();
  audit->add_flag("--json", flags->json,
                  "print a JSON array of the audits (fields: problem, recorded_config, recorded_us, best_config, "
                  "best_us, regret, regret_low, regret_high, rounds, configs_measured, ...)");
  SetAction(audit, context, [flags] { return RunAuditCommand(*flags); });
}

}  // namespace fusetune::cli
