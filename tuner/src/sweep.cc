#include "fusetune/tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "fusetune/tuner/selection.h"
#include "internal.h"

namespace fusetune {
namespace {

using tuner_internal::Cancelled;
using tuner_internal::Clock;
using tuner_internal::Contenders;
using tuner_internal::RankedOk;
using tuner_internal::RankingUs;
using tuner_internal::SecondsSince;

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

// The run's trials recorded before this sweep started, by trial id: what resume reuses.
class RecordedTrialIndex {
 public:
  explicit RecordedTrialIndex(std::vector<Trial> trials) {
    for (Trial& t : trials) by_id_.emplace(t.trial_id, std::move(t));
  }
  // The recorded trial with this id, or null when it is not recorded.
  const Trial* Find(const std::string& trial_id) const {
    auto it = by_id_.find(trial_id);
    return it == by_id_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, Trial> by_id_;
};

std::vector<KernelConfig> ConfigsOf(const std::vector<Trial>& trials) {
  std::vector<KernelConfig> out;
  for (const Trial& t : trials) {
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(t.config_key);
    if (c.ok()) out.push_back(*c);
  }
  return out;
}

}  // namespace

absl::StatusOr<SweepResult> RunSweep(Backend& backend, std::span<const AttentionProblem> problems,
                                     const SweepOptions& options, int64_t run_id, RecordSink& sink,
                                     const SweepProgressCallback& progress,
                                     const std::atomic<bool>* cancel) {
  if (problems.empty()) return absl::InvalidArgumentError("the sweep has no problems");
  if (options.max_trials_per_variant < 0) return absl::InvalidArgumentError("max_trials_per_variant must be >= 0");
  if (options.max_seconds_per_problem < 0) return absl::InvalidArgumentError("max_seconds_per_problem must be >= 0");
  const FinalRoundOptions& fin = options.final_rounds;
  if (fin.rounds < 0 || fin.rounds > 1000 || fin.min_candidates < 1 || fin.max_candidates < fin.min_candidates ||
      fin.baseline_candidates < 0 || !(fin.near_fraction >= 0) || !(fin.time_ratio >= 0) ||
      !(fin.max_baseline_ratio > 0) ||
      !(fin.min_seconds >= 0) || !(options.baseline_time_ratio >= 0)) {
    return absl::InvalidArgumentError(
        "final rounds: rounds in [0, 1000], 1 <= min_candidates <= max_candidates, baseline_candidates >= 0, "
        "near_fraction, time_ratio and min_seconds >= 0; baseline_time_ratio >= 0");
  }
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
  absl::StatusOr<std::vector<Trial>> recorded_trials = sink.RecordedTrials(run_id);
  if (!recorded_trials.ok()) {
    return absl::Status(recorded_trials.status().code(), absl::StrCat("reading the recorded trials of run ", run_id,
                                                                      ": ", recorded_trials.status().message()));
  }
  const RecordedTrialIndex recorded(*std::move(recorded_trials));

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
    std::vector<Trial> final_contenders;
    double fused_search_seconds = -1;  // < 0 until the fused variant has been searched
    double fused_leader_us = 0;        // the fused leader's ranking time, 0 until known
    const uint64_t problem_seed = SearchSeed(options.seed, problem_key, Variant::kFused) ^ 0x5bd1e995u;

    // One set of interleaved rounds, resumable: a set found whole is reused; a set found in
    // part (interrupted while being recorded) is measured again under the next attempt.
    auto round_set = [&](const std::vector<Trial>& of, TrialStage stage, int attempt_base, int rounds,
                         const TimingOptions& block, double max_seconds) -> absl::StatusOr<std::vector<Trial>> {
      const std::vector<KernelConfig> configs = ConfigsOf(of);
      for (int retry = 0; retry < kHalvingAttemptStride; ++retry) {
        const int attempt = attempt_base + retry;
        std::vector<Trial> found;
        for (const KernelConfig& c : configs) {
          if (const Trial* t = recorded.Find(TrialId(run_id, problem_key, c.Key(), attempt, stage))) {
            found.push_back(*t);
          }
        }
        if (!found.empty() && found.size() == configs.size()) {
          report.trials_resumed += static_cast<int>(found.size());
          return found;
        }
        if (!found.empty()) continue;
        std::vector<Trial> measured =
            runner.MeasureRounds(problem, configs, rounds, block, problem_seed + static_cast<uint64_t>(attempt), run_id,
                                 stage, attempt, max_seconds, cancel);
        if (Cancelled(cancel)) {
          result.cancelled = true;  // a set cut short is not recorded: its rounds are incomplete
          return std::vector<Trial>();
        }
        // The rounds only time: each trial keeps the verification errors of the measurement
        // it continues, so the pick's record says how accurate it is.
        std::map<std::string, const Trial*> source;
        for (const Trial& t : of) source[t.config_key] = &t;
        for (Trial& t : measured) {
          auto it = source.find(t.config_key);
          if (it == source.end()) continue;
          t.max_abs_error = it->second->max_abs_error;
          t.max_rel_error = it->second->max_rel_error;
          t.checked_elements = it->second->checked_elements;
        }
        for (const Trial& t : measured) {
          if (absl::Status s = sink.RecordTrial(t); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat("recording trial ", t.trial_id, " (", problem_key, " ",
                                                       t.config_key, "): ", s.message()));
          }
        }
        report.trials_measured += static_cast<int>(measured.size());
        return measured;
      }
      return absl::InternalError(absl::StrCat("every attempt of the ", std::string(TrialStageName(stage)),
                                              " rounds of ", problem_key, " is recorded in part"));
    };

    for (size_t vi = 0; vi < variants.size() && !result.cancelled; ++vi) {
      const Variant variant = variants[vi];
      const std::vector<KernelConfig> configs = spaces[pi].ForVariant(variant);
      SearchStrategy strategy = options.strategy;
      if (strategy == SearchStrategy::kAuto) {
        strategy = configs.size() <= static_cast<size_t>(kExhaustiveSpaceLimit) ? SearchStrategy::kExhaustive
                                                                                 : SearchStrategy::kSuccessiveHalving;
      }
      StopCondition stop;
      stop.max_trials = options.max_trials_per_variant;
      if (options.max_seconds_per_problem > 0) {
        // The search gets three quarters of the budget, shared by the variants left (an
        // early finisher donates); the final rounds get the rest.
        const double left = 0.75 * options.max_seconds_per_problem - SecondsSince(problem_start);
        // A variant always gets a little time, so every variant has a chance to measure.
        stop.max_seconds = std::max(left / static_cast<double>(variants.size() - vi), 1e-3);
      }
      // An explicit trial cap is a deliberate request for that many trials: it replaces
      // the baselines' time cap.
      if (variant != Variant::kFused && options.baseline_time_ratio > 0 && fused_search_seconds >= 0 &&
          options.max_trials_per_variant == 0) {
        const double cap = std::max(kMinBaselineSeconds, options.baseline_time_ratio * fused_search_seconds);
        stop.max_seconds = stop.max_seconds > 0 ? std::min(stop.max_seconds, cap) : cap;
      }
      // Halving screens with few samples: its rungs and the final rounds measure more.
      TimingOptions screen_timing = options.runner.timing;
      auto use_halving_timing = [&] {
        screen_timing.repeats = std::max(2, options.runner.timing.repeats / 4);
        screen_timing.max_seconds = options.runner.timing.max_seconds / 4;
      };
      if (strategy == SearchStrategy::kSuccessiveHalving) use_halving_timing();
      std::unique_ptr<Searcher> searcher =
          CreateSearcher(strategy, configs, SearchSeed(options.seed, problem_key, variant));
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
        Trial trial;
        if (const Trial* existing = recorded.Find(TrialId(run_id, problem_key, config->Key(), 0))) {
          trial = *existing;
          ++report.trials_resumed;
        } else {
          trial = runner.Measure(problem, *config, screen_timing, run_id, 0);
          if (absl::Status s = sink.RecordTrial(trial); !s.ok()) {
            return absl::Status(s.code(), absl::StrCat("recording trial ", trial.trial_id, " (",
                                                       problem_key, " ", trial.config_key, "): ", s.message()));
          }
          ++report.trials_measured;
        }
        if (trial.outcome != TrialOutcome::kUnsupported) ++counted;
        if (trial.outcome == TrialOutcome::kOk) ++report.trials_ok;
        history.push_back(std::move(trial));
        // kAuto's exhaustive screen that the budget would cut short becomes halving: the
        // rest of the space is screened in a random order with few samples.
        if (options.strategy == SearchStrategy::kAuto && strategy == SearchStrategy::kExhaustive &&
            stop.max_seconds > 0 && counted == 1 &&
            history.back().wall_seconds * static_cast<double>(configs.size()) > stop.max_seconds) {
          strategy = SearchStrategy::kSuccessiveHalving;
          use_halving_timing();
          searcher = CreateSearcher(strategy, configs, SearchSeed(options.seed, problem_key, variant));
        }
      }
      problem_trials.insert(problem_trials.end(), history.begin(), history.end());
      if (result.cancelled) break;

      // Halving rungs, whatever the strategy: the better half of the survivors in
      // interleaved rounds, the rounds doubling each rung, until few enough remain for the
      // final rounds. A screen is one block per config, measured one config after another,
      // so anything that slowed the machine for a while (another process, a clock dip)
      // skews whole stretches of it; interleaved rounds share such spells out evenly.
      std::vector<Trial> ranked = RankedOk(history);
      {
        int rounds = 2;
        for (int rung = 1; static_cast<int>(ranked.size()) > fin.max_candidates && !result.cancelled; ++rung) {
          // The rungs count against the variant's time: once it is spent, the current
          // ranking stands.
          if (stop.max_seconds > 0 && SecondsSince(variant_start) >= stop.max_seconds) break;
          const size_t keep = std::max<size_t>(static_cast<size_t>(fin.max_candidates), (ranked.size() + 1) / 2);
          ranked.resize(keep);
          absl::StatusOr<std::vector<Trial>> rung_trials =
              round_set(ranked, TrialStage::kHalving, rung * kHalvingAttemptStride, rounds, screen_timing, 0);
          if (!rung_trials.ok()) return rung_trials.status();
          problem_trials.insert(problem_trials.end(), rung_trials->begin(), rung_trials->end());
          ranked = RankedOk(*rung_trials);
          rounds *= 2;
          if (rung_trials->empty()) break;
        }
      }
      const bool fused = variant == Variant::kFused;
      if (fused) fused_search_seconds = SecondsSince(variant_start);
      const double leader_us = ranked.empty() ? 0 : RankingUs(ranked.front());
      std::vector<Trial> contenders =
          fused ? Contenders(ranked, leader_us, fin.near_fraction, fin.min_candidates, fin.max_candidates)
                : Contenders(ranked, leader_us, 0, fin.baseline_candidates, fin.baseline_candidates);
      if (fused && !contenders.empty()) fused_leader_us = RankingUs(contenders.front());
      // A baseline far slower than the fused leader changes no decision in the rounds and
      // would dominate their time; its speedup comes from its own measurements.
      if (!fused && fused_leader_us > 0) {
        std::erase_if(contenders, [&](const Trial& t) {
          return RankingUs(t) > fin.max_baseline_ratio * fused_leader_us;
        });
      }
      final_contenders.insert(final_contenders.end(), contenders.begin(), contenders.end());
    }
    result.trials_measured += report.trials_measured;
    result.trials_resumed += report.trials_resumed;
    if (result.cancelled) break;  // an unfinished problem is neither reported nor selected

    // The interleaved final rounds: the leaders of every variant side by side, so the pick
    // and the speedups over the baselines come from per-round ratios.
    if (fin.rounds > 0 && final_contenders.size() >= 2) {
      const double search_seconds = SecondsSince(problem_start);
      double left = options.max_seconds_per_problem > 0
                        ? std::max(options.max_seconds_per_problem - search_seconds, 1e-3)
                        : 0;
      if (fin.time_ratio > 0) {
        const double cap = std::max(fin.min_seconds, fin.time_ratio * search_seconds);
        left = left > 0 ? std::min(left, cap) : cap;
      }
      const int before_measured = report.trials_measured, before_resumed = report.trials_resumed;
      absl::StatusOr<std::vector<Trial>> finals =
          round_set(final_contenders, TrialStage::kFinal, 0, fin.rounds, options.runner.timing, left);
      if (!finals.ok()) return finals.status();
      result.trials_measured += report.trials_measured - before_measured;
      result.trials_resumed += report.trials_resumed - before_resumed;
      if (result.cancelled) break;
      problem_trials.insert(problem_trials.end(), finals->begin(), finals->end());
    }

    absl::StatusOr<BestConfig> best = SelectBest(problem_trials, device.DeviceClass(), run_id, options.commit);
    if (best.ok()) {
      if (absl::Status s = sink.RecordBestConfig(*best); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("recording the best config of ", problem_key, " (",
                                                   best->config_key, "): ", s.message()));
      }
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
