// fusetune bisect: the first commit between a good and a bad one that made a cell slower (or,
// with --improvement, faster): first-parent history, each probed commit built with a build
// command (by default ci/build-commit.sh: a persistent worktree and build folder, builds kept by
// commit) and measured interleaved against the good endpoint with the regression verdict rules;
// the culprit confirmed against its parent before it is reported. Exit 0 culprit confirmed,
// 1 no confirmed culprit (the range that is left is printed), 2 error.
//
// fusetune bisect-step: one step of `git bisect run`: builds the checked-out commit and judges it
// against --good-binary. Exit 0 good, 1 bad, 125 skip (does not build, or undecided), 128 error
// (git bisect run stops on it).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "fmt/format.h"
#include "fusetune/regress/bisect.h"
#include "fusetune/regress/bisect_run.h"
#include "fusetune/regress/builds.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"
#include "fusetune/db/store.h"
#include "fusetune/records/commit.h"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

constexpr int kExitFound = 0;
constexpr int kExitNoCulprit = 1;  // no confirmed culprit: the range that is left is printed
constexpr int kExitError = 2;

struct BisectFlags {
  std::string good, bad;
  std::string cell;   // "PROBLEM_KEY CONFIG_KEY"
  std::string suite;  // or a suite file
  std::string repo = ".";
  std::string build_command;  // default: <repo>/ci/build-commit.sh --repo <repo> {commit}
  std::string db;             // optional: cell lookup and the culprit's record
  std::string backend = "cpu";
  int device = 0;
  int blocks = 0;
  int max_builds = 16;
  int timing_cpu = regress::kAutoTimingCpu;
  bool improvement = false;
  std::string good_binary;    // bisect-step
};

int Error(const std::string& command, const std::string& message, int code = kExitError) {
  return Failure(command, message, code);
}

// A full hash from git in the form commits are stored and shown in.
std::string Canonical(const std::string& full) { return CanonicalCommit(full).value_or(full); }

// The cell(s) to measure: --suite, or --cell with its problem from --db's bench cells.
absl::StatusOr<regress::Suite> CellSuite(const BisectFlags& f) {
  std::unique_ptr<Store> store;
  if (f.suite.empty() && !f.db.empty()) {
    absl::StatusOr<std::unique_ptr<Store>> opened = OpenExistingStore(f.db);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
  }
  return regress::CellSuite(f.suite, f.cell, store.get(), RedactDatabaseUrl(f.db));
}

// --build-command, or the repository's own ci/build-commit.sh.
std::string BuildCommandOf(const BisectFlags& f) {
  if (!f.build_command.empty()) return f.build_command;
  return regress::ShellQuote(f.repo + "/ci/build-commit.sh") + " --repo " + regress::ShellQuote(f.repo) + " {commit}";
}

// Builds `commit` with `command`, saying so on stderr as `why`.
absl::StatusOr<std::string> Build(const std::string& command, const std::string& commit, const std::string& why) {
  return regress::BuildCommit(command, commit, [&why](const std::string& line) {
    std::fprintf(stderr, "fusetune: %s: %s\n", why.c_str(), line.c_str());
  });
}

regress::BuildSourceOptions SourceOptions(const BisectFlags& f) {
  regress::BuildSourceOptions options;
  options.backend = f.backend;
  options.device = f.device;
  options.timing_cpu = f.timing_cpu;
  return options;
}

std::string Describe(const regress::CellComparison& c) {
  return fmt::format("{} {}: ratio {:.4f} [{:.4f}, {:.4f}] ({:.0f} %), p {:.3g}, {}", c.cell.problem.Key(),
                     c.cell.config.Key(), c.verdict.ratio.pairwise_ratio, c.verdict.ratio.lower, c.verdict.ratio.upper,
                     100 * c.verdict.ratio.confidence, std::min(c.verdict.p_slower_adjusted, c.verdict.p_faster_adjusted),
                     regress::VerdictName(c.verdict.verdict));
}

// Records the culprit in --db when given; a database that cannot be written loses the record only.
void RecordCulprit(const BisectFlags& f, const regress::CellComparison& cell, const std::string& culprit,
                   const std::string& parent, const std::string& device_class) {
  if (f.db.empty()) return;
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStoreForWriting(f.db);
  if (!store.ok()) return;
  (void)regress::RecordCulprit(**store, cell, culprit, parent, device_class, f.improvement);
}

int RunBisect(const BisectFlags& f) {
  const std::string cmd = "bisect";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<regress::BisectRange> range = regress::ResolveRange(f.repo, f.good, f.bad);
  if (!range.ok()) return Error(cmd, std::string(range.status().message()));
  absl::StatusOr<regress::Suite> suite = CellSuite(f);
  if (!suite.ok()) return Error(cmd, std::string(suite.status().message()));
  const std::string build_command = BuildCommandOf(f);
  regress::BuildCache builds([&](const std::string& commit) {
    return Build(build_command, commit, cmd + ": building " + Canonical(commit));
  });
  const regress::BuildSourceOptions sources = SourceOptions(f);
  auto compare = [&](const std::string& baseline, const std::string& candidate) {
    return regress::CompareBuilds(sources, f.blocks, baseline, candidate, *suite);
  };
  regress::BisectRunOptions options;
  options.improvement = f.improvement;
  options.max_builds = f.max_builds;
  options.on_endpoints = [&](const regress::Comparison& endpoints) {
    std::printf("bisect %zu commit(s) %s..%s on %s\n  bad against good: %s\n", range->commits.size(),
                Canonical(range->good).c_str(), Canonical(range->bad).c_str(),
                endpoints.candidate.device.DeviceClass().c_str(),
                Describe(regress::Telling(endpoints, f.improvement)).c_str());
  };
  options.on_probe = [&](const std::string& commit, regress::ProbeResult result, const regress::Comparison* c) {
    if (c == nullptr) {
      std::printf("  %s: skip (does not build)\n", Canonical(commit).c_str());
    } else {
      std::printf("  %s: %s (%s)\n", Canonical(commit).c_str(), regress::ProbeResultName(result),
                  Describe(regress::Telling(*c, f.improvement)).c_str());
    }
  };
  absl::StatusOr<regress::BisectReport> report = regress::RunBisect(*range, options, builds, compare);
  if (!report.ok()) return Error(cmd, std::string(report.status().message()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const regress::BisectOutcome& outcome = report->outcome;
  if (!outcome.found) {
    std::printf("no single culprit%s: it is one of\n", outcome.capped ? " (the build cap was reached)" : "");
    for (int i = outcome.candidates_from; i <= outcome.candidates_to; ++i) std::printf("  %s\n", range->commits[i].c_str());
    std::printf("%d build(s), %.0f s\n", builds.count(), seconds);
    return kExitNoCulprit;
  }
  const std::string& culprit = report->culprit;
  const regress::CellComparison& telling = regress::Telling(*report->confirmation, f.improvement);
  const std::string subject = regress::Git(f.repo, {"log", "-1", "--format=%s", culprit}).value_or("");
  std::printf("%s %s\n  %s\n  against its parent %s: %s\n", report->confirmed ? "culprit" : "not confirmed:",
              culprit.c_str(), subject.c_str(), Canonical(report->parent).c_str(), Describe(telling).c_str());
  std::printf("builds used (%d):\n", builds.count());
  for (const auto& [commit, binary] : builds.all()) {
    std::printf("  %s %s\n", Canonical(commit).c_str(), binary.ok() ? binary->c_str() : "does not build");
  }
  std::printf("%zu probe(s), %.0f s\n", outcome.probes.size(), seconds);
  if (!report->confirmed) {
    std::printf("the search ended at a commit that is %s than the good endpoint while its parent is not, but against "
                "its parent the change is not significant: the range is not monotonic or the change is gradual\n",
                f.improvement ? "faster" : "slower");
    return kExitNoCulprit;
  }
  RecordCulprit(f, telling, culprit, report->parent, report->endpoints.candidate.device.DeviceClass());
  return kExitFound;
}

int RunBisectStep(const BisectFlags& f) {
  const std::string cmd = "bisect-step";
  constexpr int kGood = 0, kBad = 1, kSkip = 125, kAbort = 128;
  absl::StatusOr<regress::Suite> suite = CellSuite(f);
  if (!suite.ok()) return Error(cmd, std::string(suite.status().message()), kAbort);
  absl::StatusOr<std::string> head = regress::ResolveCommit(f.repo, "HEAD");
  if (!head.ok()) return Error(cmd, std::string(head.status().message()), kAbort);
  const std::string build_command = BuildCommandOf(f);
  absl::StatusOr<std::string> binary = Build(build_command, *head, "bisect-step: building HEAD");
  if (absl::IsNotFound(binary.status())) return kSkip;
  if (!binary.ok()) return Error(cmd, std::string(binary.status().message()), kAbort);
  absl::StatusOr<regress::Comparison> c = regress::CompareBuilds(SourceOptions(f), f.blocks, f.good_binary, *binary, *suite);
  if (!c.ok()) return Error(cmd, std::string(c.status().message()), kAbort);
  if (c->cells.empty()) return Error(cmd, "the comparison holds no cell", kAbort);
  const regress::ProbeResult result = regress::Judge(*c, f.improvement);
  std::printf("%s: %s (%s)\n", Canonical(*head).c_str(), regress::ProbeResultName(result),
              Describe(regress::Telling(*c, f.improvement)).c_str());
  return result == regress::ProbeResult::kBad ? kBad : result == regress::ProbeResult::kGood ? kGood : kSkip;
}

void AddCellOptions(CLI::App* command, BisectFlags* f) {
  CLI::Option* cell = command->add_option("--cell", f->cell, "the cell: 'PROBLEM_KEY CONFIG_KEY'");
  CLI::Option* suite = command->add_option("--suite", f->suite, "or a suite file: bad when any cell is");
  cell->excludes(suite);
  command->add_option("--repo", f->repo, "the git repository")->capture_default_str();
  command->add_option("--build-command", f->build_command,
                      "builds a commit ('{commit}' replaced) and prints its fusetune last; exit 125 = does not build "
                      "(default: <repo>/ci/build-commit.sh --repo <repo> {commit})");
  command->add_option("--db", f->db, "database: the cell's problem from its bench cells; the culprit recorded");
  AddBackendOptions(command, &f->backend, &f->device);
  command->add_option("--blocks", f->blocks, "first-pass blocks per side (default: the suite's, 10)")->check(CLI::Range(3, 1000));
  command->add_option("--timing-cpu", f->timing_cpu, "the CPU both builds launch from during blocks (see regress)")
      ->check(CLI::Range(-1, 4095));
  command->add_flag("--improvement", f->improvement, "look for the commit that made the cell faster");
}

}  // namespace

void AddBisectCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BisectFlags>();
  CLI::App* bisect = app.add_subcommand(
      "bisect", "Find the commit that made a cell slower (or faster): builds reused by commit, each probe interleaved "
                "against the good commit, the culprit confirmed against its parent. Exit 0 found, 1 not found, 2 error.");
  bisect->add_option("--good", flags->good, "a commit where the cell is as it should be")->required();
  bisect->add_option("--bad", flags->bad, "a later commit (good must be its ancestor) where it is not")->required();
  bisect->add_option("--max-builds", flags->max_builds, "at most this many builds")->capture_default_str()->check(CLI::Range(3, 1000));
  AddCellOptions(bisect, flags.get());
  SetAction(bisect, context, [flags] {
    if (flags->cell.empty() && flags->suite.empty()) return Error("bisect", "give --cell or --suite");
    return RunBisect(*flags);
  });

  auto step = std::make_shared<BisectFlags>();
  CLI::App* bisect_step = app.add_subcommand(
      "bisect-step", "One step of 'git bisect run': build HEAD, judge it against --good-binary. Exit 0 good, 1 bad, "
                     "125 skip, 128 error.");
  bisect_step->add_option("--good-binary", step->good_binary, "the good commit's fusetune")->required();
  AddCellOptions(bisect_step, step.get());
  SetAction(bisect_step, context, [step] {
    if (step->cell.empty() && step->suite.empty()) return Error("bisect-step", "give --cell or --suite", 128);
    return RunBisectStep(*step);
  });
}

}  // namespace fusetune::cli
