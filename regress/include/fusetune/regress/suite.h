// Bench suites: the (problem, config) cells a build is measured on, night after night, so two
// builds can be compared cell by cell.
//
// A suite file is JSON:
//   {
//     "name": "h200-nightly",                     // names its stored bench runs ("bench:<name>")
//     "description": "free text",
//     "device_class": "cuda/NVIDIA-H200/sm90",     // optional: refuse to run on another device
//     "block": {"warmup": 3, "repeats": 20, "max_seconds": 1.0, "flush_l2": true},
//     "blocks": 10,                                // blocks per cell and side (first pass)
//     "rounds_across_problems": false,             // optional; see Suite
//     "min_floor": 0.005,                          // optional; see Suite
//     "round_order": "mirrored",                   // optional: "shuffled" (default) or "mirrored"
//     "max_measure_seconds": 600,                  // optional: the nightly's measuring budget
//     "cells": [
//       {"problem": "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32",
//        "config": "fused/bm64/bs64/t2/fp32/st1",
//        "role": "best"},
//       {"problem": {"batch": 3, "q_heads": 8, ..., "cu_seqlens_q": [0, 5, 12, 30], ...},
//        "config": "materialized/bm64/bs64/t2/fp32/st1", "role": "materialized"}
//     ]
//   }
// A problem is its key (AttentionProblem::Key()) when the key can be parsed back, or an object
// with the problem's fields (needed for varlen and padded problems, whose keys hold only a hash
// of the length lists). Roles say why a cell is in the suite: "best" (a tuned pick), "reference"
// (a pinned config such as the backend's default), "materialized" (the baseline the fused
// kernel's speedup is quoted against), "pick" (a re-tune's new pick, compared with the old pick:
// its `baseline_config`).
//
// A block is one Backend::Time call with the suite's `block` options; its median is one sample
// of the comparison's statistics (fusetune/regress/verdict.h). `"graph": true` in `block`
// (optional, default false; TimingOptions::graph) times each block as one CUDA graph where the
// backend can (CUDA); a cell whose two
// sides were timed differently is judged unknown (compare.h).
//
// Thread-safety: plain value types and pure functions.
#ifndef FUSETUNE_REGRESS_SUITE_H_
#define FUSETUNE_REGRESS_SUITE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/records/run.h"
#include "fusetune/records/trial.h"
#include "fusetune/regress/verdict.h"

namespace fusetune::regress {

// How an interleaved comparison (compare.h) orders the blocks of a round.
//   kShuffled: every (cell, side) of the round in a fresh random order; each side of a cell
//     goes first in half of the cell's rounds.
//   kMirrored: the round's cells in a fresh random order, measured twice in that order, first
//     every cell on one side, then every cell on the other (the side that starts alternates from
//     round to round, so each goes first in half of a cell's rounds), with the cell that ended
//     the previous round of the problem ending this one too. So a cell's two blocks of a round
//     follow blocks of one and the same cell, and no cell's two sides run back to back (unless
//     a round holds one cell). On the H200, where what ran just before moves a power-capped
//     kernel's time by several percent, the per-round ratios of the bf16 S4096 cells spread
//     2.8 times less when both sides had followed the same cell than when they had not
//     (docs/perf.md, "what ran just before").
enum class RoundOrder { kShuffled, kMirrored };
// Every round order, the default first: what a name may be, in the order flags list them.
inline constexpr RoundOrder kRoundOrders[] = {RoundOrder::kShuffled, RoundOrder::kMirrored};
// A round order's name in suites, flags and reports: "shuffled", "mirrored".
const char* RoundOrderName(RoundOrder order);
// The round order of a name; InvalidArgument naming the valid ones for any other.
absl::StatusOr<RoundOrder> ParseRoundOrderName(std::string_view name);

struct SuiteCell {
  AttentionProblem problem;
  KernelConfig config;           // measured on the candidate side (and the baseline side, unless
  std::string role = "best";     //   baseline_config is set)
  // The config the baseline side runs instead of `config` (a "pick" cell: the old pick); unset
  // means the same as `config`.
  std::optional<KernelConfig> baseline_config;

  const KernelConfig& BaselineConfig() const { return baseline_config ? *baseline_config : config; }
  // "<problem key> <config key>" (the candidate's config key; a pick cell adds " (was <old key>)").
  std::string Name() const;
};

struct Suite {
  std::string name;
  std::string description;
  std::string device_class;  // empty = any device
  TimingOptions block{.warmup = 3, .repeats = 20, .max_seconds = 1.0, .flush_l2 = true};
  int blocks = 10;
  // How a measurement's rounds visit the problems. false: one problem's rounds all before the
  // next problem's (each source prepares a problem's inputs once). true: one round of every
  // problem before the next round, so each source prepares every problem's inputs afresh each
  // round (a source holds one problem's inputs at a time): where a process's buffers land then
  // varies from round to round and shows in the blocks' spread, instead of shifting every
  // block of one side alike (on a loaded 2-core CPU host, by 2-30 % now and then; docs/perf.md).
  // Costs a preparation per round and problem; a suite of one problem is unaffected.
  bool rounds_across_problems = false;
  // The smallest change (relative) an interleaved comparison on this suite may call regressed
  // or improved: the floor's minimum (regress::VerdictOptions::min_floor) for this suite's
  // device, where its A/A comparisons showed how far two builds with the same kernels differ
  // (docs/perf.md). Absent: VerdictOptions' default. In [0, 0.1] (VerdictOptions::max_floor).
  std::optional<double> min_floor;
  // The floor's minimum for cells calibrated by enough A/A comparisons of this device
  // (regress::VerdictOptions::calibrated_min_floor): the smallest change worth calling once a
  // cell's own A/A spread is known. Absent: min_floor for every cell. In [0, 0.1].
  std::optional<double> calibrated_min_floor;
  // How the cells' p-values are adjusted for their number (regress::VerdictOptions::correction,
  // "none", "holm" or "benjamini-hochberg"). Absent: VerdictOptions' default (Holm).
  std::optional<regress::Correction> correction;
  // How an interleaved comparison orders each round's blocks (RoundOrder). Absent: shuffled.
  std::optional<RoundOrder> round_order;
  // An interleaved comparison's time budget in seconds (regress::CompareOptions::
  // max_measure_seconds): no re-measure pass starts after it, so a night's measuring on this
  // suite ends in time. Absent or 0: none. In [0, 86400].
  std::optional<double> max_measure_seconds;
  std::vector<SuiteCell> cells;

  // The stored run label of this suite's bench runs: "bench:<name>".
  std::string RunLabel() const;
};

// The suite's name, checked: 1..64 characters of [A-Za-z0-9._-].
absl::Status ValidateSuiteName(std::string_view name);

// Parses a suite document. InvalidArgument naming the cell index and field for: malformed JSON,
// a missing or invalid name, an unknown field (top level, block, cell or problem: a typo is not
// ignored), an unknown role, a baseline_config on a cell whose role is not "pick" or a pick cell
// without one, an invalid problem (AttentionProblem::Validate) or config
// (KernelConfig::Validate), a problem key that cannot be parsed back, block options out of range
// (repeats 1..100000, warmup 0..1000, max_seconds > 0), blocks outside 3..1000,
// rounds_across_problems not a boolean, no cells, or two
// cells with the same problem, config, role and baseline config. Fields left out take the
// defaults of Suite, TimingOptions and SuiteCell (role "best"); name and cells are required.
absl::StatusOr<Suite> ParseSuite(std::string_view json_text);
// Reads and parses a suite file; NotFound when it cannot be read (the message names the path).
absl::StatusOr<Suite> ReadSuiteFile(const std::string& path);
// The suite as a JSON document that ParseSuite reads back to an equal suite (problems as keys
// where the key parses back, else as objects).
std::string SuiteToJson(const Suite& suite);

// A problem as JSON (every field of AttentionProblem; kv_storage only when it is "e4m3", so
// that a build from before that field reads every other problem) and back; ProblemFromJson accepts a key
// string too, and fields left out of an object take AttentionProblem's defaults. InvalidArgument
// for unknown fields, wrong types or an invalid problem.
std::string ProblemToJson(const AttentionProblem& problem);
absl::StatusOr<AttentionProblem> ProblemFromJson(std::string_view json_text);

// What a suite is generated from: a device class's best configs and, per problem, the trials of
// the run that picked it (for its materialized baseline).
struct SuiteSource {
  BestConfig best;
  std::vector<Trial> provenance_trials;  // may be empty
};

// A suite from best configs (`fusetune bench --from-db`): per problem whose key parses back
// (varlen and padded problems cannot be rebuilt from their keys and are listed in `skipped`, by
// problem key, as is a record whose config key does not parse; `skipped` may be null),
// a "best" cell with the recorded pick, a "reference" cell with `reference` (the backend's
// DefaultConfig; left out when it equals the pick or it fails), and a "materialized" cell with
// the fastest verified materialized config of the provenance trials (left out when none, or when
// it is the pick).
// InvalidArgument for an invalid name or when no cell results.
absl::StatusOr<Suite> SuiteFromBestConfigs(std::string_view name, std::string_view device_class,
                                           std::string_view backend,
                                           const std::vector<SuiteSource>& sources,
                                           std::vector<std::string>* skipped);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_SUITE_H_
