// fusetune report: the best config of every tuned problem, as a table or JSON.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "best_config_json.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/base/strings.h"
#include "fusetune/db/store.h"
#include "fusetune/report/html.h"
#include "fusetune/report/tuning_report.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct ReportFlags {
  std::string db = "./fusetune.db";
  std::string device_class;
  bool json = false;
  std::string html;  // also write the HTML report here
};

std::string Ratio(double r) { return r > 0 ? fmt::format("{:.2f}x", r) : "-"; }

// The newest audit of `b`'s config (an audit of an earlier pick says nothing about this one);
// nullopt when it was never audited.
absl::StatusOr<std::optional<AuditSummary>> NewestAuditOf(Store& store, const BestConfig& b) {
  constexpr int kAuditsSearched = 100;
  absl::StatusOr<std::vector<AuditSummary>> audits = store.ListAudits(b.device_class, b.problem_key, kAuditsSearched);
  if (!audits.ok()) return audits.status();
  for (AuditSummary& a : *audits) {
    if (a.recorded_config_key == b.config_key) return std::optional<AuditSummary>(std::move(a));
  }
  return std::optional<AuditSummary>();
}

std::string Regret(const std::optional<AuditSummary>& a) {
  if (!a.has_value()) return "-";
  return fmt::format("{:.2f}% ({:.2f} to {:.2f}%)", 100 * a->regret, 100 * a->regret_low, 100 * a->regret_high);
}

int RunReportCommand(const ReportFlags& f) {
  const std::string cmd = "report";
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(f.db);
  if (!store.ok()) return Failure(cmd, std::string(store.status().message()));
  if (!f.html.empty()) {
    absl::StatusOr<report::TuningReport> page = report::ReadTuningReport(**store, f.device_class, f.db);
    if (!page.ok()) return Failure(cmd, std::string(page.status().message()));
    if (absl::Status s = report::WriteFileAtomically(f.html, report::TuningReportHtml(*page)); !s.ok()) {
      return Failure(cmd, std::string(s.message()));
    }
  }
  absl::StatusOr<std::vector<BestConfig>> best = (*store)->ListBestConfigs(f.device_class);
  if (!best.ok()) return Failure(cmd, std::string(best.status().message()));
  std::sort(best->begin(), best->end(), [](const BestConfig& a, const BestConfig& b) {
    if (a.device_class != b.device_class) return a.device_class < b.device_class;
    return NaturalLess(a.problem_key, b.problem_key);
  });
  std::vector<std::optional<AuditSummary>> audits;
  // K/V stored as e4m3: the pick's error against the unquantised reference, beside its own.
  std::vector<std::optional<double>> unquantised;
  for (const BestConfig& b : *best) {
    absl::StatusOr<std::optional<AuditSummary>> a = NewestAuditOf(**store, b);
    if (!a.ok()) return Failure(cmd, std::string(a.status().message()));
    audits.push_back(*std::move(a));
    absl::StatusOr<std::optional<double>> u = report::PickUnquantisedRelError(**store, b);
    if (!u.ok()) return Failure(cmd, std::string(u.status().message()));
    unquantised.push_back(*u);
  }
  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < best->size(); ++i) {
      const BestConfig& b = (*best)[i];
      nlohmann::json audit = nullptr;
      if (const std::optional<AuditSummary>& a = audits[i]; a.has_value()) {
        audit = {{"audit_id", a->audit_id},       {"regret", a->regret},
                 {"regret_low", a->regret_low},   {"regret_high", a->regret_high},
                 {"best_config", a->best_config_key}, {"rounds", a->rounds}};
      }
      nlohmann::json row = BestConfigJson(b);
      row["audit"] = std::move(audit);
      if (unquantised[i].has_value()) row["unquantised_rel_error"] = *unquantised[i];
      rows.push_back(std::move(row));
    }
    std::printf("%s\n", rows.dump(2).c_str());
    return kExitOk;
  }
  if (best->empty()) {
    std::printf("no best configs recorded in %s%s (run 'fusetune sweep' first)\n", RedactDatabaseUrl(f.db).c_str(),
                f.device_class.empty() ? "" : fmt::format(" for {}", f.device_class).c_str());
    return kExitOk;
  }
  // Markdown, so the table pastes into docs/perf.md as it is.
  std::string device;
  for (size_t i = 0; i < best->size(); ++i) {
    const BestConfig& b = (*best)[i];
    if (b.device_class != device) {
      device = b.device_class;
      std::printf("%sdevice %s\n\n", i == 0 ? "" : "\n", device.c_str());
      std::printf("| problem | best config | median us | p10-p90 us | TFLOP/s | fused vs materialized | fused vs partial | max rel error | audit regret (90%% CI) |\n");
      std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    // An e4m3 problem's error cell also says the error against the unquantised K/V.
    const std::string error = unquantised[i].has_value()
                                  ? fmt::format("{:.1e} (vs unquantised {:.1e})", b.max_rel_error, *unquantised[i])
                                  : fmt::format("{:.1e}", b.max_rel_error);
    std::printf("| %s | %s | %.1f | %.1f-%.1f | %.4g | %s | %s | %s | %s |\n", b.problem_key.c_str(),
                b.config_key.c_str(), b.median_us, b.p10_us, b.p90_us, BestConfigTflops(b.problem_key, b.median_us),
                Ratio(b.speedup_vs_materialized).c_str(), Ratio(b.speedup_vs_partial).c_str(), error.c_str(),
                Regret(audits[i]).c_str());
  }
  return kExitOk;
}

}  // namespace

void AddReportCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Print every recorded best config: latency, TFLOP/s, the fused speedups, the error, and the regret the "
      "newest 'fusetune audit' of that config measured.");
  AddDatabaseOption(report, &flags->db, "SQLite database file (only read)");
  report->add_option("--device-class", flags->device_class, "only this device class");
  report->add_flag("--json", flags->json,
                   "print a JSON array (fields: problem, config, median_us, tflops, speedup_vs_materialized, "
                   "speedup_vs_partial, max_rel_error, unquantised_rel_error (K/V stored as e4m3 only), audit (the "
                   "newest audit of this config, or null), ...)");
  report->add_option("--html", flags->html,
                     "also write a self-contained HTML report here: per problem the config space as heatmaps, the "
                     "variants side by side, % of the device's peak, the audit's regret; a sortable index");
  SetAction(report, context, [flags] { return RunReportCommand(*flags); });
}

}  // namespace fusetune::cli
