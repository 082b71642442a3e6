// Measuring suites and comparing two builds on them (compare.h has the method).
#include "fusetune/regress/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"
#include "absl/strings/str_format.h"
#include "fusetune/records/json.h"
#include "nlohmann/json.hpp"
#include "protocol.h"

namespace fusetune::regress {

using fusetune::Cat;
namespace {

using Clock = std::chrono::steady_clock;
using regress::CellVerdict;
using regress::Verdict;

// The cells of `which`, grouped by problem in the order problems first appear: each source
// prepares a problem's inputs once per group.
std::vector<std::vector<size_t>> GroupByProblem(const std::vector<SuiteCell>& cells, const std::vector<size_t>& which) {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> group_of;
  for (size_t i : which) {
    const std::string key = cells[i].problem.Key();
    auto [it, fresh] = group_of.emplace(key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  return groups;
}

std::vector<size_t> AllCells(size_t n) {
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  return all;
}

absl::Status CheckCancel(const CompareOptions& options) {
  if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError("comparison cancelled");
  }
  return absl::OkStatus();
}

// One side that measures: its source, and whether it runs the cells' baseline configs.
struct Side {
  BlockSource* source = nullptr;
  bool baseline = false;
  CellMeasurement& Of(CellComparison& c) const { return baseline ? c.baseline : c.candidate; }
  const KernelConfig& ConfigOf(const SuiteCell& cell) const { return baseline ? cell.BaselineConfig() : cell.config; }
};

// Measures the cells of `which` on `sides`, interleaved, until each verified side of a cell
// has its target (targets[cell]) of blocks: every round a fresh random order of (cell, side) of one problem; problem
// by problem, or with `rounds_across_problems` one round of every problem before the next
// (Suite::rounds_across_problems says why). Cells not yet verified on a side are verified first.
//
// The order is balanced per cell: of two sides, each goes first in half of the cell's rounds
// (one more where the count is odd). On the H200 the side measured first in a round was slower
// than the other in 82 % of the cells of eight A/A runs (a median of 0.27 %, 2.7-10 % on the
// power-capped bf16 cells, docs/perf.md); with the order drawn at random, and the same seed
// every night, a cell whose draw put one side first more often leaned that way every night.
class Interleaver {
 public:
  // `stored_baseline`: the cells' baseline sides hold a stored measurement (not a side here).
  Interleaver(std::vector<Side> sides, std::vector<CellComparison>& cells, const CompareOptions& options,
              bool rounds_across_problems, int* blocks_measured, bool stored_baseline = false,
              RoundOrder order = RoundOrder::kShuffled)
      : sides_(std::move(sides)),
        cells_(cells),
        options_(options),
        rounds_across_problems_(rounds_across_problems),
        mirrored_(order == RoundOrder::kMirrored && sides_.size() == 2),
        blocks_measured_(blocks_measured),
        stored_baseline_(stored_baseline) {}

  absl::Status Measure(const std::vector<size_t>& which, const std::vector<int>& targets) {
    std::vector<SuiteCell> suite_cells;
    for (const CellComparison& c : cells_) suite_cells.push_back(c.cell);
    // A suite naming configs no build can run fails at once, before any input is prepared.
    if (absl::Status s = AskCanRun(which); !s.ok()) return s;
    if (absl::Status s = CheckRunnable(which); !s.ok()) return s;
    planned_ += PlannedBlocks(which, targets);
    const std::vector<std::vector<size_t>> groups = GroupByProblem(suite_cells, which);
    if (!rounds_across_problems_) {
      for (const std::vector<size_t>& group : groups) {
        if (absl::Status s = VerifyGroup(group); !s.ok()) return s;
        for (;;) {
          absl::StatusOr<bool> measured = Round(group, targets);
          if (!measured.ok()) return measured.status();
          if (!*measured) break;
        }
      }
      return absl::OkStatus();
    }
    for (const std::vector<size_t>& group : groups) {
      if (absl::Status s = VerifyGroup(group); !s.ok()) return s;
    }
    for (bool any = true; any;) {
      any = false;
      for (const std::vector<size_t>& group : groups) {
        absl::StatusOr<bool> measured = Round(group, targets);
        if (!measured.ok()) return measured.status();
        any = any || *measured;
      }
    }
    return absl::OkStatus();
  }

 private:
  bool Measurable(size_t i) {
    for (const Side& side : sides_) {
      if (side.Of(cells_[i]).check.outcome != TrialOutcome::kOk) return false;
    }
    return true;
  }

  // Asks every side whether it can run each cell, once per (cell, side).
  absl::Status AskCanRun(const std::vector<size_t>& which) {
    for (size_t i : which) {
      for (const Side& side : sides_) {
        if (cannot_run_.count({i, side.baseline}) > 0 || verified_.count({i, side.baseline}) > 0) continue;
        std::string why;
        absl::StatusOr<bool> can = side.source->CanRun(cells_[i].cell.problem, side.ConfigOf(cells_[i].cell), &why);
        if (!can.ok()) return can.status();
        if (!*can) cannot_run_[{i, side.baseline}] = why;
      }
    }
    return absl::OkStatus();
  }

  // InvalidArgument naming the cells that no side can run (nor a stored baseline ran).
  absl::Status CheckRunnable(const std::vector<size_t>& which) {
    if (!options_.require_runnable) return absl::OkStatus();
    std::string refused;
    int count = 0;
    for (size_t i : which) {
      bool all_refuse = !stored_baseline_ || cells_[i].baseline.check.outcome != TrialOutcome::kOk;
      std::string why;
      for (const Side& side : sides_) {
        auto it = cannot_run_.find({i, side.baseline});
        all_refuse = all_refuse && it != cannot_run_.end();
        if (it != cannot_run_.end()) why = it->second;
      }
      if (!all_refuse) continue;
      if (++count <= 5) refused += Cat("\n  ", cells_[i].cell.Name(), ": ", why);
    }
    if (count == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(Cat(count, " cell(s) of the suite cannot run on this device", refused));
  }

  int PlannedBlocks(const std::vector<size_t>& which, const std::vector<int>& targets) {
    int planned = 0;
    for (size_t i : which) {
      for (const Side& side : sides_) {
        planned += std::max(0, targets[i] - static_cast<int>(side.Of(cells_[i]).blocks.size()));
      }
    }
    return planned;
  }

  absl::Status VerifyGroup(const std::vector<size_t>& group) {
    for (size_t i : group) {
      for (const Side& side : sides_) {
        if (verified_.count({i, side.baseline}) > 0) continue;
        verified_.insert({i, side.baseline});
        if (auto it = cannot_run_.find({i, side.baseline}); it != cannot_run_.end()) {
          side.Of(cells_[i]).check = CellCheck{.outcome = TrialOutcome::kUnsupported, .message = it->second};
          continue;
        }
        absl::StatusOr<CellCheck> check = side.source->Verify(cells_[i].cell.problem, side.ConfigOf(cells_[i].cell));
        if (!check.ok()) return check.status();
        side.Of(cells_[i]).check = *std::move(check);
      }
    }
    return absl::OkStatus();
  }

  // One round of a problem's cells: a block of every (cell, side) still short of its target, in
  // a fresh random order. False when none was.
  absl::StatusOr<bool> Round(const std::vector<size_t>& group, const std::vector<int>& targets) {
    std::vector<std::pair<size_t, size_t>> round;  // (cell, side index)
    for (size_t i : group) {
      if (!Measurable(i)) continue;
      for (size_t s = 0; s < sides_.size(); ++s) {
        if (static_cast<int>(sides_[s].Of(cells_[i]).blocks.size()) < targets[i]) round.push_back({i, s});
      }
    }
    if (round.empty()) return false;
    std::mt19937_64 rng(options_.order_seed * 0x9E3779B97F4A7C15ull + ++rounds_);
    if (mirrored_) {
      MirrorRound(round, rng);
    } else {
      std::shuffle(round.begin(), round.end(), rng);
      BalanceWhoGoesFirst(round);
    }
    std::set<size_t> started;  // cells with a block measured in this round
    for (auto [i, s] : round) {
      if (absl::Status c = CheckCancel(options_); !c.ok()) return c;
      const Side& side = sides_[s];
      absl::StatusOr<SampleBlock> block =
          side.source->MeasureBlock(cells_[i].cell.problem, side.ConfigOf(cells_[i].cell));
      if (!block.ok()) return block.status();
      side.Of(cells_[i]).blocks.push_back(*block);
      if (sides_.size() == 2) side.Of(cells_[i]).first_in_round.push_back(started.insert(i).second);
      side.Of(cells_[i]).sequence.push_back(*blocks_measured_);
      ++*blocks_measured_;
      ++done_;
      if (options_.progress) options_.progress(done_, planned_);
    }
    return true;
  }

  // Orders a round as RoundOrder::kMirrored says: the round's cells in a random order, ending
  // with the cell that ended this problem's previous round when it is among them; then every cell
  // on the side that went first less often over these cells (a coin when even), then every one
  // on the other side, in the same order. Both sides of a cell are measured to the same target,
  // so a round holds both or neither; one that does not is shuffled instead.
  void MirrorRound(std::vector<std::pair<size_t, size_t>>& round, std::mt19937_64& rng) {
    std::vector<size_t> order;
    std::set<size_t> other_side;
    for (const auto& [cell, side] : round) {
      if (side == 0) {
        order.push_back(cell);
      } else {
        other_side.insert(cell);
      }
    }
    if (other_side != std::set<size_t>(order.begin(), order.end())) {
      std::shuffle(round.begin(), round.end(), rng);
      BalanceWhoGoesFirst(round);
      return;
    }
    std::shuffle(order.begin(), order.end(), rng);
    const std::string problem = cells_[order.front()].cell.problem.Key();
    if (auto last = last_of_problem_.find(problem); last != last_of_problem_.end()) {
      auto at = std::find(order.begin(), order.end(), last->second);
      if (at != order.end()) std::iter_swap(at, order.end() - 1);
    }
    int lead = 0;  // how much more often side 0 went first than side 1, over these cells
    for (size_t cell : order) lead += went_first_[{cell, 0}] - went_first_[{cell, 1}];
    const size_t first = lead > 0 ? 1 : lead < 0 ? 0 : static_cast<size_t>(rng() & 1);
    round.clear();
    for (size_t side : {first, 1 - first}) {
      for (size_t cell : order) round.push_back({cell, side});
    }
    for (size_t cell : order) ++went_first_[{cell, first}];
    last_of_problem_[problem] = order.back();
  }

  // Swaps, within a shuffled round, the two sides' places of each cell whose first-placed side
  // has gone first more often than the other: the cells' places in the round stay random, and
  // each side goes first in half of a cell's rounds. Rounds with one side of a cell are left as
  // they are; so are comparisons of other than two sides.
  void BalanceWhoGoesFirst(std::vector<std::pair<size_t, size_t>>& round) {
    if (sides_.size() != 2) return;
    std::map<size_t, std::vector<size_t>> places;  // cell -> its places in the round
    for (size_t k = 0; k < round.size(); ++k) places[round[k].first].push_back(k);
    for (const auto& [cell, at] : places) {
      if (at.size() != 2) continue;
      int& first_count = went_first_[{cell, round[at[0]].second}];
      const int other_count = went_first_[{cell, round[at[1]].second}];
      if (first_count > other_count) {
        std::swap(round[at[0]].second, round[at[1]].second);
        ++went_first_[{cell, round[at[0]].second}];
      } else {
        ++first_count;
      }
    }
  }

  std::vector<Side> sides_;
  std::vector<CellComparison>& cells_;
  const CompareOptions& options_;
  bool rounds_across_problems_;
  bool mirrored_;  // RoundOrder::kMirrored, with two sides
  int* blocks_measured_;
  bool stored_baseline_;
  std::set<std::pair<size_t, bool>> verified_;
  std::map<std::pair<size_t, bool>, std::string> cannot_run_;  // why not
  uint64_t rounds_ = 0;
  std::map<std::pair<size_t, size_t>, int> went_first_;  // (cell, side index) -> rounds it went first
  std::map<std::string, size_t> last_of_problem_;        // problem key -> the cell that ended its last mirrored round
  int done_ = 0;
  int planned_ = 0;
};

// The verdict of a cell that cannot be timed on both sides.
CellVerdict UntimedVerdict(const CellComparison& c) {
  CellVerdict v;
  v.problem_key = c.cell.problem.Key();
  v.config_key = c.cell.config.Key();
  v.verdict = Verdict::kUnknown;
  const CellCheck& base = c.baseline.check;
  const CellCheck& cand = c.candidate.check;
  const bool base_ok = base.outcome == TrialOutcome::kOk;
  const bool cand_ok = cand.outcome == TrialOutcome::kOk;
  if (!cand_ok && cand.outcome == TrialOutcome::kVerifyFailed) {
    v.accuracy.checked = true;
    v.accuracy.failed = true;
    v.why = Cat("the candidate fails verification: ", cand.message);
  } else if (!cand_ok && base_ok) {
    // A cell the baseline runs and the candidate cannot is the worst slowdown there is.
    v.verdict = Verdict::kRegressed;
    v.why = Cat("the candidate cannot run the cell (", TrialOutcomeName(cand.outcome), "): ", cand.message);
  } else if (!cand_ok) {
    v.why = Cat("neither build runs the cell; candidate (", TrialOutcomeName(cand.outcome),
                         "): ", cand.message, "; baseline (", TrialOutcomeName(base.outcome), "): ", base.message);
  } else {
    v.why = Cat("the baseline has nothing to compare with (", TrialOutcomeName(base.outcome),
                         base.message.empty() ? "" : ": ", base.message, ")");
  }
  v.baseline_blocks = static_cast<int>(c.baseline.blocks.size());
  v.candidate_blocks = static_cast<int>(c.candidate.blocks.size());
  return v;
}

bool Timed(const CellComparison& c) {
  return c.baseline.check.outcome == TrialOutcome::kOk && c.candidate.check.outcome == TrialOutcome::kOk &&
         c.baseline.blocks.size() >= 3 && c.candidate.blocks.size() >= 3;
}

// `paired`: both sides were measured in the same rounds (an interleaved comparison), so block
// i of one side pairs with block i of the other.
regress::CellInput InputOf(const CellComparison& c, const CompareOptions& options, bool paired) {
  regress::CellInput in;
  in.problem_key = c.cell.problem.Key();
  in.config_key = c.cell.config.Key();
  if (c.cell.baseline_config) in.config_key += Cat(" (was ", c.cell.baseline_config->Key(), ")");
  in.baseline = c.baseline.Medians();
  in.candidate = c.candidate.Medians();
  in.paired = paired && in.baseline.size() == in.candidate.size();
  absl::StatusOr<double> noise = in.paired ? regress::PairedNoise(in.baseline, in.candidate)
                                           : regress::RatioNoise(in.baseline, in.candidate);
  in.aa_noise = noise.ok() ? *noise : 0;
  if (options.known_aa_noise) {
    const KnownCellNoise known = options.known_aa_noise(c.cell);
    if (std::isfinite(known.noise) && known.noise > 0) {
      in.calibrated_noise = known.noise;
      in.calibrations = std::max(known.calibrations, 0);
    }
  }
  const double base_error = c.baseline.check.max_rel_error;
  const double cand_error = c.candidate.check.max_rel_error;
  if (c.candidate.check.tolerance > 0 && std::isfinite(base_error) && base_error >= 0) {
    regress::AccuracyInput accuracy;
    accuracy.baseline_error = base_error;
    accuracy.candidate_error = std::isfinite(cand_error) ? cand_error : std::numeric_limits<double>::infinity();
    accuracy.tolerance = c.candidate.check.tolerance;
    accuracy.growth_limit = regress::ErrorGrowthLimit(PrecisionName(c.cell.config.precision));
    in.accuracy = accuracy;
  }
  return in;
}

// How a side's blocks were timed: through a CUDA graph (TimingSamples::graphed), launch by
// launch, or some of each.
std::string HowTimed(const CellMeasurement& m) {
  const auto graphed = std::count_if(m.blocks.begin(), m.blocks.end(), [](const SampleBlock& b) { return b.graphed; });
  if (graphed == 0) return "launch by launch";
  if (static_cast<size_t>(graphed) == m.blocks.size()) return "through a CUDA graph";
  return Cat(graphed, " of its ", m.blocks.size(), " blocks through a CUDA graph");
}

// Whether every block of both sides was timed the same way. A graph-timed sample holds no wait
// for the host and one launched by itself may, so a ratio across the two measures the timing as
// much as the kernels.
bool TimedAlike(const CellComparison& c) {
  std::set<bool> ways;
  for (const CellMeasurement* m : {&c.baseline, &c.candidate}) {
    for (const SampleBlock& b : m->blocks) ways.insert(b.graphed);
  }
  return ways.size() <= 1;
}

// A cell whose sides were timed differently: judged alone for its statistics and accuracy (its
// p-values kept out of the suite's adjustment), then unknown whatever its timing says, and not
// measured again (more blocks timed the same two ways cannot make them compare).
absl::StatusOr<CellVerdict> TimedDifferentlyVerdict(const CellComparison& c, const regress::CellInput& input,
                                                    const regress::VerdictOptions& options) {
  absl::StatusOr<CellVerdict> v = regress::JudgeCell(input, options);
  if (!v.ok()) return v.status();
  v->verdict = Verdict::kUnknown;
  v->remeasure = false;
  v->suggested_blocks = std::max(v->baseline_blocks, v->candidate_blocks);
  v->why = absl::StrFormat(
      "the sides were timed differently (the baseline %s, the candidate %s), so their times do not compare "
      "(ratio %.4f, not judged): time both the same way",
      HowTimed(c.baseline), HowTimed(c.candidate), v->ratio.pairwise_ratio);
  return v;
}

// Judges every cell (the timed ones together, so the adjustment spans the suite).
absl::Status Judge(std::vector<CellComparison>& cells, const regress::VerdictOptions& options,
                   const CompareOptions& compare, bool paired) {
  std::vector<regress::CellInput> inputs;
  std::vector<size_t> timed;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!Timed(cells[i])) {
      cells[i].verdict = UntimedVerdict(cells[i]);
    } else if (!TimedAlike(cells[i])) {
      absl::StatusOr<CellVerdict> v = TimedDifferentlyVerdict(cells[i], InputOf(cells[i], compare, paired), options);
      if (!v.ok()) return v.status();
      cells[i].verdict = *std::move(v);
    } else {
      inputs.push_back(InputOf(cells[i], compare, paired));
      timed.push_back(i);
    }
  }
  if (inputs.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<CellVerdict>> verdicts = regress::JudgeSuite(inputs, options);
  if (!verdicts.ok()) return verdicts.status();
  for (size_t k = 0; k < timed.size(); ++k) cells[timed[k]].verdict = (*verdicts)[k];
  return absl::OkStatus();
}

// Against stored blocks (between-session drift is not in the blocks' spread) the floor's
// minimum is at least options.stored_min_floor, for calibrated cells too.
regress::VerdictOptions StoredVerdictOptions(regress::VerdictOptions verdict, const CompareOptions& options) {
  verdict.min_floor = std::max(verdict.min_floor, options.stored_min_floor);
  if (verdict.calibrated_min_floor) {
    verdict.calibrated_min_floor = std::max(*verdict.calibrated_min_floor, options.stored_min_floor);
  }
  return verdict;
}

// The cells whose verdicts ask for more blocks, each with its suggested count in `targets`.
std::vector<size_t> CellsToRemeasure(const std::vector<CellComparison>& cells, std::vector<int>* targets) {
  std::vector<size_t> which;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].verdict.remeasure) {
      which.push_back(i);
      (*targets)[i] = cells[i].verdict.suggested_blocks;
    }
  }
  return which;
}

absl::Status CheckDevices(const SourceInfo& baseline, const SourceInfo& candidate, const Suite& suite) {
  const std::string base_class = baseline.device.DeviceClass();
  const std::string cand_class = candidate.device.DeviceClass();
  if (base_class != cand_class) {
    return absl::FailedPreconditionError(Cat("the baseline was measured on ", base_class,
                                                      " and the candidate on ", cand_class,
                                                      ": only the same device class compares"));
  }
  if (!suite.device_class.empty() && suite.device_class != cand_class) {
    return absl::FailedPreconditionError(Cat("suite ", suite.name, " is for ", suite.device_class,
                                                      ", not ", cand_class));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const Suite& suite, const CompareOptions& options) {
  if (suite.cells.empty()) return absl::InvalidArgumentError(Cat("suite ", suite.name, " has no cells"));
  const int blocks = options.blocks > 0 ? options.blocks : suite.blocks;
  if (blocks < 3 || options.blocks < 0) {
    return absl::InvalidArgumentError(Cat("blocks per side must be at least 3, not ", blocks));
  }
  const double budget = EffectiveMaxMeasureSeconds(suite, options);
  if (!(budget >= 0) || !std::isfinite(budget)) {
    return absl::InvalidArgumentError("the time budget must be a finite number of seconds >= 0");
  }
  if (!(options.stored_min_floor >= 0) || !std::isfinite(options.stored_min_floor)) {
    return absl::InvalidArgumentError("the stored floor must be a finite number >= 0");
  }
  return absl::OkStatus();
}

int FirstPassBlocks(const Suite& suite, const CompareOptions& options) {
  return options.blocks > 0 ? options.blocks : suite.blocks;
}

std::string StoredKey(std::string_view problem, std::string_view config, std::string_view role) {
  return Cat(problem, " ", config, " ", role);
}

// The first pass over every cell, then the undecided cells again at the block count their
// verdicts suggest, judging the whole suite after each pass; the wall time goes to `out`.
absl::Status MeasureUntilDecided(Interleaver& measurer, const Suite& suite, const CompareOptions& options,
                                 const regress::VerdictOptions& verdict, bool paired, Comparison& out) {
  const auto start = Clock::now();
  const double budget = EffectiveMaxMeasureSeconds(suite, options);
  std::vector<size_t> which = AllCells(out.cells.size());
  // A paired first pass long enough for the signed-rank test to reach significance across the
  // suite (PairedBlocksToResolve), within the block cap.
  int first = FirstPassBlocks(suite, options);
  if (paired) {
    first = std::max(first, std::min(verdict.max_blocks,
                                     regress::PairedBlocksToResolve(static_cast<int>(out.cells.size()), verdict.alpha)));
  }
  std::vector<int> targets(out.cells.size(), first);
  while (!which.empty()) {
    if (absl::Status s = measurer.Measure(which, targets); !s.ok()) return s;
    if (absl::Status s = Judge(out.cells, verdict, options, paired); !s.ok()) return s;
    which = CellsToRemeasure(out.cells, &targets);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (!which.empty() && budget > 0 && elapsed >= budget) {
      for (size_t i : which) {
        CellVerdict& v = out.cells[i].verdict;
        v.remeasure = false;
        v.suggested_blocks = std::max(v.baseline_blocks, v.candidate_blocks);
        v.why += absl::StrFormat(" (not measured further: the time budget of %.0f s ran out)", budget);
      }
      which.clear();
    }
  }
  out.measure_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return absl::OkStatus();
}

}  // namespace

std::vector<double> CellMeasurement::Medians() const {
  std::vector<double> out;
  out.reserve(blocks.size());
  for (const SampleBlock& b : blocks) out.push_back(b.median_us);
  return out;
}

int Comparison::CountVerdict(Verdict verdict) const {
  int n = 0;
  for (const CellComparison& c : cells) n += c.verdict.verdict == verdict ? 1 : 0;
  return n;
}

bool Comparison::AnyFailed() const {
  for (const CellComparison& c : cells) {
    if (c.verdict.Failed()) return true;
  }
  return false;
}

bool Comparison::AnyAccuracyFailed() const {
  for (const CellComparison& c : cells) {
    if (c.verdict.accuracy.failed || c.verdict.accuracy.grew) return true;
  }
  return false;
}

regress::VerdictOptions EffectiveVerdictOptions(const Suite& suite, const CompareOptions& options) {
  regress::VerdictOptions verdict = options.verdict;
  if (options.min_floor) {
    verdict.min_floor = *options.min_floor;
  } else if (suite.min_floor) {
    verdict.min_floor = *suite.min_floor;
  }
  if (options.calibrated_min_floor) {
    verdict.calibrated_min_floor = options.calibrated_min_floor;
  } else if (suite.calibrated_min_floor) {
    verdict.calibrated_min_floor = suite.calibrated_min_floor;
  }
  if (options.correction) {
    verdict.correction = *options.correction;
  } else if (suite.correction) {
    verdict.correction = *suite.correction;
  }
  return verdict;
}

RoundOrder EffectiveRoundOrder(const Suite& suite, const CompareOptions& options) {
  if (options.round_order) return *options.round_order;
  return suite.round_order.value_or(RoundOrder::kShuffled);
}

double EffectiveMaxMeasureSeconds(const Suite& suite, const CompareOptions& options) {
  if (options.max_measure_seconds) return *options.max_measure_seconds;
  return suite.max_measure_seconds.value_or(0);
}

absl::StatusOr<Comparison> CompareInterleaved(BlockSource& baseline, BlockSource& candidate, const Suite& suite,
                                              const CompareOptions& options) {
  if (absl::Status s = CheckOptions(suite, options); !s.ok()) return s;
  Comparison out;
  out.interleaved = true;
  absl::StatusOr<SourceInfo> base_info = baseline.Describe();
  if (!base_info.ok()) return base_info.status();
  absl::StatusOr<SourceInfo> cand_info = candidate.Describe();
  if (!cand_info.ok()) return cand_info.status();
  out.baseline = *std::move(base_info);
  out.candidate = *std::move(cand_info);
  if (absl::Status s = CheckDevices(out.baseline, out.candidate, suite); !s.ok()) return s;
  for (const SuiteCell& cell : suite.cells) out.cells.push_back(CellComparison{cell, {}, {}, {}});

  out.round_order = EffectiveRoundOrder(suite, options);
  Interleaver interleaver({{&baseline, true}, {&candidate, false}}, out.cells, options, suite.rounds_across_problems,
                          &out.blocks_measured, /*stored_baseline=*/false, out.round_order);
  if (absl::Status s = MeasureUntilDecided(interleaver, suite, options, EffectiveVerdictOptions(suite, options),
                                           /*paired=*/true, out);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<Comparison> CompareWithStored(const SourceInfo& baseline, const std::vector<StoredCell>& stored,
                                             BlockSource& candidate, const Suite& suite,
                                             const CompareOptions& options) {
  if (absl::Status s = CheckOptions(suite, options); !s.ok()) return s;
  Comparison out;
  out.interleaved = false;
  out.baseline = baseline;
  absl::StatusOr<SourceInfo> cand_info = candidate.Describe();
  if (!cand_info.ok()) return cand_info.status();
  out.candidate = *std::move(cand_info);
  if (absl::Status s = CheckDevices(out.baseline, out.candidate, suite); !s.ok()) return s;

  std::map<std::string, const StoredCell*> by_key;
  for (const StoredCell& s : stored) by_key[StoredKey(s.problem_key, s.config_key, s.role)] = &s;
  for (const SuiteCell& cell : suite.cells) {
    CellComparison c{cell, {}, {}, {}};
    // A pick cell's baseline is the old pick as the baseline measured it (its own cell).
    const std::string role = cell.baseline_config ? "best" : cell.role;
    auto it = by_key.find(StoredKey(cell.problem.Key(), cell.BaselineConfig().Key(), role));
    if (it != by_key.end()) {
      c.baseline = it->second->measurement;
    } else {
      c.baseline.check.outcome = TrialOutcome::kUnsupported;
      c.baseline.check.message = Cat("the baseline run did not measure ", cell.BaselineConfig().Key(),
                                              " (", role, ") on this problem");
    }
    out.cells.push_back(std::move(c));
  }

  const regress::VerdictOptions verdict = StoredVerdictOptions(EffectiveVerdictOptions(suite, options), options);
  Interleaver measurer({{&candidate, false}}, out.cells, options, suite.rounds_across_problems, &out.blocks_measured,
                       /*stored_baseline=*/true);
  if (absl::Status s = MeasureUntilDecided(measurer, suite, options, verdict, /*paired=*/false, out); !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<std::vector<MeasuredCell>> MeasureSuite(BlockSource& source, const Suite& suite,
                                                        const CompareOptions& options) {
  if (absl::Status s = CheckOptions(suite, options); !s.ok()) return s;
  absl::StatusOr<SourceInfo> info = source.Describe();
  if (!info.ok()) return info.status();
  if (!suite.device_class.empty() && suite.device_class != info->device.DeviceClass()) {
    return absl::FailedPreconditionError(Cat("suite ", suite.name, " is for ", suite.device_class, ", not ",
                                                      info->device.DeviceClass()));
  }
  std::vector<CellComparison> cells;
  for (const SuiteCell& cell : suite.cells) cells.push_back(CellComparison{cell, {}, {}, {}});
  int blocks_measured = 0;
  Interleaver measurer({{&source, false}}, cells, options, suite.rounds_across_problems, &blocks_measured);
  if (absl::Status s = measurer.Measure(AllCells(cells.size()),
                                        std::vector<int>(cells.size(), FirstPassBlocks(suite, options)));
      !s.ok()) {
    return s;
  }
  std::vector<MeasuredCell> out;
  for (CellComparison& c : cells) out.push_back({std::move(c.cell), std::move(c.candidate)});
  return out;
}

namespace {

nlohmann::json SourceToJson(const SourceInfo& source) {
  return {{"commit", source.commit}, {"device_class", source.device.DeviceClass()}, {"environment", source.environment}};
}

// A device class "backend/name/arch" (DeviceInfo::DeviceClass) as a DeviceInfo of that class.
DeviceInfo DeviceOfClass(const std::string& device_class) {
  DeviceInfo device;
  const size_t first = device_class.find('/');
  const size_t last = device_class.rfind('/');
  if (first == std::string::npos || first == last) {
    device.name = device_class;
    return device;
  }
  device.backend = device_class.substr(0, first);
  device.name = device_class.substr(first + 1, last - first - 1);
  device.arch = device_class.substr(last + 1);
  return device;
}

absl::StatusOr<SourceInfo> SourceFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return absl::InvalidArgumentError(Cat(where, ": not an object"));
  SourceInfo source;
  source.commit = j.value("commit", "");
  source.environment = j.value("environment", "");
  source.device = DeviceOfClass(j.value("device_class", ""));
  return source;
}

absl::StatusOr<CellMeasurement> SideFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("check") || !j.contains("blocks")) {
    return absl::InvalidArgumentError(Cat(where, ": needs check and blocks"));
  }
  CellMeasurement m;
  absl::StatusOr<CellCheck> check = protocol::ParseCheck(j.at("check").dump());
  if (!check.ok()) return absl::InvalidArgumentError(Cat(where, ".check: ", check.status().message()));
  m.check = *check;
  absl::StatusOr<std::vector<SampleBlock>> blocks = SampleBlocksFromJson(j.at("blocks").dump());
  if (!blocks.ok()) return absl::InvalidArgumentError(Cat(where, ".blocks: ", blocks.status().message()));
  m.blocks = *std::move(blocks);
  if (j.contains("first_in_round")) {
    const nlohmann::json& first = j.at("first_in_round");
    if (!first.is_array() || first.size() != m.blocks.size()) {
      return absl::InvalidArgumentError(Cat(where, ".first_in_round: an array of one boolean per block expected"));
    }
    for (const nlohmann::json& f : first) {
      if (!f.is_boolean()) return absl::InvalidArgumentError(Cat(where, ".first_in_round: booleans expected"));
      m.first_in_round.push_back(f.get<bool>());
    }
  }
  if (j.contains("sequence")) {
    const nlohmann::json& sequence = j.at("sequence");
    if (!sequence.is_array() || sequence.size() != m.blocks.size()) {
      return absl::InvalidArgumentError(Cat(where, ".sequence: an array of one place per block expected"));
    }
    for (const nlohmann::json& k : sequence) {
      if (!k.is_number_integer() || k.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(Cat(where, ".sequence: places >= 0 expected"));
      }
      m.sequence.push_back(k.get<int>());
    }
  }
  return m;
}

// A number ComparisonToJson wrote (null for a value that was not finite).
double NumberFrom(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number()) return std::numeric_limits<double>::quiet_NaN();
  return j.at(key).get<double>();
}

nlohmann::json SideToJson(const CellMeasurement& m) {
  nlohmann::json side = {{"check", protocol::CheckToJson(m.check)},
                         {"blocks", nlohmann::json::parse(SampleBlocksToJson(m.blocks))}};
  if (!m.first_in_round.empty()) side["first_in_round"] = m.first_in_round;
  if (!m.sequence.empty()) side["sequence"] = m.sequence;
  return side;
}

// JSON has no infinity or NaN: such a value (an interval of too few blocks) is written as null.
nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

std::string ComparisonToJson(const Comparison& comparison) {
  nlohmann::json cells = nlohmann::json::array();
  for (const CellComparison& c : comparison.cells) {
    const CellVerdict& v = c.verdict;
    nlohmann::json cell = {{"problem", c.cell.problem.Key()},
                     {"config", c.cell.config.Key()},
                     {"baseline_config", c.cell.BaselineConfig().Key()},
                     {"role", c.cell.role},
                     {"verdict",
                      {{"verdict", regress::VerdictName(v.verdict)},
                       {"ratio", Number(v.ratio.pairwise_ratio)},
                       {"ratio_of_medians", Number(v.ratio.ratio)},
                       {"lower", Number(v.ratio.lower)},
                       {"upper", Number(v.ratio.upper)},
                       {"confidence", v.ratio.confidence},
                       {"floor", Number(v.floor)},
                       {"p_slower", Number(v.p_slower)},
                       {"p_slower_adjusted", Number(v.p_slower_adjusted)},
                       {"p_faster", Number(v.p_faster)},
                       {"p_faster_adjusted", Number(v.p_faster_adjusted)},
                       {"exact", v.exact},
                       {"paired", v.paired},
                       {"baseline_blocks", v.baseline_blocks},
                       {"candidate_blocks", v.candidate_blocks},
                       {"accuracy_failed", v.accuracy.failed},
                       {"error_grew", v.accuracy.grew},
                       {"why", v.why}}},
                     {"baseline", SideToJson(c.baseline)},
                     {"candidate", SideToJson(c.candidate)}};
    absl::StatusOr<AttentionProblem> from_key = AttentionProblem::FromKey(c.cell.problem.Key());
    if (!from_key.ok() || ProblemToJson(*from_key) != ProblemToJson(c.cell.problem)) {
      cell["problem_fields"] = nlohmann::json::parse(ProblemToJson(c.cell.problem));
    }
    cells.push_back(std::move(cell));
  }
  nlohmann::json doc = {{"baseline", SourceToJson(comparison.baseline)},
                        {"candidate", SourceToJson(comparison.candidate)},
                        {"interleaved", comparison.interleaved},
                        {"one_process", comparison.one_process},
                        {"round_order", RoundOrderName(comparison.round_order)},
                        {"measure_seconds", comparison.measure_seconds},
                        {"blocks_measured", comparison.blocks_measured},
                        {"cells", std::move(cells)}};
  return doc.dump(1) + "\n";
}

absl::StatusOr<Comparison> ComparisonFromJson(std::string_view text, std::vector<std::string>* left_out) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(Cat("not a comparison: malformed JSON: ", e.what()));
  }
  if (!doc.is_object() || !doc.contains("cells") || !doc.at("cells").is_array()) {
    return absl::InvalidArgumentError("not a comparison: a JSON object with a cells array is expected");
  }
  try {
    Comparison out;
    for (const char* side : {"baseline", "candidate"}) {
      if (!doc.contains(side)) return absl::InvalidArgumentError(Cat("not a comparison: no ", side));
      absl::StatusOr<SourceInfo> source = SourceFromJson(doc.at(side), side);
      if (!source.ok()) return source.status();
      (std::string_view(side) == "baseline" ? out.baseline : out.candidate) = *std::move(source);
    }
    out.interleaved = doc.value("interleaved", false);
    out.one_process = doc.value("one_process", false);
    // Comparisons written before the choice existed were shuffled.
    if (doc.contains("round_order")) {
      const nlohmann::json& order = doc.at("round_order");
      absl::StatusOr<RoundOrder> o = order.is_string() ? ParseRoundOrderName(order.get<std::string>())
                                                       : absl::InvalidArgumentError("a string expected");
      if (!o.ok()) return absl::InvalidArgumentError(Cat("not a comparison: round_order: ", o.status().message()));
      out.round_order = *o;
    }
    out.measure_seconds = doc.value("measure_seconds", 0.0);
    out.blocks_measured = doc.value("blocks_measured", 0);
    const nlohmann::json& cells = doc.at("cells");
    for (size_t i = 0; i < cells.size(); ++i) {
      const nlohmann::json& j = cells[i];
      const std::string where = Cat("cell ", i);
      if (!j.is_object()) return absl::InvalidArgumentError(Cat(where, ": not an object"));
      const std::string problem_key = j.value("problem", "");
      absl::StatusOr<AttentionProblem> problem =
          j.contains("problem_fields") ? ProblemFromJson(j.at("problem_fields").dump()) : AttentionProblem::FromKey(problem_key);
      if (!problem.ok()) {
        if (j.contains("problem_fields")) {
          return absl::InvalidArgumentError(Cat(where, ".problem_fields: ", problem.status().message()));
        }
        if (left_out != nullptr) {
          left_out->push_back(Cat(where, " (", problem_key, " ", j.value("config", ""),
                                  "): its problem key does not parse back and the file has no problem_fields"));
        }
        continue;
      }
      CellComparison c;
      c.cell.problem = *std::move(problem);
      absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(j.value("config", ""));
      if (!config.ok()) return absl::InvalidArgumentError(Cat(where, ".config: ", config.status().message()));
      c.cell.config = *config;
      const std::string baseline_key = j.value("baseline_config", config->Key());
      if (baseline_key != config->Key()) {
        absl::StatusOr<KernelConfig> baseline = KernelConfig::FromKey(baseline_key);
        if (!baseline.ok()) {
          return absl::InvalidArgumentError(Cat(where, ".baseline_config: ", baseline.status().message()));
        }
        c.cell.baseline_config = *baseline;
      }
      c.cell.role = j.value("role", "best");
      for (const char* side : {"baseline", "candidate"}) {
        if (!j.contains(side)) return absl::InvalidArgumentError(Cat(where, ": no ", side));
        absl::StatusOr<CellMeasurement> m = SideFromJson(j.at(side), Cat(where, ".", side));
        if (!m.ok()) return m.status();
        (std::string_view(side) == "baseline" ? c.baseline : c.candidate) = *std::move(m);
      }
      c.verdict.problem_key = c.cell.problem.Key();
      c.verdict.config_key = c.cell.config.Key();
      if (j.contains("verdict") && j.at("verdict").is_object()) {
        const nlohmann::json& v = j.at("verdict");
        c.verdict.ratio.pairwise_ratio = NumberFrom(v, "ratio");
        c.verdict.ratio.ratio = NumberFrom(v, "ratio_of_medians");
        c.verdict.ratio.lower = NumberFrom(v, "lower");
        c.verdict.ratio.upper = NumberFrom(v, "upper");
        absl::StatusOr<Verdict> verdict = regress::ParseVerdictName(v.value("verdict", ""));
        if (verdict.ok()) c.verdict.verdict = *verdict;
      }
      out.cells.push_back(std::move(c));
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(Cat("not a comparison: ", e.what()));
  }
}

absl::Status JudgeComparison(const regress::VerdictOptions& verdict, const CompareOptions& options,
                             Comparison& comparison) {
  return Judge(comparison.cells, comparison.interleaved ? verdict : StoredVerdictOptions(verdict, options), options,
               /*paired=*/comparison.interleaved);
}

}  // namespace fusetune::regress
