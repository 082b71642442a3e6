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

#include "builds.h"
#include "commands.h"
#include "fmt/format.h"
#include "fusetune/base/time.h"
#include "fusetune/bench/bisect.h"
#include "fusetune/bench/compare.h"
#include "fusetune/bench/suite.h"
#include "fusetune/db/store.h"
#include "fusetune/records/commit.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

constexpr int kExitFound = 0;
constexpr int kExitNotFound = 1;
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
  int timing_cpu = kAutoTimingCpu;
  bool improvement = false;
  std::string good_binary;    // bisect-step
};

int Error(const std::string& command, const std::string& message, int code = kExitError) {
  return Failure(command, message, code);
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `git -C repo args...`: its stdout (trailing newline removed) or, on a non-zero exit,
// FailedPrecondition with the exit status.
absl::StatusOr<std::string> Git(const std::string& repo, const std::vector<std::string>& args) {
  std::string line = "git -C " + ShellQuote(repo);
  for (const std::string& a : args) line += " " + ShellQuote(a);
  line += " 2>/dev/null";
  ShellResult run = RunShell(line);
  if (run.status == -1) return absl::UnavailableError("cannot run git");
  std::string out = std::move(run.out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (run.status != 0) return absl::FailedPreconditionError(fmt::format("git {} failed", args.empty() ? "" : args[0]));
  return out;
}

// `name` resolved by git in `repo`: the commit's full hash (what builds are asked for).
absl::StatusOr<std::string> ResolveCommit(const std::string& repo, const std::string& name) {
  absl::StatusOr<std::string> full = Git(repo, {"rev-parse", "--verify", "--quiet", name + "^{commit}"});
  if (!full.ok() || full->empty()) return absl::NotFoundError(fmt::format("unknown commit '{}' in {}", name, repo));
  return full;
}

// A full hash from git in the form commits are stored and shown in.
std::string Canonical(const std::string& full) { return CanonicalCommit(full).value_or(full); }

// The cell(s) to measure: a suite file, or one cell by keys (its problem from the database's
// bench cells when the key alone does not hold it, e.g. varlen).
absl::StatusOr<bench::Suite> CellSuite(const BisectFlags& f) {
  if (!f.suite.empty()) return bench::ReadSuiteFile(f.suite);
  const size_t space = f.cell.find(' ');
  if (space == std::string::npos) return absl::InvalidArgumentError("--cell is 'PROBLEM_KEY CONFIG_KEY'");
  const std::string problem_key = f.cell.substr(0, space);
  const std::string config_key = f.cell.substr(space + 1);
  absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(config_key);
  if (!config.ok()) return config.status();
  bench::Suite suite;
  suite.name = "bisect";
  bench::SuiteCell cell;
  cell.config = *config;
  if (!f.db.empty()) {
    absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStore(f.db);
    if (!store.ok()) return store.status();
    absl::StatusOr<std::vector<std::string>> suites = (*store)->ListBenchSuites();
    if (!suites.ok()) return suites.status();
    std::vector<RunInfo> runs;
    for (const std::string& name : *suites) {
      absl::StatusOr<std::vector<RunInfo>> of_suite = (*store)->ListBenchRuns(name, "", 1000);
      if (!of_suite.ok()) return of_suite.status();
      runs.insert(runs.end(), of_suite->begin(), of_suite->end());
    }
    std::vector<std::string> known;
    bool found = false;
    for (const RunInfo& run : runs) {
      absl::StatusOr<std::vector<BenchCell>> cells = (*store)->ListBenchCells(run.run_id);
      for (const BenchCell& c : cells.ok() ? *cells : std::vector<BenchCell>{}) {
        if (c.problem_key == problem_key && c.config_key == config_key) {
          absl::StatusOr<AttentionProblem> p = bench::ProblemFromJson(c.problem_json);
          if (!p.ok()) return p.status();
          cell.problem = *p;
          found = true;
          break;
        }
        if (known.size() < 8) known.push_back(c.problem_key + " " + c.config_key);
      }
      if (found) break;
    }
    if (!found) {
      std::string list;
      for (const std::string& k : known) list += "\n  " + k;
      return absl::NotFoundError(fmt::format("{} holds no bench cell '{}'{}{}", f.db, f.cell,
                                             known.empty() ? "" : "; cells it holds include:", list));
    }
  } else {
    absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(problem_key);
    if (!p.ok()) return p.status();
    cell.problem = *p;
  }
  suite.cells.push_back(cell);
  return suite;
}

// --build-command, or the repository's own ci/build-commit.sh.
std::string BuildCommandOf(const BisectFlags& f) {
  if (!f.build_command.empty()) return f.build_command;
  return ShellQuote(f.repo + "/ci/build-commit.sh") + " --repo " + ShellQuote(f.repo) + " {commit}";
}

// Builds by commit, each once.
class Builds {
 public:
  Builds(std::string command, std::string who) : command_(std::move(command)), who_(std::move(who)) {}
  // The binary, NotFound when the commit does not build.
  absl::StatusOr<std::string> Get(const std::string& commit) {
    auto it = built_.find(commit);
    if (it != built_.end()) return it->second;
    absl::StatusOr<std::string> binary = BuildCommit(command_, commit, who_ + ": building " + Canonical(commit));
    if (binary.ok() || absl::IsNotFound(binary.status())) {
      built_[commit] = binary;
      order_.push_back(commit);
    }
    return binary;
  }
  int count() const { return static_cast<int>(built_.size()); }
  // In the order they were built.
  std::vector<std::pair<std::string, absl::StatusOr<std::string>>> all() const {
    std::vector<std::pair<std::string, absl::StatusOr<std::string>>> out;
    for (const std::string& c : order_) out.emplace_back(c, built_.at(c));
    return out;
  }

 private:
  std::string command_, who_;
  std::map<std::string, absl::StatusOr<std::string>> built_;
  std::vector<std::string> order_;
};

// Measures `candidate` against `baseline` on the suite, interleaved.
absl::StatusOr<bench::Comparison> Compare(const BisectFlags& f, const std::string& baseline,
                                          const std::string& candidate, const bench::Suite& suite) {
  BuildSourceOptions options;
  options.backend = f.backend;
  options.device = f.device;
  options.timing_cpu = f.timing_cpu;
  absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> base = StartBuild(options, baseline, suite);
  if (!base.ok()) return base.status();
  absl::StatusOr<std::unique_ptr<bench::ProcessBlockSource>> cand = StartBuild(options, candidate, suite);
  if (!cand.ok()) return cand.status();
  bench::CompareOptions compare;
  compare.blocks = f.blocks;
  return bench::CompareInterleaved(**base, **cand, suite, compare);
}

// Bad: the change bisect looks for (a regression, or with --improvement a speed-up) in any cell.
bench::ProbeResult Judge(const bench::Comparison& c, bool improvement) {
  bool unknown = false;
  for (const bench::CellComparison& cell : c.cells) {
    const regress::Verdict v = cell.verdict.verdict;
    if (v == (improvement ? regress::Verdict::kImproved : regress::Verdict::kRegressed)) return bench::ProbeResult::kBad;
    unknown = unknown || v == regress::Verdict::kUnknown;
  }
  return unknown ? bench::ProbeResult::kSkip : bench::ProbeResult::kGood;
}

// The most telling cell of a comparison: the first bad one, else the first.
const bench::CellComparison& Telling(const bench::Comparison& c, bool improvement) {
  for (const bench::CellComparison& cell : c.cells) {
    if (cell.verdict.verdict == (improvement ? regress::Verdict::kImproved : regress::Verdict::kRegressed)) return cell;
  }
  return c.cells.front();
}

std::string Describe(const bench::CellComparison& c) {
  return fmt::format("{} {}: ratio {:.4f} [{:.4f}, {:.4f}] ({:.0f} %), p {:.3g}, {}", c.cell.problem.Key(),
                     c.cell.config.Key(), c.verdict.ratio.pairwise_ratio, c.verdict.ratio.lower, c.verdict.ratio.upper,
                     100 * c.verdict.ratio.confidence, std::min(c.verdict.p_slower_adjusted, c.verdict.p_faster_adjusted),
                     regress::VerdictName(c.verdict.verdict));
}

// Checks the repository, the endpoints and the range; returns the range's commits.
absl::StatusOr<std::vector<std::string>> Range(const BisectFlags& f, std::string* good, std::string* bad) {
  if (!Git(f.repo, {"rev-parse", "--show-toplevel"}).ok()) {
    return absl::InvalidArgumentError(fmt::format("{} is not a git repository", f.repo));
  }
  absl::StatusOr<std::string> dirty = Git(f.repo, {"status", "--porcelain", "--untracked-files=no"});
  if (!dirty.ok() || !dirty->empty()) {
    return absl::FailedPreconditionError(fmt::format(
        "{} has uncommitted changes: commit or stash them first (bisect builds commits, not the worktree)", f.repo));
  }
  absl::StatusOr<std::string> g = ResolveCommit(f.repo, f.good);
  if (!g.ok()) return g.status();
  absl::StatusOr<std::string> b = ResolveCommit(f.repo, f.bad);
  if (!b.ok()) return b.status();
  if (!Git(f.repo, {"merge-base", "--is-ancestor", *g, *b}).ok()) {
    return absl::InvalidArgumentError(fmt::format("the good commit {} is not an ancestor of the bad commit {}", f.good, f.bad));
  }
  absl::StatusOr<std::string> list = Git(f.repo, {"rev-list", "--first-parent", "--reverse", *g + ".." + *b});
  if (!list.ok()) return list.status();
  std::vector<std::string> commits;
  for (size_t at = 0; at < list->size();) {
    size_t end = list->find('\n', at);
    if (end == std::string::npos) end = list->size();
    if (end > at) commits.push_back(list->substr(at, end - at));
    at = end + 1;
  }
  if (commits.empty()) return absl::InvalidArgumentError("the good and the bad commit are the same");
  *good = *g;
  *bad = *b;
  return commits;
}

void RecordCulprit(const BisectFlags& f, const bench::CellComparison& cell, const std::string& culprit,
                   const std::string& parent, const std::string& device_class) {
  if (f.db.empty()) return;
  absl::StatusOr<std::unique_ptr<Store>> store = OpenExistingStoreForWriting(f.db);
  if (!store.ok()) return;
  Regression r;
  r.commit = Canonical(culprit);
  r.baseline_commit = Canonical(parent);
  r.device_class = device_class;
  r.problem_key = cell.cell.problem.Key();
  r.config_key = cell.cell.config.Key();
  r.metric = f.improvement ? "bisect_improvement" : "bisect_culprit";
  r.ratio = cell.verdict.ratio.pairwise_ratio;
  r.p_value = f.improvement ? cell.verdict.p_faster_adjusted : cell.verdict.p_slower_adjusted;
  r.verdict = regress::VerdictName(cell.verdict.verdict);
  r.created_unix_ms = NowUnixMs();
  (void)(*store)->RecordRegression(r);
}

int RunBisect(const BisectFlags& f) {
  const std::string cmd = "bisect";
  const auto start = std::chrono::steady_clock::now();
  std::string good, bad;
  absl::StatusOr<std::vector<std::string>> commits = Range(f, &good, &bad);
  if (!commits.ok()) return Error(cmd, std::string(commits.status().message()));
  absl::StatusOr<bench::Suite> suite = CellSuite(f);
  if (!suite.ok()) return Error(cmd, std::string(suite.status().message()));
  const std::string build_command = BuildCommandOf(f);
  Builds builds(build_command, cmd);
  absl::StatusOr<std::string> good_binary = builds.Get(good);
  if (!good_binary.ok()) return Error(cmd, fmt::format("the good commit must build: {}", std::string(good_binary.status().message())));
  absl::StatusOr<std::string> bad_binary = builds.Get(bad);
  if (!bad_binary.ok()) return Error(cmd, fmt::format("the bad commit must build: {}", std::string(bad_binary.status().message())));
  absl::StatusOr<bench::Comparison> endpoints = Compare(f, *good_binary, *bad_binary, *suite);
  if (!endpoints.ok()) return Error(cmd, std::string(endpoints.status().message()));
  const std::string device_class = endpoints->candidate.device.DeviceClass();
  std::printf("bisect %zu commit(s) %s..%s on %s\n  bad against good: %s\n", commits->size(), Canonical(good).c_str(),
              Canonical(bad).c_str(), device_class.c_str(), Describe(Telling(*endpoints, f.improvement)).c_str());
  if (Judge(*endpoints, f.improvement) != bench::ProbeResult::kBad) {
    return Error(cmd, fmt::format("the bad commit is not {} than the good one on this cell: nothing to find",
                                  f.improvement ? "faster" : "slower"));
  }
  auto probe = [&](int i) -> absl::StatusOr<bench::ProbeResult> {
    const std::string& commit = (*commits)[i];
    if (i == static_cast<int>(commits->size()) - 1) return bench::ProbeResult::kBad;
    absl::StatusOr<std::string> binary = builds.Get(commit);
    if (absl::IsNotFound(binary.status())) {
      std::printf("  %s: skip (does not build)\n", Canonical(commit).c_str());
      return bench::ProbeResult::kSkip;
    }
    if (!binary.ok()) return binary.status();
    absl::StatusOr<bench::Comparison> c = Compare(f, *good_binary, *binary, *suite);
    if (!c.ok()) return c.status();
    const bench::ProbeResult result = Judge(*c, f.improvement);
    std::printf("  %s: %s (%s)\n", Canonical(commit).c_str(), bench::ProbeResultName(result),
                Describe(Telling(*c, f.improvement)).c_str());
    return result;
  };
  absl::StatusOr<bench::BisectOutcome> outcome =
      bench::Bisect(static_cast<int>(commits->size()), probe, std::max(1, f.max_builds - builds.count()));
  if (!outcome.ok()) return Error(cmd, std::string(outcome.status().message()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!outcome->found) {
    std::printf("no single culprit%s: it is one of\n", outcome->capped ? " (the build cap was reached)" : "");
    for (int i = outcome->candidates_from; i <= outcome->candidates_to; ++i) std::printf("  %s\n", (*commits)[i].c_str());
    std::printf("%d build(s), %.0f s\n", builds.count(), seconds);
    return kExitNotFound;
  }
  const std::string culprit = (*commits)[outcome->first_bad];
  const std::string parent = outcome->first_bad == 0 ? good : (*commits)[outcome->first_bad - 1];
  absl::StatusOr<std::string> parent_binary = builds.Get(parent);
  absl::StatusOr<std::string> culprit_binary = builds.Get(culprit);
  if (!parent_binary.ok() || !culprit_binary.ok()) return Error(cmd, "the culprit or its parent no longer builds");
  // A range need not be monotonic: the culprit is confirmed against its parent, afresh.
  absl::StatusOr<bench::Comparison> confirm = Compare(f, *parent_binary, *culprit_binary, *suite);
  if (!confirm.ok()) return Error(cmd, std::string(confirm.status().message()));
  const bench::CellComparison& telling = Telling(*confirm, f.improvement);
  const std::string subject = Git(f.repo, {"log", "-1", "--format=%s", culprit}).value_or("");
  std::printf("%s %s\n  %s\n  against its parent %s: %s\n", Judge(*confirm, f.improvement) == bench::ProbeResult::kBad
                                                                ? "culprit" : "not confirmed:",
              culprit.c_str(), subject.c_str(), Canonical(parent).c_str(), Describe(telling).c_str());
  std::printf("builds used (%d):\n", builds.count());
  for (const auto& [commit, binary] : builds.all()) {
    std::printf("  %s %s\n", Canonical(commit).c_str(), binary.ok() ? binary->c_str() : "does not build");
  }
  std::printf("%zu probe(s), %.0f s\n", outcome->probes.size(), seconds);
  if (Judge(*confirm, f.improvement) != bench::ProbeResult::kBad) {
    std::printf("the search ended at a commit that is %s than the good endpoint while its parent is not, but against "
                "its parent the change is not significant: the range is not monotonic or the change is gradual\n",
                f.improvement ? "faster" : "slower");
    return kExitNotFound;
  }
  RecordCulprit(f, telling, culprit, parent, device_class);
  return kExitFound;
}

int RunBisectStep(const BisectFlags& f) {
  const std::string cmd = "bisect-step";
  constexpr int kGood = 0, kBad = 1, kSkip = 125, kAbort = 128;
  absl::StatusOr<bench::Suite> suite = CellSuite(f);
  if (!suite.ok()) return Error(cmd, std::string(suite.status().message()), kAbort);
  absl::StatusOr<std::string> head = ResolveCommit(f.repo, "HEAD");
  if (!head.ok()) return Error(cmd, std::string(head.status().message()), kAbort);
  const std::string build_command = BuildCommandOf(f);
  absl::StatusOr<std::string> binary = BuildCommit(build_command, *head, "bisect-step: building HEAD");
  if (absl::IsNotFound(binary.status())) return kSkip;
  if (!binary.ok()) return Error(cmd, std::string(binary.status().message()), kAbort);
  absl::StatusOr<bench::Comparison> c = Compare(f, f.good_binary, *binary, *suite);
  if (!c.ok()) return Error(cmd, std::string(c.status().message()), kAbort);
  const bench::ProbeResult result = Judge(*c, f.improvement);
  std::printf("%s: %s (%s)\n", Canonical(*head).c_str(), bench::ProbeResultName(result),
              Describe(Telling(*c, f.improvement)).c_str());
  return result == bench::ProbeResult::kBad ? kBad : result == bench::ProbeResult::kGood ? kGood : kSkip;
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
