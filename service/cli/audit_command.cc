// fusetune audit: re-measure recorded best configs against their whole space, interleaved,
// and record how much slower each pick is than the fastest config (its regret).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "fusetune/base/median.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/regress/audit_targets.h"
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

// One line per problem, for people: the regret and its interval come from per-round ratios
// (recorded / best in the same round), the microseconds from each config's own rounds; the two
// can disagree when the device drifts between rounds, so the line says which number is which.
std::string SummaryLine(const AuditSummary& a) {
  return fmt::format(
      "{}: recorded {}, best {}: regret {} (90% CI {} to {}) from per-round ratios; round medians {:.1f} us "
      "recorded, {:.1f} us best; {} rounds, {} configs measured{}",
      a.problem_key, a.recorded_config_key, a.best_config_key, Percent(a.regret), Percent(a.regret_low),
      Percent(a.regret_high), a.recorded_us, a.best_us, a.rounds, a.configs_measured,
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

AuditOptions MakeAuditOptions(const AuditFlags& f, const ConfigSpaceOptions& space) {
  AuditOptions options;
  options.space = space;
  options.rounds = f.rounds;
  options.runner.timing.repeats = f.repeats;
  options.runner.timing.warmup = f.warmup;
  options.seed = f.seed;
  return options;
}

// The problems named on the command line; empty under --all. Returns kExitOk with
// `*problems` filled, or the usage error's exit code (its message printed).
int ParseProblems(const std::string& cmd, const AuditFlags& f, std::vector<AttentionProblem>* problems) {
  const bool problem_flags_given = !f.problem.preset.empty() || !f.problem.problem_key.empty() || !f.problem.seq.empty();
  if (f.all && problem_flags_given) return UsageError(cmd, "use either --all or --seq/--problem/--preset, not both");
  if (f.all) return kExitOk;
  absl::StatusOr<std::vector<AttentionProblem>> built = f.problem.Build();
  if (!built.ok()) {
    return UsageError(cmd, std::string(built.status().message()) + " (or --all for every recorded best config)");
  }
  *problems = *std::move(built);
  return kExitOk;
}

// The audits done, as recorded, and their --json rows.
struct Audited {
  std::vector<AuditSummary> summaries;
  nlohmann::json rows = nlohmann::json::array();  // --json: one object per audit
  int failures = 0;                               // targets whose audit failed
  bool cancelled = false;                         // stopped by a signal
};

// The targets of --all or of the problems named, their notes printed; or the exit code to end
// with (its message printed).
int SelectTargets(const std::string& cmd, const AuditFlags& f, Store& store, const std::string& device_class,
                  const Backend& backend, const ConfigSpaceOptions& space, const std::vector<AttentionProblem>& problems,
                  regress::AuditTargets* targets) {
  absl::StatusOr<regress::AuditTargets> selected = f.all
                                                       ? regress::TargetsOfAllRecords(store, device_class, backend, space)
                                                       : regress::TargetsOfProblems(store, device_class, problems);
  if (f.all && absl::IsNotFound(selected.status())) {
    std::fprintf(stderr, "fusetune audit: %s in %s (run 'fusetune sweep' first)\n",
                 std::string(selected.status().message()).c_str(), RedactDatabaseUrl(f.db).c_str());
    return kExitNotFound;
  }
  if (!selected.ok()) return Failure(cmd, std::string(selected.status().message()));
  for (const std::string& note : selected->notes) std::fprintf(stderr, "fusetune audit: %s\n", note.c_str());
  *targets = *std::move(selected);
  return kExitOk;
}

// Audits each target in turn, recording and printing each audit once it is done. SIGINT and
// SIGTERM stop the audits between measurements; audits already finished stay recorded.
// Returns kExitOk with `*audited` filled, or the exit code to end with (its message printed).
int AuditTargets(const std::string& cmd, const std::vector<regress::AuditTarget>& targets, Backend& backend,
                 const AuditOptions& options, const regress::AuditRecording& to, bool json, Audited* audited) {
  StopOnSignal stop_on_signal;
  regress::AuditEvents events;
  events.on_audited = [&](const AuditSummary& summary, const AuditResult& result) {
    if (json) {
      audited->rows.push_back(SummaryJson(summary, result.seconds));
    } else {
      std::printf("%s\n", SummaryLine(summary).c_str());
      std::fflush(stdout);
    }
  };
  events.on_failed = [](const regress::AuditTarget& t, const absl::Status& error) {
    std::fprintf(stderr, "fusetune audit: %s: %s\n", t.problem.Key().c_str(), std::string(error.message()).c_str());
  };
  absl::StatusOr<regress::AuditedTargets> done =
      regress::AuditEach(targets, backend, options, to, stop_on_signal.flag(), events);
  if (!done.ok()) return Failure(cmd, std::string(done.status().message()));
  audited->summaries = std::move(done->summaries);
  audited->failures = done->failures;
  audited->cancelled = done->cancelled;
  return kExitOk;
}

// The closing lines: the JSON array, or the median and worst regret for people.
void PrintAudited(const Audited& audited, int64_t run_id, bool json) {
  if (json) {
    std::printf("%s\n", audited.rows.dump(2).c_str());
    return;
  }
  if (audited.summaries.empty()) return;
  std::vector<double> regrets;
  const AuditSummary* worst = nullptr;
  for (const AuditSummary& a : audited.summaries) {
    if (!std::isfinite(a.regret)) continue;  // an audit without a verdict (NaN) has no place in either
    regrets.push_back(a.regret);
    if (worst == nullptr || a.regret > worst->regret) worst = &a;
  }
  if (worst != nullptr) {
    std::printf("audited %zu problem(s) in run %lld: median regret %s, worst %s (%s)\n", audited.summaries.size(),
                static_cast<long long>(run_id), Percent(Median(regrets)).c_str(), Percent(worst->regret).c_str(),
                worst->problem_key.c_str());
  }
}

int RunAuditCommand(const AuditFlags& f) {
  const std::string cmd = "audit";
  std::vector<AttentionProblem> problems;
  if (int code = ParseProblems(cmd, f, &problems); code != kExitOk) return code;
  absl::StatusOr<ConfigSpaceOptions> space = ParseSpaceFilters(f.variants, f.precisions);
  if (!space.ok()) return UsageError(cmd, std::string(space.status().message()));
  const AuditOptions options = MakeAuditOptions(f, *space);

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
  regress::AuditTargets targets;
  exit_code = SelectTargets(cmd, f, **store, device_class, *backend, options.space, problems, &targets);
  if (exit_code != kExitOk) return exit_code;
  if (targets.list.empty()) return targets.failures > 0 ? kExitFailure : kExitNotFound;

  const std::string commit = BuiltCommit();
  absl::StatusOr<int64_t> run_id = (*store)->BeginRun(LocalRunInfo(device, commit, "audit"));
  if (!run_id.ok()) return Failure(cmd, std::string(run_id.status().message()));
  if (!f.json) {
    std::printf("audit run %lld on %s: %zu problem(s), %d rounds\n", static_cast<long long>(*run_id),
                device_class.c_str(), targets.list.size(), options.rounds);
    std::fflush(stdout);
  }
  Audited audited;
  const regress::AuditRecording to{**store, *run_id, device_class, commit};
  if (int code = AuditTargets(cmd, targets.list, *backend, options, to, f.json, &audited); code != kExitOk) {
    return code;
  }
  // The run holds what was measured, whole audits only; there is nothing to resume.
  if (absl::Status s = (*store)->FinishRun(*run_id); !s.ok()) return Failure(cmd, std::string(s.ToString()));

  PrintAudited(audited, *run_id, f.json);
  if (audited.cancelled) {
    std::fprintf(stderr, "fusetune audit: stopped by a signal after %zu of %zu problem(s)\n",
                 audited.summaries.size(), targets.list.size());
    return kExitCancelled;
  }
  return targets.failures + audited.failures > 0 ? kExitFailure : kExitOk;
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
