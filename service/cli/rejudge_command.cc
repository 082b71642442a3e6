// fusetune rejudge: judges a comparison that `fusetune regress --json` wrote again, under other
// floors or with A/A calibrations from other such files, without measuring anything. What a
// verdict option would have said about nights already measured (on a GPU host, a night is
// minutes of device time) is how its value for a device is chosen.
//
// Exit status as regress's: 0 clean, 1 a cell regressed or failed on accuracy, 2 bad input.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/base/file.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/junit.h"
#include "fusetune/regress/regress_run.h"
#include "fusetune/report/html.h"
#include "problem_flags.h"
#include "regress_outputs.h"

namespace fusetune::cli {
namespace {

constexpr int kExitClean = 0;
constexpr int kExitRegressed = 1;
constexpr int kExitError = 2;

struct RejudgeFlags {
  std::string comparison;                  // the file to judge again
  std::vector<std::string> calibrations;   // A/A comparison files, newest first
  std::optional<double> min_floor;
  std::optional<double> calibrated_min_floor;
  std::optional<regress::Correction> correction;
  double stored_floor = 0.03;
  std::string markdown;
  std::string json;
};

int Error(const std::string& message) { return Failure("rejudge", message, kExitError); }

absl::StatusOr<regress::Comparison> ReadComparison(const std::string& path, std::vector<std::string>* left_out) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<regress::Comparison> c = regress::ComparisonFromJson(*text, left_out);
  if (!c.ok()) return absl::InvalidArgumentError(fmt::format("{}: {}", path, std::string(c.status().message())));
  return c;
}

int RunRejudge(const RejudgeFlags& f) {
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--markdown", f.markdown},
                                   std::pair<const char*, const std::string&>{"--json", f.json}}) {
    if (absl::Status s = CheckOutputFile(flag, path); !s.ok()) return Error(std::string(s.message()));
  }
  std::vector<std::string> left_out;
  absl::StatusOr<regress::Comparison> comparison = ReadComparison(f.comparison, &left_out);
  if (!comparison.ok()) return Error(std::string(comparison.status().message()));
  std::vector<regress::Comparison> aa;
  for (const std::string& path : f.calibrations) {
    std::vector<std::string> ignored;
    absl::StatusOr<regress::Comparison> c = ReadComparison(path, &ignored);
    if (!c.ok()) return Error(std::string(c.status().message()));
    if (c->baseline.device.DeviceClass() != comparison->candidate.device.DeviceClass()) {
      return Error(fmt::format("{} was measured on {}, the comparison on {}: only the same device class calibrates",
                               path, c->baseline.device.DeviceClass(), comparison->candidate.device.DeviceClass()));
    }
    if (c->one_process != comparison->one_process) {
      return Error(fmt::format("{} was measured in {}, the comparison in {}: a calibration must be made the same way",
                               path, c->one_process ? "one process" : "two processes",
                               comparison->one_process ? "one process" : "two processes"));
    }
    aa.push_back(*std::move(c));
  }
  std::vector<std::string> before;
  for (const regress::CellComparison& c : comparison->cells) before.push_back(regress::VerdictName(c.verdict.verdict));

  regress::RegressOptions options;
  options.min_floor = f.min_floor;
  options.calibrated_min_floor = f.calibrated_min_floor;
  options.correction = f.correction;
  options.stored_floor = f.stored_floor;
  const std::map<std::string, regress::KnownCellNoise> calibration = regress::CalibrationOf(regress::AARatiosOf(aa));
  const regress::CompareOptions compare = regress::JudgingOptions(options, calibration);
  regress::Suite no_suite;  // the floors come from the flags (and the defaults) alone
  regress::VerdictOptions verdict = regress::EffectiveVerdictOptions(no_suite, compare);
  if (absl::Status s = regress::JudgeComparison(verdict, compare, *comparison); !s.ok()) {
    return Error(std::string(s.message()));
  }

  std::vector<regress::CellVerdict> verdicts;
  for (const regress::CellComparison& c : comparison->cells) verdicts.push_back(c.verdict);
  std::string text = regress::WriteMarkdownReport(
      fmt::format("fusetune rejudge: {}, {} against {} on {}", f.comparison, comparison->candidate.commit,
                  comparison->baseline.commit, comparison->candidate.device.DeviceClass()),
      verdicts);
  text += fmt::format("\nRe-judged {} cells: {} regressed, {} improved, {} same, {} unknown.\n", verdicts.size(),
                      comparison->CountVerdict(regress::Verdict::kRegressed),
                      comparison->CountVerdict(regress::Verdict::kImproved),
                      comparison->CountVerdict(regress::Verdict::kSame),
                      comparison->CountVerdict(regress::Verdict::kUnknown));
  text += fmt::format("Floor minimum {:.2f}%", 100 * verdict.min_floor);
  if (verdict.calibrated_min_floor) {
    text += fmt::format(", {:.2f}% for cells with at least {} calibrations", 100 * *verdict.calibrated_min_floor,
                        verdict.min_calibrations);
  }
  text += fmt::format("; p-values adjusted: {}", regress::CorrectionName(verdict.correction));
  size_t most = 0;
  for (const auto& [cell, noise] : calibration) most = std::max(most, static_cast<size_t>(noise.calibrations));
  text += calibration.empty() ? "; no calibration.\n"
                              : fmt::format("; {} cell(s) calibrated by up to {} A/A file(s).\n", calibration.size(), most);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const std::string now = regress::VerdictName(verdicts[i].verdict);
    if (now != before[i]) {
      text += fmt::format("- {} {}: {} before, {} now\n", verdicts[i].problem_key, verdicts[i].config_key, before[i], now);
    }
  }
  for (const std::string& line : left_out) text += fmt::format("- left out: {}\n", line);
  std::fputs(text.c_str(), stdout);
  if (!f.markdown.empty()) {
    if (absl::Status s = report::WriteFileAtomically(f.markdown, text); !s.ok()) return Error(std::string(s.message()));
  }
  if (!f.json.empty()) {
    if (absl::Status s = report::WriteFileAtomically(f.json, regress::ComparisonToJson(*comparison)); !s.ok()) {
      return Error(std::string(s.message()));
    }
  }
  return comparison->AnyFailed() ? kExitRegressed : kExitClean;
}

}  // namespace

void AddRejudgeCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<RejudgeFlags>();
  CLI::App* rejudge = app.add_subcommand(
      "rejudge",
      "judge a comparison that `regress --json` wrote again, under other floors or with A/A calibrations from other "
      "such files, measuring nothing (exit 0 clean, 1 regression, 2 error)");
  rejudge->add_option("comparison", flags->comparison, "the comparison (`regress --json` output)")->required();
  rejudge->add_option("--calibration", flags->calibrations,
                      "an A/A comparison of the same device class made the same way (one process or two), newest "
                      "first (repeatable): each cell's ratio there is one calibration of that cell, as the stored "
                      "rows of a calibration are");
  rejudge->add_option("--min-floor", flags->min_floor,
                      "the smallest change (relative) an interleaved comparison calls (default 0.015)")
      ->check(CLI::Range(0.0, 0.1));
  rejudge->add_option("--calibrated-min-floor", flags->calibrated_min_floor,
                      "the same for cells with at least 3 calibrations (default: --min-floor's)")
      ->check(CLI::Range(0.0, 0.1));
  AddCorrectionOption(rejudge, &flags->correction);
  rejudge->add_option("--stored-floor", flags->stored_floor,
                      "the floor's minimum for a comparison against stored baseline blocks")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  rejudge->add_option("--markdown", flags->markdown, "write the report here (it is also printed)");
  rejudge->add_option("--json", flags->json, "write the re-judged comparison here, as `regress --json` does");
  SetAction(rejudge, context, [flags] { return RunRejudge(*flags); });
}

}  // namespace fusetune::cli
