// One cell's per-commit history from a suite's bench runs (per run, the median of the cell's
// block medians, ordered by the run's finish time) and its change points (change_points.h):
// what `fusetune history` reads, detects and records.
//
// Thread-safety: the functions keep no state; they are as safe as the Store they are given.
#ifndef FUSETUNE_REGRESS_HISTORY_H_
#define FUSETUNE_REGRESS_HISTORY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/change_points.h"

namespace fusetune::regress {

struct HistoryPoint {
  int64_t run_id = 0;
  std::string commit;
  int64_t finished_unix_ms = 0;
  double median_us = 0;
};

struct CellHistory {
  std::string device_class;
  std::string problem_key;
  std::string config_key;
  std::vector<HistoryPoint> points;  // oldest first
};

// What a suite's runs hold for one cell, oldest run first.
struct CellSamples {
  struct Run {
    const RunInfo* run = nullptr;  // points into the runs CollectCellSamples was given
    std::map<std::string, std::vector<double>> blocks_by_config;  // the matching cells' block medians
  };
  std::vector<Run> runs;
  std::set<std::string> known_cells;     // every "problem config" of the suite
  std::set<std::string> configs;         // the configs that match the asked-for cell
  std::set<std::string> device_classes;  // of the runs holding a matching cell
};

// The block medians of the cells of `suite` in each of `runs_oldest_first` (which must outlive
// the result) whose problem is `problem_key` and, unless empty, config `config_key`; cells that
// failed or hold no blocks are left out. The store's errors.
absl::StatusOr<CellSamples> CollectCellSamples(Store& store, const std::vector<RunInfo>& runs_oldest_first,
                                               const std::string& suite, const std::string& problem_key,
                                               const std::string& config_key);

// Which history to read: a cell of a suite, on one device class (empty: any, as long as the
// cell was measured on one only).
struct HistoryQuery {
  std::string suite;
  std::string problem_key;
  std::string config_key;  // empty: the problem's only config in the suite
  std::string device_class;
};

// How many of the existing cells an unknown cell's error lists.
inline constexpr size_t kCellsListed = 20;

// The cell's history: per finished bench run holding it, the median of its block medians.
// NotFound when the store holds no finished bench run of the suite (on the device class);
// InvalidArgument when the suite has no measured such cell (the message lists up to
// kCellsListed of its cells), the problem has several configs, or the cell was measured on
// several device classes; the store's errors.
absl::StatusOr<CellHistory> ReadHistory(Store& store, const HistoryQuery& query);

// The change points of a history's medians (DetectChangePoints' errors).
absl::StatusOr<ChangePointResult> DetectHistoryChangePoints(const CellHistory& history);

// The change points as rows of the store's change_points table.
std::vector<ChangePointRow> ToRows(const CellHistory& history, const std::string& suite,
                                   const ChangePointResult& result);

// Replaces the cell's stored change points with `result`'s. The store's error.
absl::Status RecordChangePoints(Store& store, const CellHistory& history, const std::string& suite,
                                const ChangePointResult& result);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_HISTORY_H_
