#include "fusetune/tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "fusetune/tuner/selection.h"

namespace fusetune {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t SearchSeed(uint64_t seed, std::string_view problem_key, Variant variant) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : problem_key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= static_cast<uint64_t>(variant) + 1;
  h *= 1099511628211ull;
  return h;
}

// Seconds the remaining problems should take: each at the latest problem's seconds per
// FLOP (the nearest in size, so fixed per-trial costs are weighted sensibly), capped by the
// per-problem time budget (plus one trial's overrun).
double EstimateRemaining(std::span<const AttentionProblem> remaining, double last_seconds, double last_flops,
                         double max_seconds_per_problem) {
  const double rate = last_flops > 0 ? last_seconds / last_flops : 0;
  double total = 0;
  for (const AttentionProblem& p : remaining) {
    double t = rate * p.Flops();
    if (max_seconds_per_problem > 0) t = std::min(t, 1.1 * max_seconds_per_problem);
    total += t;
  }
  return total;
}

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

}  // namespace

TrialLookup LookupInTrials(std::vector<Trial> trials) {
  auto by_id = std::make_shared<std::map<std::string, Trial>>();
  for (Trial& t : trials) by_id->emplace(t.trial_id, std::move(t));
  return [by_id](const std::string& id) -> absl::StatusOr<std::optional<Trial>> {
    auto it = by_id->find(id);
    if (it == by_id->end()) return std::optional<Trial>();
    return std::optional<Trial>(it->second);
  };
}

TrialLookup NoResume() {
  return [](const std::string&) -> absl::StatusOr<std::optional<Trial>> { return std::optional<Trial>(); };
}

absl::StatusOr<SweepResult> RunSweep(Backend& backend, std::span<const AttentionProblem> problems,
                                     const SweepOptions& options, int64_t run_id, TrialSink& sink,
                                     const TrialLookup& lookup, const SweepProgressCallback& progress,
                                     const std::atomic<bool>* cancel) {
  if (problems.empty()) return absl::InvalidArgumentError("the sweep has no problems");
  if (options.max_trials_per_variant < 0) return absl::InvalidArgumentError("max_trials_per_variant must be >= 0");
  if (options.max_seconds_per_problem < 0) return absl::InvalidArgumentError("max_seconds_per_problem must be >= 0");
  if (!lookup) return absl::InvalidArgumentError("the sweep needs a trial lookup (NoResume() for a fresh run)");
  const DeviceInfo device = backend.Describe();
  // Check every problem and build every space first: a bad tenth problem should fail the
  // sweep before nine problems' worth of measuring, not after.
  std::vector<ConfigSpace> spaces;
  for (const AttentionProblem& p : problems) {
    if (absl::Status s = p.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("problem ", p.Key(), ": ", s.message()));
    }
    absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(p, backend, options.space);
    if (!space.ok()) return space.status();
    spaces.push_back(*std::move(space));
  }

  Runner runner(backend, options.runner);
  SweepResult result;
  const auto sweep_start = Clock::now();
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    if (Cancelled(cancel)) {
      result.cancelled = true;
      break;
    }
    const AttentionProblem& problem = problems[pi];
    const std::string problem_key = problem.Key();
    const std::vector<Variant> variants = spaces[pi].variants();
    const auto problem_start = Clock::now();
    SweepProgress report;
    report.problem_index = static_cast<int>(pi);
    report.problem_count = static_cast<int>(problems.size());
    report.problem_key = problem_key;
    std::vector<Trial> problem_trials;

    for (size_t vi = 0; vi < variants.size() && !result.cancelled; ++vi) {
      StopCondition stop;
      stop.max_trials = options.max_trials_per_variant;
      if (options.max_seconds_per_problem > 0) {
        const double left = options.max_seconds_per_problem - SecondsSince(problem_start);
        // A variant always gets a little time, so every variant has a chance to measure.
        stop.max_seconds = std::max(left / static_cast<double>(variants.size() - vi), 1e-3);
      }
      std::unique_ptr<Searcher> searcher =
          CreateSearcher(options.strategy, spaces[pi].ForVariant(variants[vi]),
                         SearchSeed(options.seed, problem_key, variants[vi]));
      std::vector<Trial> history;
      int counted = 0;  // unsupported configs cost nothing, so they do not use the budget
      const auto variant_start = Clock::now();
      while (!stop.Reached(counted, SecondsSince(variant_start))) {
        if (Cancelled(cancel)) {
          result.cancelled = true;
          break;
        }
        std::optional<KernelConfig> config = searcher->Next(history);
        if (!config.has_value()) break;
        const std::string id = TrialId(run_id, problem_key, config->Key(), 0);
        absl::StatusOr<std::optional<Trial>> existing = lookup(id);
        if (!existing.ok()) return existing.status();
        Trial trial;
        if (existing->has_value()) {
          trial = **existing;
          ++report.trials_resumed;
        } else {
          trial = runner.Measure(problem, *config, run_id, 0);
          if (absl::Status s = sink.RecordTrial(trial); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat("recording trial ", trial.trial_id, " (",
                                                       problem_key, " ", trial.config_key, "): ", s.message()));
          }
          ++report.trials_measured;
        }
        if (trial.outcome != TrialOutcome::kUnsupported) ++counted;
        if (trial.outcome == TrialOutcome::kOk) ++report.trials_ok;
        history.push_back(std::move(trial));
      }
      problem_trials.insert(problem_trials.end(), history.begin(), history.end());
    }
    result.trials_measured += report.trials_measured;
    result.trials_resumed += report.trials_resumed;
    if (result.cancelled) break;  // an unfinished problem is neither reported nor selected

    absl::StatusOr<BestConfig> best = SelectBest(problem_trials, device.DeviceClass(), run_id, options.commit);
    if (best.ok()) {
      report.best = *best;
      result.best.push_back(*best);
    } else if (!absl::IsNotFound(best.status())) {
      return best.status();
    }
    ++result.problems_finished;
    report.problem_seconds = SecondsSince(problem_start);
    report.elapsed_seconds = SecondsSince(sweep_start);
    report.estimated_remaining_seconds = EstimateRemaining(problems.subspan(pi + 1), report.problem_seconds,
                                                           problem.Flops(), options.max_seconds_per_problem);
    if (progress) progress(report);
  }
  return result;
}

}  // namespace fusetune
