#include "fusetune/tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"
#include "fusetune/tuner/selection.h"
#include "internal.h"

namespace fusetune {
namespace {

// Trials of `trials` whose outcome is ok (a progress line's "ok" counts every kind of trial it
// counts in its total: screen, halving and final).
int CountOk(const std::vector<Trial>& trials) {
  return static_cast<int>(std::count_if(trials.begin(), trials.end(),
                                        [](const Trial& t) { return t.outcome == TrialOutcome::kOk; }));
}

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

// The options' own checks, before any problem is looked at.
absl::Status ValidateOptions(const SweepOptions& options) {
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
  return absl::OkStatus();
}

// Checks every problem and builds every space first: a bad tenth problem should fail the
// sweep before nine problems' worth of measuring, not after.
absl::StatusOr<std::vector<ConfigSpace>> CreateSpaces(std::span<const AttentionProblem> problems,
                                                      const Backend& backend, const ConfigSpaceOptions& options) {
  std::vector<ConfigSpace> spaces;
  for (const AttentionProblem& p : problems) {
    if (absl::Status s = p.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("problem ", p.Key(), ": ", s.message()));
    }
    absl::StatusOr<ConfigSpace> space = ConfigSpace::Create(p, backend, options);
    if (!space.ok()) return space.status();
    spaces.push_back(*std::move(space));
  }
  return spaces;
}

// What resume reuses, read once before anything is measured.
absl::StatusOr<RecordedTrialIndex> ReadRecordedTrials(RecordSink& sink, int64_t run_id) {
  absl::StatusOr<std::vector<Trial>> recorded_trials = sink.RecordedTrials(run_id);
  if (!recorded_trials.ok()) {
    return absl::Status(recorded_trials.status().code(), absl::StrCat("reading the recorded trials of run ", run_id,
                                                                      ": ", recorded_trials.status().message()));
  }
  return RecordedTrialIndex(*std::move(recorded_trials));
}

// Halving screens with few samples: its rungs and the final rounds measure more.
TimingOptions HalvingScreenTiming(const TimingOptions& timing) {
  TimingOptions screen = timing;
  screen.repeats = std::max(2, timing.repeats / 4);
  screen.max_seconds = timing.max_seconds / 4;
  return screen;
}

// One problem while it is tuned: what its steps share and what they found so far.
struct ProblemState {
  ProblemState(std::span<const AttentionProblem> problems, size_t index, const ConfigSpace& problem_space,
               uint64_t seed)
      : problem(problems[index]),
        key(problem.Key()),
        space(problem_space),
        variants(problem_space.variants()),
        start(Clock::now()),
        round_seed(SearchSeed(seed, key, Variant::kFused) ^ 0x5bd1e995u) {
    report.problem_index = static_cast<int>(index);
    report.problem_count = static_cast<int>(problems.size());
    report.problem_key = key;
  }

  const AttentionProblem& problem;
  const std::string key;
  const ConfigSpace& space;
  const std::vector<Variant> variants;
  Clock::time_point start;              // set again once the problem's inputs are prepared
  const uint64_t round_seed;           // the interleaved rounds' order (plus the attempt)
  SweepProgress report;                // counts as they grow; the rest once the problem is done
  std::vector<Trial> trials;           // every trial of the problem, what selection reads
  std::vector<Trial> final_contenders;
  double fused_search_seconds = -1;    // < 0 until the fused variant has been searched
  double fused_leader_us = 0;          // the fused leader's ranking time, 0 until known
  bool cancelled = false;              // the problem is unfinished: neither selected nor reported
  bool budget_cut = false;             // the time budget ran out inside a trial: the search stopped
};

// One variant's search of one problem: its space, strategy, budget and screen timing.
struct VariantSearch {
  Variant variant = Variant::kFused;
  std::vector<KernelConfig> configs;
  // kAuto resolved; an exhaustive screen may become halving midway.
  SearchStrategy strategy = SearchStrategy::kAuto;
  StopCondition stop;            // the screen's budget; its seconds also cap the rungs
  TimingOptions screen_timing;   // also the rungs' block
  std::unique_ptr<Searcher> searcher;
  Clock::time_point start;
};

// The steps of one RunSweep call, over what they all read: the options, the runner, where
// records go, what was recorded before, and the cancel flag. Each step that sees the flag
// set marks its problem cancelled and returns OK.
class SweepSteps {
 public:
  SweepSteps(Backend& backend, const SweepOptions& options, int64_t run_id, RecordSink& sink,
             RecordedTrialIndex recorded, const std::atomic<bool>* cancel)
      : options_(options),
        fin_(options.final_rounds),
        run_id_(run_id),
        sink_(sink),
        recorded_(std::move(recorded)),
        cancel_(cancel),
        runner_(backend, options.runner) {}

  // Steps 1 and 2 of the top of sweep.h for one problem: every variant's search, then the
  // final rounds; `p.trials` then holds what SelectBest reads.
  absl::Status Tune(ProblemState& p) {
    // The problem's clock starts once its inputs and fp64 references exist: the budget is for
    // measuring, and a large problem's preparation (2 GiB of decode cache at 32k keys) took
    // most of a 30 s budget, so its search never reached the fast tiles. A failure here is
    // left to the trials, which record it as their outcome.
    SetStop(StopToken(cancel_, std::nullopt));  // no deadline of the previous problem's
    (void)runner_.PrepareInputs(p.problem);
    p.start = Clock::now();
    // The budget is enforced inside trials too ("Budgets" in sweep.h): the search stops at
    // it; the final rounds may run on to their 3-round minimum, never past twice it.
    SetStop(StopToken(cancel_, Deadline(p, 1)));
    for (size_t vi = 0; vi < p.variants.size() && !p.cancelled && !p.budget_cut; ++vi) {
      if (absl::Status s = SearchVariant(p, vi); !s.ok()) return s;
    }
    if (p.cancelled) return absl::OkStatus();
    if (p.budget_cut) {
      p.report.incomplete = absl::StrCat("the time budget (", options_.max_seconds_per_problem,
                                         " s) ran out inside a trial: the search stopped there, without final rounds");
      return absl::OkStatus();
    }
    SetStop(StopToken(cancel_, Deadline(p, 2)));
    absl::Status finals = FinalRounds(p);
    if (finals.ok() && p.budget_cut) {
      p.report.incomplete = absl::StrCat("the final rounds reached twice the time budget (",
                                         options_.max_seconds_per_problem, " s) before their third round: the pick "
                                         "is the search's");
    }
    return finals;
  }

  // The problem's start plus `multiple` times its budget; none when unbounded.
  std::optional<Clock::time_point> Deadline(const ProblemState& p, int multiple) const {
    if (options_.max_seconds_per_problem <= 0) return std::nullopt;
    return p.start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(multiple * options_.max_seconds_per_problem));
  }

  // Step 3: the problem's best config, recorded; nullopt when no trial of it was kOk or the
  // caller selects itself (SweepOptions::select_best false).
  absl::StatusOr<std::optional<BestConfig>> SelectAndRecord(const ProblemState& p,
                                                            const std::string& device_class) {
    if (!options_.select_best) return std::nullopt;
    absl::StatusOr<BestConfig> best = SelectBest(p.trials, device_class, run_id_, options_.commit);
    if (absl::IsNotFound(best.status())) return std::nullopt;
    if (!best.ok()) return best.status();
    if (absl::Status s = sink_.RecordBestConfig(*best); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("recording the best config of ", p.key, " (", best->config_key,
                                                 "): ", s.message()));
    }
    return *std::move(best);
  }

 private:
  // A variant's screen, its halving rungs, and its contenders for the final rounds.
  absl::Status SearchVariant(ProblemState& p, size_t variant_index) {
    VariantSearch v = PlanSearch(p, variant_index);
    absl::StatusOr<std::vector<Trial>> history = Screen(p, v);
    if (!history.ok()) return history.status();
    p.trials.insert(p.trials.end(), history->begin(), history->end());
    if (p.cancelled || p.budget_cut) return absl::OkStatus();
    absl::StatusOr<std::vector<Trial>> ranked = HalvingRungs(p, v, RankedOk(*history));
    if (!ranked.ok()) return ranked.status();
    if (v.variant == Variant::kFused) p.fused_search_seconds = SecondsSince(v.start);
    AddContenders(p, v.variant, *ranked);
    return absl::OkStatus();
  }

  // The variant's strategy (kAuto resolved by the size of its space), budget, screen timing
  // and searcher; its clock starts now.
  VariantSearch PlanSearch(const ProblemState& p, size_t variant_index) const {
    VariantSearch v;
    v.variant = p.variants[variant_index];
    v.configs = p.space.ForVariant(v.variant);
    v.strategy = options_.strategy;
    if (v.strategy == SearchStrategy::kAuto) {
      v.strategy = v.configs.size() <= static_cast<size_t>(kExhaustiveSpaceLimit) ? SearchStrategy::kExhaustive
                                                                                   : SearchStrategy::kSuccessiveHalving;
    }
    v.stop = VariantBudget(p, variant_index);
    v.screen_timing = v.strategy == SearchStrategy::kSuccessiveHalving ? HalvingScreenTiming(options_.runner.timing)
                                                                       : options_.runner.timing;
    v.searcher = CreateSearcher(v.strategy, v.configs, SearchSeed(options_.seed, p.key, v.variant));
    v.start = Clock::now();
    return v;
  }

  // The variant's screen budget ("Budgets" at the top of sweep.h).
  StopCondition VariantBudget(const ProblemState& p, size_t variant_index) const {
    StopCondition stop;
    stop.max_trials = options_.max_trials_per_variant;
    if (options_.max_seconds_per_problem > 0) {
      // The search gets three quarters of the budget, shared by the variants left (an
      // early finisher donates); the final rounds get the rest.
      const double left = 0.75 * options_.max_seconds_per_problem - SecondsSince(p.start);
      // A variant always gets a little time, so every variant has a chance to measure.
      stop.max_seconds = std::max(left / static_cast<double>(p.variants.size() - variant_index), 1e-3);
    }
    // An explicit trial cap is a deliberate request for that many trials: it replaces
    // the baselines' time cap.
    if (p.variants[variant_index] != Variant::kFused && options_.baseline_time_ratio > 0 &&
        p.fused_search_seconds >= 0 && options_.max_trials_per_variant == 0) {
      const double cap = std::max(kMinBaselineSeconds, options_.baseline_time_ratio * p.fused_search_seconds);
      stop.max_seconds = stop.max_seconds > 0 ? std::min(stop.max_seconds, cap) : cap;
    }
    return stop;
  }

  // Screen trials, one per proposed config, until the searcher runs out or the budget is
  // reached. Unsupported configs cost nothing, so they do not use the budget.
  absl::StatusOr<std::vector<Trial>> Screen(ProblemState& p, VariantSearch& v) {
    std::vector<Trial> history;
    int counted = 0;
    while (!v.stop.Reached(counted, SecondsSince(v.start))) {
      if (stop_.Requested()) {  // a signal, or the problem's budget is spent: the search ends
        p.cancelled = Cancelled(cancel_);
        break;
      }
      std::optional<KernelConfig> config = v.searcher->Next(history);
      if (!config.has_value()) break;
      Announce(p, "screen", std::string(VariantName(v.variant)), config->Key(), static_cast<int>(history.size()),
               static_cast<int>(v.configs.size()));
      absl::StatusOr<Trial> trial = ScreenTrial(p, *config, v.screen_timing);
      if (!trial.ok()) return trial.status();
      if (trial->outcome == TrialOutcome::kInterrupted) {
        // Recorded, but no measurement of the config: neither the searcher nor selection see it.
        if (Cancelled(cancel_)) p.cancelled = true;
        else p.budget_cut = true;
        break;
      }
      if (trial->outcome != TrialOutcome::kUnsupported) ++counted;
      if (trial->outcome == TrialOutcome::kOk) ++p.report.trials_ok;
      history.push_back(*std::move(trial));
      // kAuto's exhaustive screen that the budget would cut short becomes halving: the
      // rest of the space is screened in a random order with few samples.
      if (options_.strategy == SearchStrategy::kAuto && v.strategy == SearchStrategy::kExhaustive &&
          v.stop.max_seconds > 0 && counted == 1 &&
          history.back().wall_seconds * static_cast<double>(v.configs.size()) > v.stop.max_seconds) {
        v.strategy = SearchStrategy::kSuccessiveHalving;
        v.screen_timing = HalvingScreenTiming(options_.runner.timing);
        v.searcher = CreateSearcher(v.strategy, v.configs, SearchSeed(options_.seed, p.key, v.variant));
      }
    }
    return history;
  }

  // The config's screen trial: the recorded one when there is one, else measured and recorded.
  // An interrupted screen says nothing about the config: resume measures it again under the
  // next attempt number.
  absl::StatusOr<Trial> ScreenTrial(ProblemState& p, const KernelConfig& config, const TimingOptions& timing) {
    int attempt = 0;
    for (; attempt < kHalvingAttemptStride; ++attempt) {
      const Trial* existing = recorded_.Find(TrialId(run_id_, p.key, config.Key(), attempt));
      if (existing == nullptr) break;
      if (existing->outcome != TrialOutcome::kInterrupted) {
        ++p.report.trials_resumed;
        return *existing;
      }
    }
    if (attempt == kHalvingAttemptStride) {
      return absl::InternalError(absl::StrCat("every attempt of the screen of ", p.key, " ", config.Key(),
                                              " is recorded as interrupted"));
    }
    Trial trial = runner_.Measure(p.problem, config, timing, run_id_, attempt);
    if (absl::Status s = Record(p, trial); !s.ok()) return s;
    ++p.report.trials_measured;
    ++p.report.outcomes[std::string(TrialOutcomeName(trial.outcome))];
    if (trial.outcome != TrialOutcome::kOk && p.report.first_failure.empty()) {
      p.report.first_failure = Cat(TrialOutcomeName(trial.outcome), ": ", trial.message);
    }
    return trial;
  }

  // Halving rungs, whatever the strategy: the better half of the survivors in interleaved
  // rounds, the rounds doubling each rung, until few enough remain for the final rounds. A
  // screen is one block per config, measured one config after another, so anything that
  // slowed the machine for a while (another process, a clock dip) skews whole stretches of
  // it; interleaved rounds share such spells out evenly. Returns the last ranking.
  absl::StatusOr<std::vector<Trial>> HalvingRungs(ProblemState& p, const VariantSearch& v, std::vector<Trial> ranked) {
    int rounds = 2;
    for (int rung = 1; static_cast<int>(ranked.size()) > fin_.max_candidates && !p.cancelled; ++rung) {
      // The rungs count against the variant's time: once it is spent, the current ranking
      // stands.
      if (v.stop.max_seconds > 0 && SecondsSince(v.start) >= v.stop.max_seconds) break;
      const size_t keep = std::max<size_t>(static_cast<size_t>(fin_.max_candidates), (ranked.size() + 1) / 2);
      ranked.resize(keep);
      absl::StatusOr<std::vector<Trial>> rung_trials =
          RoundSet(p, ranked, TrialStage::kHalving, rung * kHalvingAttemptStride, rounds, v.screen_timing, 0);
      if (!rung_trials.ok()) return rung_trials.status();
      p.trials.insert(p.trials.end(), rung_trials->begin(), rung_trials->end());
      ranked = RankedOk(*rung_trials);
      rounds *= 2;
      if (rung_trials->empty()) break;
    }
    return ranked;
  }

  // The variant's leaders join the final rounds' contenders: the fused ones near the
  // leader, the best few of a baseline unless far slower than the fused leader.
  void AddContenders(ProblemState& p, Variant variant, const std::vector<Trial>& ranked) {
    const bool fused = variant == Variant::kFused;
    const double leader_us = ranked.empty() ? 0 : RankingUs(ranked.front());
    std::vector<Trial> contenders =
        fused ? Contenders(ranked, leader_us, fin_.near_fraction, fin_.min_candidates, fin_.max_candidates)
              : Contenders(ranked, leader_us, 0, fin_.baseline_candidates, fin_.baseline_candidates);
    if (fused && !contenders.empty()) p.fused_leader_us = RankingUs(contenders.front());
    // A baseline far slower than the fused leader changes no decision in the rounds and
    // would dominate their time; its speedup comes from its own measurements.
    if (!fused && p.fused_leader_us > 0) {
      std::erase_if(contenders, [&](const Trial& t) {
        return RankingUs(t) > fin_.max_baseline_ratio * p.fused_leader_us;
      });
    }
    p.final_contenders.insert(p.final_contenders.end(), contenders.begin(), contenders.end());
  }

  // The interleaved final rounds: the leaders of every variant side by side, so the pick
  // and the speedups over the baselines come from per-round ratios.
  absl::Status FinalRounds(ProblemState& p) {
    if (fin_.rounds <= 0 || p.final_contenders.size() < 2) return absl::OkStatus();
    const double search_seconds = SecondsSince(p.start);
    double left =
        options_.max_seconds_per_problem > 0 ? std::max(options_.max_seconds_per_problem - search_seconds, 1e-3) : 0;
    if (fin_.time_ratio > 0) {
      const double cap = std::max(fin_.min_seconds, fin_.time_ratio * search_seconds);
      left = left > 0 ? std::min(left, cap) : cap;
    }
    absl::StatusOr<std::vector<Trial>> finals =
        RoundSet(p, p.final_contenders, TrialStage::kFinal, 0, fin_.rounds, options_.runner.timing, left);
    if (!finals.ok()) return finals.status();
    if (p.cancelled) return absl::OkStatus();
    p.trials.insert(p.trials.end(), finals->begin(), finals->end());
    return absl::OkStatus();
  }

  // One set of interleaved rounds of the configs of `of`, resumable: a set found whole is
  // reused; a set found in part (interrupted while being recorded) is measured again under
  // the next attempt. Empty when cancelled.
  absl::StatusOr<std::vector<Trial>> RoundSet(ProblemState& p, const std::vector<Trial>& of, TrialStage stage,
                                              int attempt_base, int rounds, const TimingOptions& block,
                                              double max_seconds) {
    const std::vector<KernelConfig> configs = ConfigsOf(of);
    for (int retry = 0; retry < kHalvingAttemptStride; ++retry) {
      const int attempt = attempt_base + retry;
      std::vector<Trial> found;
      for (const KernelConfig& c : configs) {
        if (const Trial* t = recorded_.Find(TrialId(run_id_, p.key, c.Key(), attempt, stage))) found.push_back(*t);
      }
      if (!found.empty() && found.size() == configs.size()) {
        p.report.trials_resumed += static_cast<int>(found.size());
        p.report.trials_ok += CountOk(found);
        return found;
      }
      if (!found.empty()) continue;
      return MeasureRoundSet(p, of, configs, stage, attempt, rounds, block, max_seconds);
    }
    return absl::InternalError(absl::StrCat("every attempt of the ", std::string(TrialStageName(stage)),
                                            " rounds of ", p.key, " is recorded in part"));
  }

  // Measures and records one set of rounds under `attempt`; empty when cancelled.
  absl::StatusOr<std::vector<Trial>> MeasureRoundSet(ProblemState& p, const std::vector<Trial>& of,
                                                     const std::vector<KernelConfig>& configs, TrialStage stage,
                                                     int attempt, int rounds, const TimingOptions& block,
                                                     double max_seconds) {
    Announce(p, std::string(TrialStageName(stage)), "", "", 0, static_cast<int>(configs.size()));
    std::vector<Trial> measured =
        runner_.MeasureRounds(p.problem, configs, rounds, block, p.round_seed + static_cast<uint64_t>(attempt), run_id_,
                              stage, attempt, max_seconds, cancel_);
    if (Cancelled(cancel_)) {
      p.cancelled = true;  // a set cut short is not recorded: its rounds are incomplete
      return std::vector<Trial>();
    }
    // The budget's deadline cut the rounds: the complete rounds stand (MeasureRounds dropped
    // the cut one), unless there are none or, for the final rounds, fewer than 3. A rung cut
    // so leaves the ranking as it was; final rounds cut so leave the pick to the search.
    const bool none = std::any_of(measured.begin(), measured.end(),
                                  [](const Trial& t) { return t.outcome == TrialOutcome::kInterrupted; });
    const bool too_few = stage == TrialStage::kFinal && rounds >= 3 && stop_.Requested() &&
                         std::any_of(measured.begin(), measured.end(), [](const Trial& t) {
                           return t.outcome == TrialOutcome::kOk && t.samples_us.size() < 3;
                         });
    if (none || too_few) {
      if (stage == TrialStage::kFinal) p.budget_cut = true;
      return std::vector<Trial>();
    }
    // The rounds only time: each trial keeps the verification errors of the measurement it
    // continues, so the pick's record says how accurate it is.
    std::map<std::string, const Trial*> source;
    for (const Trial& t : of) source[t.config_key] = &t;
    for (Trial& t : measured) {
      auto it = source.find(t.config_key);
      if (it == source.end()) continue;
      t.max_abs_error = it->second->max_abs_error;
      t.max_rel_error = it->second->max_rel_error;
      t.unquantised_rel_error = it->second->unquantised_rel_error;
      t.checked_elements = it->second->checked_elements;
    }
    for (const Trial& t : measured) {
      if (absl::Status s = Record(p, t); !s.ok()) return s;
    }
    p.report.trials_measured += static_cast<int>(measured.size());
    p.report.trials_ok += CountOk(measured);
    return measured;
  }

  // Tells the activity callback what starts now.
  void Announce(const ProblemState& p, std::string step, std::string variant, std::string config_key, int done,
                int space) const {
    if (!options_.activity) return;
    SweepActivity a;
    a.problem_index = p.report.problem_index;
    a.problem_count = p.report.problem_count;
    a.problem_key = p.key;
    a.step = std::move(step);
    a.variant = std::move(variant);
    a.config_key = std::move(config_key);
    a.configs_done = done;
    a.configs_in_space = space;
    a.trials = p.report.trials_measured + p.report.trials_resumed;
    a.problem_seconds = SecondsSince(p.start);
    a.budget_seconds = options_.max_seconds_per_problem;
    options_.activity(a);
  }

  // The stop token of the current step, for the runner (and so the backend) and for the
  // checks between trials.
  void SetStop(StopToken stop) {
    stop_ = stop;
    runner_.SetStopToken(stop_);
  }

  // Sends one trial to the sink; an error names the trial.
  absl::Status Record(const ProblemState& p, const Trial& t) {
    absl::Status s = sink_.RecordTrial(t);
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("recording trial ", t.trial_id, " (", p.key, " ", t.config_key,
                                               "): ", s.message()));
  }

  const SweepOptions& options_;
  const FinalRoundOptions& fin_;
  const int64_t run_id_;
  RecordSink& sink_;
  const RecordedTrialIndex recorded_;
  const std::atomic<bool>* const cancel_;
  Runner runner_;
  StopToken stop_;
};

}  // namespace

absl::StatusOr<SweepResult> RunSweep(Backend& backend, std::span<const AttentionProblem> problems,
                                     const SweepOptions& options, int64_t run_id, RecordSink& sink,
                                     const SweepProgressCallback& progress,
                                     const std::atomic<bool>* cancel) {
  if (problems.empty()) return absl::InvalidArgumentError("the sweep has no problems");
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  const DeviceInfo device = backend.Describe();
  absl::StatusOr<std::vector<ConfigSpace>> spaces = CreateSpaces(problems, backend, options.space);
  if (!spaces.ok()) return spaces.status();
  // A problem too large for this host or device is refused before anything is measured.
  for (const AttentionProblem& p : problems) {
    if (absl::Status s = CheckMemoryFits(p, device, options.runner); !s.ok()) return s;
  }
  absl::StatusOr<RecordedTrialIndex> recorded = ReadRecordedTrials(sink, run_id);
  if (!recorded.ok()) return recorded.status();

  SweepSteps steps(backend, options, run_id, sink, *std::move(recorded), cancel);
  SweepResult result;
  const auto sweep_start = Clock::now();
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    if (Cancelled(cancel)) {
      result.cancelled = true;
      break;
    }
    ProblemState p(problems, pi, (*spaces)[pi], options.seed);
    if (absl::Status s = steps.Tune(p); !s.ok()) return s;
    result.trials_measured += p.report.trials_measured;
    result.trials_resumed += p.report.trials_resumed;
    if (p.cancelled) {
      result.cancelled = true;  // an unfinished problem is neither reported nor selected
      break;
    }
    absl::StatusOr<std::optional<BestConfig>> best = steps.SelectAndRecord(p, device.DeviceClass());
    if (!best.ok()) return best.status();
    if (best->has_value()) {
      p.report.best = **best;
      result.best.push_back(**best);
    }
    ++result.problems_finished;
    p.report.problem_seconds = SecondsSince(p.start);
    p.report.elapsed_seconds = SecondsSince(sweep_start);
    p.report.estimated_remaining_seconds = EstimateRemaining(problems.subspan(pi + 1), p.report.problem_seconds,
                                                             p.problem.Flops(), options.max_seconds_per_problem);
    if (progress) progress(p.report);
  }
  return result;
}

}  // namespace fusetune
