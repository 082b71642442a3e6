// fusetune sweep: tune problems on a local backend into the SQLite store, resumably.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusetune/regress/builds.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/records/commit.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/tuner/sweep.h"
#include "problem_flags.h"
#include "sweep_progress.h"

namespace fusetune::cli {
namespace {

struct SweepFlags {
  ProblemFlags problem;
  std::string backend = "cpu";
  int device = 0;
  std::string db = "./fusetune.db";
  std::vector<std::string> variants;
  std::vector<std::string> precisions;
  int max_trials = 0;
  double max_seconds = 60;
  std::string strategy = "auto";
  int final_rounds = FinalRoundOptions{}.rounds;
  double baseline_time_ratio = SweepOptions{}.baseline_time_ratio;
  uint64_t seed = 1;
  int repeats = 10;
  int warmup = 1;
  double timing_seconds = 1.0;
  double trial_time_limit = 60;
  std::string commit;
  std::string label = "sweep";
  // "auto": a progress line while a problem runs when stderr is a terminal; "always", "never".
  std::string progress = "auto";
  double progress_seconds = 10;
};

// The problem's progress line's verdict: the best, or why there is none.
std::string BestOrWhyNot(const SweepProgress& p) {
  std::string text;
  if (p.best) {
    text = fmt::format("best {} {:.1f} us", p.best->config_key, p.best->median_us);
    if (p.best->speedup_vs_materialized > 0) {
      text += fmt::format(", fused {:.2f}x vs materialized", p.best->speedup_vs_materialized);
    }
    if (p.best->speedup_vs_partial > 0) text += fmt::format(", {:.2f}x vs partial", p.best->speedup_vs_partial);
  } else {
    text = "no successful trial";
    std::string counts;
    for (const auto& [outcome, n] : p.outcomes) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, outcome);
    if (!counts.empty()) text += " (" + counts + ")";
    if (!p.first_failure.empty()) text += "; first: " + p.first_failure;
  }
  if (!p.incomplete.empty()) text += fmt::format(" [INCOMPLETE: {}]", p.incomplete);
  return text;
}

std::string Seconds(double s) {
  if (s < 60) return fmt::format("{:.1f} s", s);
  return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
}

int RunSweepCommand(const SweepFlags& f) {
  const std::string cmd = "sweep";
  absl::StatusOr<std::vector<AttentionProblem>> problems = f.problem.Build();
  if (!problems.ok()) return UsageError(cmd, std::string(problems.status().message()));
  absl::StatusOr<ConfigSpaceOptions> space = ParseSpaceFilters(f.variants, f.precisions);
  if (!space.ok()) return UsageError(cmd, std::string(space.status().message()));
  absl::StatusOr<SearchStrategy> strategy = ParseSearchStrategy(f.strategy);
  if (!strategy.ok()) return UsageError(cmd, std::string(strategy.status().message()));
  absl::StatusOr<CommitName> named_commit = ParseCommitName(f.commit.empty() ? BuiltCommit() : f.commit);
  if (!named_commit.ok()) return UsageError(cmd, "--commit: " + std::string(named_commit.status().message()));

  SweepOptions options;
  options.space = *space;
  options.strategy = *strategy;
  options.seed = f.seed;
  options.max_trials_per_variant = f.max_trials;
  options.max_seconds_per_problem = f.max_seconds;
  options.final_rounds.rounds = f.final_rounds;
  options.baseline_time_ratio = f.baseline_time_ratio;
  options.runner.timing.repeats = f.repeats;
  options.runner.timing.warmup = f.warmup;
  options.runner.timing.max_seconds = f.timing_seconds;
  options.runner.trial_time_limit_seconds = f.trial_time_limit;

  int exit_code = kExitOk;
  std::unique_ptr<Backend> backend = CreateLocalBackend(cmd, f.backend, f.device, &exit_code);
  if (backend == nullptr) return exit_code;
  const DeviceInfo device = backend->Describe();
  const std::string device_class = device.DeviceClass();
  // Check the options against the device before touching the database.
  if (absl::Status s = CheckSpaces(*problems, *backend, options.space); !s.ok()) {
    return UsageError(cmd, std::string(s.message()));
  }
  for (const AttentionProblem& p : *problems) {
    if (absl::Status s = CheckMemoryFits(p, device, options.runner); !s.ok()) {
      return UsageError(cmd, std::string(s.message()));
    }
  }

  // An abbreviated --commit names a commit the database holds (a sweep to resume, say): none
  // when there is no database yet, and a name that resolves to nothing creates none.
  const std::string where = "the database " + RedactDatabaseUrl(f.db);
  if (named_commit->kind == CommitNameKind::kAbbreviation && !IsPostgresUrl(f.db) && !std::filesystem::exists(f.db)) {
    return UsageError(cmd, std::string(regress::ResolveCommitFlag("--commit", named_commit->text, {}, where).status().message()));
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
  absl::StatusOr<std::vector<std::string>> known = regress::StoredCommitsAbbreviated(store->get(), named_commit->text);
  if (!known.ok()) return Failure(cmd, std::string(known.status().message()));
  absl::StatusOr<std::string> commit = regress::ResolveCommitFlag("--commit", named_commit->text, *known, where);
  if (!commit.ok()) return UsageError(cmd, std::string(commit.status().message()));
  options.commit = *std::move(commit);

  // Resume the newest unfinished run of the same commit, device and label, if any (the
  // sweep itself reads that run's recorded trials from the store, its sink).
  int64_t run_id = 0;
  absl::StatusOr<RunInfo> unfinished = (*store)->FindUnfinishedRun(options.commit, device_class, f.label);
  if (unfinished.ok()) {
    run_id = unfinished->run_id;
    absl::StatusOr<int64_t> recorded = (*store)->CountTrials(run_id);
    if (!recorded.ok()) return Failure(cmd, std::string(recorded.status().message()));
    std::printf("resuming run %lld (%lld trials recorded) on %s, commit %s, label %s\n",
                static_cast<long long>(run_id), static_cast<long long>(*recorded), device_class.c_str(),
                options.commit.c_str(), f.label.c_str());
  } else if (absl::IsNotFound(unfinished.status())) {
    absl::StatusOr<int64_t> id = (*store)->BeginRun(LocalRunInfo(device, options.commit, f.label));
    if (!id.ok()) return Failure(cmd, std::string(id.status().message()));
    run_id = *id;
    std::printf("run %lld on %s, commit %s, label %s: %zu problem(s), search %s%s%s, %d final rounds\n",
                static_cast<long long>(run_id), device_class.c_str(), options.commit.c_str(),
                f.label.c_str(), problems->size(), f.strategy.c_str(),
                f.max_trials > 0 ? fmt::format(", up to {} trials per variant", f.max_trials).c_str() : "",
                f.max_seconds > 0 ? fmt::format(", {} s per problem", f.max_seconds).c_str() : "",
                f.final_rounds);
  } else {
    return Failure(cmd, std::string(unfinished.status().message()));
  }
  std::fflush(stdout);

  // SIGINT/SIGTERM stop the sweep between trials (the trial in flight finishes and is
  // committed), leaving the run unfinished so that the same command resumes it.
  std::optional<StopOnSignal> stop_on_signal;
  stop_on_signal.emplace();
  int incomplete = 0;
  auto progress = [&](const SweepProgress& p) {
    if (!p.incomplete.empty()) ++incomplete;
    std::printf("[%d/%d] %s: %d trials (%d resumed, %d ok) in %s; %s; elapsed %s, ~%s remaining\n",
                p.problem_index + 1, p.problem_count, p.problem_key.c_str(),
                p.trials_measured + p.trials_resumed, p.trials_resumed, p.trials_ok,
                Seconds(p.problem_seconds).c_str(), BestOrWhyNot(p).c_str(), Seconds(p.elapsed_seconds).c_str(),
                Seconds(p.estimated_remaining_seconds).c_str());
    std::fflush(stdout);
  };
  // While a problem runs: a line on stderr at its start and every --progress-seconds.
  std::optional<SweepProgressTicker> ticker;
  if (f.progress == "always" || (f.progress == "auto" && isatty(STDERR_FILENO))) {
    ticker.emplace(stderr, std::chrono::duration<double>(f.progress_seconds));
    options.activity = [&ticker](const SweepActivity& a) { ticker->Update(a); };
  }
  // The store is the sweep's sink: trials and best configs go to it as they are made.
  absl::StatusOr<SweepResult> result =
      RunSweep(*backend, *problems, options, run_id, **store, progress, stop_on_signal->flag());
  ticker.reset();
  stop_on_signal.reset();
  if (!result.ok()) return Failure(cmd, std::string(result.status().ToString()));
  if (result->cancelled) {
    std::printf("stopped by a signal after %d problem(s); run the same command again to resume run %lld\n",
                result->problems_finished, static_cast<long long>(run_id));
    return kExitCancelled;
  }
  if (absl::Status s = (*store)->FinishRun(run_id); !s.ok()) return Failure(cmd, std::string(s.ToString()));
  std::printf("done: run %lld, %d problem(s), %d trials measured, %d resumed. 'fusetune report --db %s' shows the table.\n",
              static_cast<long long>(run_id), result->problems_finished, result->trials_measured,
              result->trials_resumed, RedactDatabaseUrl(f.db).c_str());
  if (incomplete > 0) {
    std::printf("%d problem(s) INCOMPLETE: the time budget ran out inside a trial (see above); a larger "
                "--max-seconds searches them fully\n",
                incomplete);
  }
  return kExitOk;
}

}  // namespace

void AddSweepCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* sweep = app.add_subcommand(
      "sweep",
      "Tune problems on a local backend: every trial (failures too) goes to the database; the best config "
      "per problem is recorded. An unfinished run with the same commit, device and label is resumed.");
  flags->problem.Register(sweep, /*allow_list=*/true);
  AddBackendOptions(sweep, &flags->backend, &flags->device);
  AddDatabaseOption(sweep, &flags->db, "SQLite database file (created if absent)");
  AddSpaceFilterOptions(sweep, &flags->variants, &flags->precisions);
  sweep->add_option("--max-trials", flags->max_trials, "screen trials per problem and variant (0 = no cap)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sweep->add_option("--max-seconds", flags->max_seconds,
                    "time budget per problem, s: 3/4 for the search, the rest for the final rounds (0 = unbounded); "
                    "a trial still running when it is spent is interrupted, and the final rounds never run past "
                    "twice it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sweep->add_option("--strategy", flags->strategy,
                    "search: auto (exhaustive up to 64 configs per variant, else halving), exhaustive, halving "
                    "(successive halving), random (seeded order, with --max-trials/--max-seconds)")
      ->check(CLI::IsMember({"auto", "exhaustive", "halving", "random"}))
      ->capture_default_str();
  sweep->add_option("--final-rounds", flags->final_rounds,
                    "interleaved rounds among the leaders after the search (0 = pick from the search alone)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sweep->add_option("--baseline-time-ratio", flags->baseline_time_ratio,
                    "each baseline variant (partial, materialized) is searched for at most this many times the "
                    "fused search's time, at least 0.5 s, unless --max-trials is set (0 = no cap: the baselines "
                    "share --max-seconds)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sweep->add_option("--seed", flags->seed, "seed of the random search and of the inputs")->capture_default_str();
  sweep->add_option("--repeats", flags->repeats, "timed launches per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  sweep->add_option("--warmup", flags->warmup, "untimed launches before timing")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sweep->add_option("--timing-seconds", flags->timing_seconds,
                    "stop timing a trial after this long (at least 3 samples are kept)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sweep->add_option("--trial-time-limit", flags->trial_time_limit,
                    "a run slower than this many seconds is recorded as timed_out")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sweep->add_option("--commit", flags->commit, "commit recorded with the run: 12 or more hex digits, 7 or more of a "
                                               "commit the database holds, or a label (default: built from " +
                                                   BuiltCommit() + ")");
  sweep->add_option("--label", flags->label, "run label (part of the resume identity)")->capture_default_str();
  sweep->add_option("--progress", flags->progress,
                    "a progress line on stderr while a problem runs (step, configs done of the space, budget left): "
                    "auto (when stderr is a terminal), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  sweep->add_option("--progress-seconds", flags->progress_seconds, "seconds between progress lines")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  SetAction(sweep, context, [flags] { return RunSweepCommand(*flags); });
}

}  // namespace fusetune::cli
