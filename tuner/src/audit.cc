#include "fusetune/tuner/audit.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fusetune/tuner/selection.h"
#include "internal.h"

namespace fusetune {
namespace {

using tuner_internal::Cancelled;
using tuner_internal::Clock;

absl::Status ValidateAudit(const AttentionProblem& problem, const KernelConfig& recorded,
                           const AuditOptions& options) {
  if (options.rounds < 3 || options.rounds > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("audit rounds must be in [3, 1000], got ", options.rounds));
  }
  if (options.min_contenders < 1 || options.max_contenders < options.min_contenders ||
      !(options.contender_fraction >= 0)) {
    return absl::InvalidArgumentError("audit: need 1 <= min_contenders <= max_contenders and contender_fraction >= 0");
  }
  if (absl::Status s = problem.Validate(); !s.ok()) return s;
  if (absl::Status s = recorded.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("recorded config ", recorded.Key(), ": ", s.message()));
  }
  return absl::OkStatus();
}

// Step 1's screens.
struct Screens {
  std::vector<Trial> trials;  // every screen trial, in the order measured
  std::vector<Trial> ok;      // the kOk ones, the recorded config's first
  int failed = 0;             // neither kOk nor kUnsupported
};

// Screens every config of `space` once, the recorded config first: if it cannot run here
// there is nothing to audit (FailedPrecondition).
absl::StatusOr<Screens> ScreenSpace(Runner& runner, const AttentionProblem& problem, const KernelConfig& recorded,
                                    const ConfigSpace& space, const TimingOptions& timing, int64_t run_id,
                                    const std::atomic<bool>* cancel) {
  const std::string recorded_key = recorded.Key();
  Screens screens;
  Trial recorded_screen = runner.Measure(problem, recorded, timing, run_id, 0, TrialStage::kAudit);
  screens.trials.push_back(recorded_screen);
  if (Cancelled(cancel)) return absl::CancelledError("audit stopped");
  if (recorded_screen.outcome != TrialOutcome::kOk) {
    return absl::FailedPreconditionError(absl::StrCat("the recorded config ", recorded_key, " is ",
                                                      std::string(TrialOutcomeName(recorded_screen.outcome)), " here: ",
                                                      recorded_screen.message));
  }
  screens.ok.push_back(recorded_screen);
  for (const KernelConfig& c : space.configs()) {
    if (c.Key() == recorded_key) continue;
    if (Cancelled(cancel)) return absl::CancelledError("audit stopped");
    Trial t = runner.Measure(problem, c, timing, run_id, 0, TrialStage::kAudit);
    if (Cancelled(cancel)) return absl::CancelledError("audit stopped");  // t was interrupted
    if (t.outcome == TrialOutcome::kOk) {
      screens.ok.push_back(t);
    } else if (t.outcome != TrialOutcome::kUnsupported) {
      ++screens.failed;
    }
    screens.trials.push_back(std::move(t));
  }
  return screens;
}

// The contenders: the recorded config, whatever its screen, and the fastest other screens,
// ranked as the sweep ranks its own (within contender_fraction of the fastest of all).
std::vector<KernelConfig> ChooseContenders(const std::vector<Trial>& ok, const KernelConfig& recorded,
                                           const AuditOptions& options) {
  const std::string recorded_key = recorded.Key();
  const std::vector<Trial> ranked = tuner_internal::RankedOk(ok);
  std::vector<Trial> others;
  for (const Trial& t : ranked) {
    if (t.config_key != recorded_key) others.push_back(t);
  }
  std::vector<KernelConfig> contenders{recorded};
  for (const Trial& t : tuner_internal::Contenders(others, tuner_internal::RankingUs(ranked.front()),
                                                   options.contender_fraction, options.min_contenders,
                                                   options.max_contenders)) {
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(t.config_key);
    if (c.ok()) contenders.push_back(*c);
  }
  return contenders;
}

// Step 3 on `s`, whose recorded and best fields start as the recorded config's: the closest
// contender is the largest median of recorded / contender. Above 1 it is the best and the
// regret is its excess; otherwise the recorded config is the best, regret 0, and the
// interval says how clearly (how much faster than the runner-up it is).
void CompareWithContenders(const std::vector<Trial>& rounds, AuditSummary& s) {
  const Trial& recorded_rounds = rounds.front();
  std::optional<RoundRatio> closest;
  for (size_t i = 1; i < rounds.size(); ++i) {
    if (rounds[i].outcome != TrialOutcome::kOk) continue;
    absl::StatusOr<RoundRatio> r = CompareRounds(recorded_rounds, rounds[i]);  // recorded / contender
    if (!r.ok() || (closest.has_value() && !(r->median > closest->median))) continue;
    closest = *r;
    if (r->median > 1.0) {
      s.best_config_key = rounds[i].config_key;
      s.best_us = rounds[i].median_us;
    }
  }
  if (closest.has_value()) {
    s.regret = std::max(0.0, closest->median - 1.0);
    s.regret_low = std::min(s.regret, closest->low - 1.0);
    s.regret_high = std::max(s.regret, closest->high - 1.0);
  }
}

}  // namespace

absl::StatusOr<AuditResult> RunAudit(Backend& backend, const AttentionProblem& problem,
                                     const KernelConfig& recorded, const AuditOptions& options,
                                     int64_t run_id, const std::atomic<bool>* cancel) {
  const auto start = Clock::now();
  if (absl::Status s = ValidateAudit(problem, recorded, options); !s.ok()) return s;
  absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(problem, backend, options.space);
  if (!space.ok()) return space.status();

  Runner runner(backend, options.runner);
  // Ctrl-C stops a trial in flight, not only the audit between trials.
  runner.SetStopToken(StopToken(cancel));
  const std::string recorded_key = recorded.Key();
  absl::StatusOr<Screens> screens =
      ScreenSpace(runner, problem, recorded, *space, options.runner.timing, run_id, cancel);
  if (!screens.ok()) return screens.status();
  std::vector<Trial> rounds =
      runner.MeasureRounds(problem, ChooseContenders(screens->ok, recorded, options), options.rounds,
                           options.runner.timing, options.seed, run_id, TrialStage::kAudit, 1, 0, cancel);
  if (Cancelled(cancel)) return absl::CancelledError("audit stopped");
  const Trial& recorded_rounds = rounds.front();
  if (recorded_rounds.outcome != TrialOutcome::kOk) {
    return absl::FailedPreconditionError(absl::StrCat("the recorded config ", recorded_key,
                                                      " failed in the rounds: ", recorded_rounds.message));
  }

  AuditResult result;
  AuditSummary& s = result.summary;
  s.run_id = run_id;
  s.device_class = backend.Describe().DeviceClass();
  s.problem_key = problem.Key();
  s.recorded_config_key = recorded_key;
  s.best_config_key = recorded_key;
  s.recorded_us = recorded_rounds.median_us;
  s.best_us = recorded_rounds.median_us;
  s.rounds = static_cast<int>(recorded_rounds.samples_us.size());
  CompareWithContenders(rounds, s);
  s.configs_measured = static_cast<int>(screens->ok.size());
  s.configs_failed = screens->failed;
  s.created_unix_ms = NowUnixMs();
  result.trials = std::move(screens->trials);
  result.trials.insert(result.trials.end(), rounds.begin(), rounds.end());
  result.seconds = tuner_internal::SecondsSince(start);
  return result;
}

}  // namespace fusetune
