#include "regress_outputs.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench_suite.h"
#include "fmt/format.h"
#include "fusetune/db/store.h"
#include "fusetune/base/median.h"
#include "fusetune/regress/junit.h"
#include "fusetune/regress/regress_run.h"
#include "fusetune/regress/suite_bench.h"
#include "fusetune/report/html.h"
#include "fusetune/report/regress_report.h"

namespace fusetune::cli {
namespace {

std::string Title(const regress::Suite& suite, const regress::Comparison& c) {
  return fmt::format("fusetune regress: suite {}, {} against {} on {} ({})", suite.name, c.candidate.commit,
                     c.baseline.commit, c.candidate.device.DeviceClass(),
                     c.interleaved ? "interleaved" : "against stored baseline blocks");
}

std::string Markdown(const regress::Suite& suite, const regress::Comparison& c, const std::vector<std::string>& notes) {
  std::vector<regress::CellVerdict> verdicts;
  for (const regress::CellComparison& cell : c.cells) verdicts.push_back(cell.verdict);
  std::string text = regress::WriteMarkdownReport(Title(suite, c), verdicts);
  text += fmt::format("\n{} blocks measured in {:.1f} s.\n", c.blocks_measured, c.measure_seconds);
  for (const std::string& note : notes) text += fmt::format("\n- {}", note);
  if (!notes.empty()) text += "\n";
  return text;
}

// What a calibration measured, for its reports: the spread of its timed cells' ratios and what
// its verdicts were.
std::string CalibrationNote(const regress::Comparison& c) {
  std::vector<double> differences;
  double largest = 0;
  std::string largest_cell;
  for (const regress::CellComparison& cell : c.cells) {
    const regress::CellVerdict& v = cell.verdict;
    if (v.baseline_blocks == 0 || v.candidate_blocks == 0 || !(v.ratio.pairwise_ratio > 0)) continue;
    const double difference = std::abs(std::log(v.ratio.pairwise_ratio));
    differences.push_back(difference);
    if (difference >= largest) {
      largest = difference;
      largest_cell = cell.cell.Name();
    }
  }
  std::string measured = "no cell was timed";
  if (!differences.empty()) {
    measured = fmt::format("{} differed by {:.2f} % (median |log ratio| of {} timed cells), at most {:.2f} % ({})",
                           c.one_process ? "the build's two sides in one process" : "two processes of the build",
                           100 * Median(differences), differences.size(), 100 * largest, largest_cell);
  }
  return fmt::format("A/A calibration of {} (the same build on both sides): {}; {} same, {} unknown (a calibration "
                     "calls no cell regressed or improved: a difference beyond the floor is the host's noise). "
                     "{}; exit 0 unless accuracy fails",
                     c.candidate.commit, measured, c.CountVerdict(regress::Verdict::kSame),
                     c.CountVerdict(regress::Verdict::kUnknown),
                     c.one_process ? "Stored for the floors of later runs in one process"
                                   : "Stored for the floors of later runs in two processes");
}

}  // namespace

absl::Status CheckOutputFile(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return absl::OkStatus();
  std::error_code ec;
  const fs::path target(path);
  if (fs::is_directory(target, ec)) {
    return absl::InvalidArgumentError(fmt::format("{} {}: is a directory, not a file", flag, path));
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(fmt::format("{} {}: {} is not a directory", flag, path, dir.string()));
  }
  std::string probe = (dir / ".fusetune-write-check-XXXXXX").string();
  const int fd = mkstemp(probe.data());
  if (fd < 0) {
    return absl::InvalidArgumentError(
        fmt::format("{} {}: cannot create a file in {}: {}", flag, path, dir.string(), std::strerror(errno)));
  }
  close(fd);
  fs::remove(probe, ec);
  return absl::OkStatus();
}

absl::Status WriteRegressOutputs(const RegressFlags& f, const regress::Suite& suite, const regress::Comparison& comparison,
                                 const std::vector<std::string>& notes, std::unique_ptr<Store>& store) {
  if (store == nullptr) {
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(f.db);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
  }
  // A run with planted slowdowns checks the method: its candidate measurement is never stored
  // as a bench run (it would become a baseline or a history point); its verdict rows are, under
  // the metric "planted_latency" that no calibration reads.
  const std::string planted = regress::PlantedDescription(f.plant_slowdowns);
  absl::StatusOr<regress::RecordedRegressRun> recorded = regress::RecordRegressRun(
      *store, suite, comparison, BenchRunInfo(suite, comparison.candidate), !planted.empty());
  if (!recorded.ok()) return recorded.status();
  const int64_t run_id = recorded->run_id;
  const std::vector<Regression>& rows = recorded->rows;

  std::vector<regress::CellVerdict> verdicts;
  for (const regress::CellComparison& cell : comparison.cells) verdicts.push_back(cell.verdict);
  std::vector<std::string> all_notes = notes;
  const bool calibration = regress::IsCalibration(f, comparison);
  if (!planted.empty()) {
    all_notes.insert(all_notes.begin(),
                     fmt::format("planted slowdowns on the candidate (a check of the method, not a measurement of the "
                                 "build): {}",
                                 planted));
  } else if (calibration) {
    all_notes.insert(all_notes.begin(), CalibrationNote(comparison));
  }
  const std::string markdown = Markdown(suite, comparison, all_notes);
  std::printf("%s", markdown.c_str());
  if (planted.empty()) {
    std::printf("\nstored: bench run %lld and %zu verdict rows%s in %s\n", static_cast<long long>(run_id), rows.size(),
                calibration ? " (an A/A calibration)" : "", RedactDatabaseUrl(f.db).c_str());
  } else {
    std::printf("\nstored: %zu planted_latency verdict rows in %s (no bench run: planted)\n", rows.size(), RedactDatabaseUrl(f.db).c_str());
  }
  if (!f.junit.empty()) {
    std::vector<regress::SuiteProperty> properties;
    if (!planted.empty()) properties.push_back({"planted_slowdowns", planted});
    if (calibration) properties.push_back({"calibration", comparison.candidate.commit});
    if (absl::Status s = report::WriteFileAtomically(f.junit, regress::WriteJUnitXml(fmt::format("fusetune-regress-{}", suite.name),
                                                                   verdicts, properties));
        !s.ok()) {
      return s;
    }
  }
  if (!f.markdown.empty()) {
    if (absl::Status s = report::WriteFileAtomically(f.markdown, markdown); !s.ok()) return s;
  }
  if (!f.json.empty()) {
    if (absl::Status s = report::WriteFileAtomically(f.json, regress::ComparisonToJson(comparison)); !s.ok()) return s;
  }
  if (!f.html.empty()) {
    report::RegressReport page = report::RegressReportFromComparison(suite, comparison, all_notes, calibration);
    page.history_href = f.html_history_link;
    if (absl::Status s = report::WriteFileAtomically(f.html, report::RegressReportHtml(page)); !s.ok()) return s;
  }
#ifdef FUSETUNE_WITH_SERVICE
  if (!f.server.server.empty()) {
    absl::StatusOr<int> uploaded = UploadRegressions(f.server, rows);
    if (!uploaded.ok()) return uploaded.status();
    std::printf("uploaded %d verdict rows to %s\n", *uploaded, f.server.server.c_str());
  }
#endif
  return absl::OkStatus();
}

namespace {

// A flag whose value is one of `values`, by the name `name_of` gives it (CLI11 refuses any other
// before the callback runs); the value parsed back is stored in *out.
template <typename T, size_t N>
void AddNamedChoiceOption(CLI::App* command, const char* flag, const T (&values)[N], const char* (*name_of)(T),
                          std::optional<T>* out, const char* help) {
  std::vector<std::string> names;
  for (T v : values) names.push_back(name_of(v));
  command
      ->add_option_function<std::string>(
          flag,
          [values = std::vector<T>(std::begin(values), std::end(values)), name_of, out](const std::string& name) {
            for (T v : values) {
              if (name == name_of(v)) *out = v;
            }
          },
          help)
      ->check(CLI::IsMember(names));
}

}  // namespace

void AddCorrectionOption(CLI::App* command, std::optional<regress::Correction>* correction) {
  AddNamedChoiceOption(command, "--correction", regress::kCorrections, &regress::CorrectionName, correction,
                       "how the cells' p-values are adjusted for their number: holm (the family of a suite's cells, "
                       "the default), benjamini-hochberg (their false discovery rate) or none (each cell at alpha "
                       "alone; its floor then does more of the guarding); default: the suite's correction, else holm");
}

void AddRoundOrderOption(CLI::App* command, std::optional<regress::RoundOrder>* order) {
  AddNamedChoiceOption(command, "--round-order", regress::kRoundOrders, &regress::RoundOrderName, order,
                       "how each round of the interleaved measurement orders its blocks: shuffled (every cell and "
                       "side in a fresh random order) or mirrored (the cells in a random order on one side, then in "
                       "the same order on the other, so both sides of a cell follow the same cell); default: the "
                       "suite's round_order, else shuffled");
}

void AddRegressServerOptions(CLI::App* command, RegressFlags* flags) {
#ifdef FUSETUNE_WITH_SERVICE
  command->add_option("--server", flags->server.server, "upload the verdict rows to this fusetune server (host:port)");
  flags->server.Register(command, /*with_server=*/false);
#else
  (void)command;
  (void)flags;
#endif
}

}  // namespace fusetune::cli
