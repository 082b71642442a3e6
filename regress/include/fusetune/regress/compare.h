// Comparing two builds of fusetune on a suite: per cell, blocks of the baseline and of the
// candidate, then the regression verdicts of fusetune/regress/verdict.h.
//
// Interleaved (both builds at hand, CompareInterleaved): cells are taken problem by problem
// (each source prepares a problem's inputs once; with Suite::rounds_across_problems, one round
// of every problem before the next round, and inputs prepared afresh each round); both sources
// verify every cell of the problem, then each round measures one block of every (cell, side) of
// the problem in a fresh random order (seeded by the options and the round; each side of a cell
// goes first in half of its rounds, as the side measured first can be the slower one; with
// RoundOrder::kMirrored the cells in a random order on one side, then in the same order on the
// other, so that both sides of a cell follow the same cell), so both
// builds see the same device state, L2 state and inputs. Block i of a cell's two sides come from the same
// round, so the cell is judged on the per-round ratios (verdict.h, paired cells). After the
// first pass (`blocks` rounds, at least PairedBlocksToResolve for the suite's cell count) the
// suite is judged; each cell judged unknown is measured again, interleaved, up to the block
// count its verdict suggests (what its interval needs, at most max_blocks), and the suite is
// judged again, until no cell asks for more or CompareOptions::max_measure_seconds ran out.
//
// Stored (the baseline build is gone, CompareWithStored): the candidate is measured alone and
// judged against the baseline's stored blocks with a wider floor (between-session drift is not
// in the blocks' spread); a flagged cell is then only a suspicion, to be confirmed by measuring
// both builds interleaved (the caller rebuilds the baseline and calls CompareInterleaved on the
// flagged cells).
//
// A cell's floor (regress::Floor) takes the larger of two noise estimates: RatioNoise of the
// comparison's own baseline and candidate block sets (shift-invariant, so a real slowdown does
// not widen its own floor), and CompareOptions::known_aa_noise, the cell's between-process
// noise from earlier A/A comparisons (regress::CalibratedNoise): two processes of one build can
// differ systematically (on an H200, 1.5-2 % on 12 us kernels; on a loaded 2-core CPU host,
// 1-3 % often and over 20 % now and then), which no spread of blocks shows.
//
// A cell whose two sides' blocks were timed differently (SampleBlock::graphed: one side through
// a CUDA graph, the other launch by launch, say a build that cannot time through a graph beside
// one that does) is reported unknown with the reason, whatever its ratio: the difference holds
// the host's launch latency as much as the kernels. Its statistics and accuracy are still
// judged (alone, outside the suite's adjustment); it is not measured again.
//
// A cell that fails verification on the candidate side fails on accuracy (no timing); on the
// baseline side only, it is reported unknown. Accuracy: each side's max_rel_error, the
// candidate's tolerance and ErrorGrowthLimit of the cell's precision.
//
// Thread-safety: the functions drive the sources passed in; not for concurrent use of a source.
#ifndef FUSETUNE_REGRESS_COMPARE_H_
#define FUSETUNE_REGRESS_COMPARE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/suite.h"
#include "fusetune/regress/verdict.h"

namespace fusetune::regress {

// One side of a cell: its verification and its blocks, in measurement order.
struct CellMeasurement {
  CellCheck check;
  std::vector<SampleBlock> blocks;
  // Per block of an interleaved comparison: measured before the other side's block of its round
  // (the order can move a block's time, compare.cc). Empty where there are no rounds.
  std::vector<bool> first_in_round;
  // Per block: its place among every block the comparison measured, both sides (0, 1, ...), so
  // what ran just before a block can be read back. Empty where not recorded (older JSON).
  std::vector<int> sequence;
  std::vector<double> Medians() const;  // blocks[i].median_us
};

// A cell's calibration: its A/A noise from earlier A/A comparisons (relative,
// regress::CalibratedNoise; 0 when none was measured) and how many comparisons that is over.
struct KnownCellNoise {
  double noise = 0;
  int calibrations = 0;
};

struct CompareOptions {
  // First-pass blocks per cell and side; 0 = the suite's `blocks`.
  int blocks = 0;
  regress::VerdictOptions verdict;
  // The floor's minimum for this comparison (`regress --min-floor`): when set, it replaces both
  // verdict.min_floor and the suite's min_floor; else the suite's, when it has one, replaces
  // verdict.min_floor (EffectiveVerdictOptions).
  std::optional<double> min_floor;
  // The same for the minimum of calibrated cells (`regress --calibrated-min-floor`, the suite's
  // calibrated_min_floor, verdict.calibrated_min_floor, in that order).
  std::optional<double> calibrated_min_floor;
  // The adjustment of the cells' p-values (`regress --correction`, the suite's correction,
  // verdict.correction, in that order).
  std::optional<regress::Correction> correction;
  // How the rounds of an interleaved comparison order their blocks (`regress --round-order`,
  // else the suite's round_order, else shuffled: EffectiveRoundOrder).
  std::optional<RoundOrder> round_order;
  // > 0: no re-measure pass of undecided cells starts once the comparison has measured this many
  // seconds (a nightly's time budget); cells still undecided then stay unknown, saying so. The
  // first pass always completes. Unset: the suite's max_measure_seconds, else no budget
  // (EffectiveMaxMeasureSeconds); 0: no budget whatever the suite says.
  std::optional<double> max_measure_seconds;
  // Stored comparisons: the floor's minimum instead of verdict.min_floor.
  double stored_min_floor = 0.03;
  uint64_t order_seed = 1;
  // Called after every block with (blocks done, blocks planned so far); may be empty.
  std::function<void(int, int)> progress;
  const std::atomic<bool>* cancel = nullptr;  // stop early (Cancelled)
  // The cell's between-process A/A noise from earlier A/A comparisons (relative,
  // regress::CalibratedNoise), or 0 when none was measured: CellInput::calibrated_noise.
  std::function<KnownCellNoise(const SuiteCell&)> known_aa_noise;
  // Fail with InvalidArgument, before any block is timed, when a cell is unsupported on every
  // side measured (a suite naming configs this device cannot run).
  bool require_runnable = true;
};

struct CellComparison {
  SuiteCell cell;
  CellMeasurement baseline;
  CellMeasurement candidate;
  regress::CellVerdict verdict;
};

struct Comparison {
  SourceInfo baseline;
  SourceInfo candidate;
  bool interleaved = false;        // false: against stored baseline blocks
  // Both builds measured in one process on the same inputs (the baseline's kernels a side of
  // the candidate's bench-serve, RunnerBlockSource::AddSide); set by the caller that arranged it.
  bool one_process = false;
  // How the rounds ordered their blocks (interleaved comparisons; RoundOrder).
  RoundOrder round_order = RoundOrder::kShuffled;
  std::vector<CellComparison> cells;  // in suite order
  double measure_seconds = 0;      // wall time spent measuring
  int blocks_measured = 0;         // both sides together

  int CountVerdict(regress::Verdict verdict) const;
  // Any cell that Failed() (regressed, accuracy failed or grew).
  bool AnyFailed() const;
  // Any cell whose accuracy failed or grew (what fails a comparison whatever its timing says).
  bool AnyAccuracyFailed() const;
};

// The verdict options a comparison of `suite` under `options` judges with: options.verdict
// with the floor's minimum of options.min_floor, else the suite's min_floor, else its own; its
// calibrated_min_floor and its correction likewise.
regress::VerdictOptions EffectiveVerdictOptions(const Suite& suite, const CompareOptions& options);

// The round order a comparison of `suite` under `options` measures with: options.round_order,
// else the suite's, else shuffled.
RoundOrder EffectiveRoundOrder(const Suite& suite, const CompareOptions& options);

// The time budget a comparison measures to: options.max_measure_seconds, else the suite's, else
// 0 (none).
double EffectiveMaxMeasureSeconds(const Suite& suite, const CompareOptions& options);

// Measures `cells` of both sources interleaved and judges them. FailedPrecondition when the
// sources' device classes differ; InvalidArgument for no cells or bad options; a source's error
// (Unavailable, Internal, ...) is returned as is; Cancelled when options.cancel was set.
absl::StatusOr<Comparison> CompareInterleaved(BlockSource& baseline, BlockSource& candidate,
                                              const Suite& suite, const CompareOptions& options = {});

// The stored side of a comparison: a previous bench run's measurement of a cell.
struct StoredCell {
  std::string problem_key;
  std::string config_key;
  std::string role;
  CellMeasurement measurement;
};

// Measures the candidate alone on `suite` and judges it against `stored` (matched by problem
// key, config key — the baseline config for pick cells — and role; a cell with no stored match
// is reported unknown with the reason). FailedPrecondition when the device classes differ.
absl::StatusOr<Comparison> CompareWithStored(const SourceInfo& baseline, const std::vector<StoredCell>& stored,
                                             BlockSource& candidate, const Suite& suite,
                                             const CompareOptions& options = {});

// The comparison as one JSON document (`fusetune regress --json`): both sources (commit,
// device class, environment), whether it was interleaved and in one process, the wall time and block count, and per
// cell in suite order its problem and config keys, role, verdict (name, Hodges–Lehmann ratio,
// ratio of medians, interval and confidence, floor, raw and adjusted p-values, whether the
// blocks were paired by round, blocks per side, why) and each side's verification (outcome,
// message, errors, tolerance) and blocks in measurement order (the records' JSON form of
// blocks, fusetune/records/json.h: median, samples, clock, power and throttle state; and, in an
// interleaved comparison, "first_in_round": which of a round's two blocks came first, and
// "sequence": each block's place among all the comparison's blocks). This is
// what a comparison measured, both sides; the database keeps only the candidate's blocks.
// A problem whose key does not parse back (varlen and padded problems: their keys hold only a
// hash of the length lists) is also written whole, as "problem_fields" (ProblemToJson).
std::string ComparisonToJson(const Comparison& comparison);

// Reads back what ComparisonToJson wrote: sources (commit, environment; the device as its
// class's backend, name and arch), interleaved, one_process, the wall time and block count, and
// per cell its problem, configs, role, both sides' checks, blocks and order in their rounds, and the verdict's ratio
// estimate (the ratios an A/A comparison contributes as a calibration). Other verdict fields are
// not read: JudgeComparison decides again. A cell whose problem cannot be rebuilt (its key does
// not parse back and no "problem_fields" were written, as by builds before that field) is left
// out, with a line in `left_out` (may be null) naming it. InvalidArgument for text that is not
// such a document (naming the cell and field).
absl::StatusOr<Comparison> ComparisonFromJson(std::string_view text, std::vector<std::string>* left_out = nullptr);

// Judges every cell of `comparison` again (its verdicts are replaced), as the comparison that
// measured it did: the timed cells together under `verdict` (paired by round when the
// comparison was interleaved; against stored blocks the floor's minimum is at least
// options.stored_min_floor), their calibrations from options.known_aa_noise; untimed cells
// from their checks. Errors: JudgeSuite's (bad options or samples).
absl::Status JudgeComparison(const regress::VerdictOptions& verdict, const CompareOptions& options,
                             Comparison& comparison);

// One cell measured on one source.
struct MeasuredCell {
  SuiteCell cell;
  CellMeasurement measurement;
};

// Measures every cell of `suite` on one source (`fusetune bench --suite`): verification, then
// `blocks` rounds (0 = the suite's), the cells of a problem in random order each round. A cell
// that fails verification has no blocks. A source's error is returned as is.
absl::StatusOr<std::vector<MeasuredCell>> MeasureSuite(BlockSource& source, const Suite& suite,
                                                        const CompareOptions& options = {});

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_COMPARE_H_
