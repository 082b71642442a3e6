#include "fusetune/regress/bisect_run.h"

#include <algorithm>
#include <memory>

#include "fmt/format.h"
#include "fusetune/base/time.h"
#include "fusetune/records/commit.h"
#include "fusetune/regress/verdict.h"

namespace fusetune::regress {

absl::StatusOr<std::string> Git(const std::string& repo, const std::vector<std::string>& args) {
  std::string line = "git -C " + ShellQuote(repo);
  for (const std::string& a : args) {
    line += ' ';
    line += ShellQuote(a);
  }
  line += " 2>/dev/null";
  ShellResult run = RunShell(line);
  if (run.status == -1) return absl::UnavailableError("cannot run git");
  std::string out = std::move(run.out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (run.status != 0) return absl::FailedPreconditionError(fmt::format("git {} failed", args.empty() ? "" : args[0]));
  return out;
}

absl::StatusOr<std::string> ResolveCommit(const std::string& repo, const std::string& name) {
  absl::StatusOr<std::string> full = Git(repo, {"rev-parse", "--verify", "--quiet", name + "^{commit}"});
  if (!full.ok() || full->empty()) return absl::NotFoundError(fmt::format("unknown commit '{}' in {}", name, repo));
  return full;
}

absl::StatusOr<BisectRange> ResolveRange(const std::string& repo, const std::string& good, const std::string& bad) {
  if (!Git(repo, {"rev-parse", "--show-toplevel"}).ok()) {
    return absl::InvalidArgumentError(fmt::format("{} is not a git repository", repo));
  }
  absl::StatusOr<std::string> dirty = Git(repo, {"status", "--porcelain", "--untracked-files=no"});
  if (!dirty.ok() || !dirty->empty()) {
    return absl::FailedPreconditionError(fmt::format(
        "{} has uncommitted changes: commit or stash them first (bisect builds commits, not the worktree)", repo));
  }
  absl::StatusOr<std::string> g = ResolveCommit(repo, good);
  if (!g.ok()) return g.status();
  absl::StatusOr<std::string> b = ResolveCommit(repo, bad);
  if (!b.ok()) return b.status();
  if (!Git(repo, {"merge-base", "--is-ancestor", *g, *b}).ok()) {
    return absl::InvalidArgumentError(fmt::format("the good commit {} is not an ancestor of the bad commit {}", good, bad));
  }
  absl::StatusOr<std::string> list = Git(repo, {"rev-list", "--first-parent", "--reverse", *g + ".." + *b});
  if (!list.ok()) return list.status();
  BisectRange range;
  for (size_t at = 0; at < list->size();) {
    size_t end = list->find('\n', at);
    if (end == std::string::npos) end = list->size();
    if (end > at) range.commits.push_back(list->substr(at, end - at));
    at = end + 1;
  }
  if (range.commits.empty()) return absl::InvalidArgumentError("the good and the bad commit are the same");
  range.good = *g;
  range.bad = *b;
  return range;
}

absl::StatusOr<Suite> CellSuite(const std::string& suite_file, const std::string& cell_name, Store* store,
                                const std::string& db) {
  if (!suite_file.empty()) return ReadSuiteFile(suite_file);
  const size_t space = cell_name.find(' ');
  if (space == std::string::npos) return absl::InvalidArgumentError("--cell is 'PROBLEM_KEY CONFIG_KEY'");
  const std::string problem_key = cell_name.substr(0, space);
  const std::string config_key = cell_name.substr(space + 1);
  absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(config_key);
  if (!config.ok()) return config.status();
  Suite suite;
  suite.name = "bisect";
  SuiteCell cell;
  cell.config = *config;
  if (store != nullptr) {
    absl::StatusOr<std::vector<std::string>> suites = store->ListBenchSuites();
    if (!suites.ok()) return suites.status();
    std::vector<RunInfo> runs;
    for (const std::string& name : *suites) {
      absl::StatusOr<std::vector<RunInfo>> of_suite = store->ListBenchRuns(name, "", 1000);
      if (!of_suite.ok()) return of_suite.status();
      runs.insert(runs.end(), of_suite->begin(), of_suite->end());
    }
    std::vector<std::string> known;
    bool found = false;
    for (const RunInfo& run : runs) {
      absl::StatusOr<std::vector<BenchCell>> cells = store->ListBenchCells(run.run_id);
      for (const BenchCell& c : cells.ok() ? *cells : std::vector<BenchCell>{}) {
        if (c.problem_key == problem_key && c.config_key == config_key) {
          absl::StatusOr<AttentionProblem> p = ProblemFromJson(c.problem_json);
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
      return absl::NotFoundError(fmt::format("{} holds no bench cell '{}'{}{}", db, cell_name,
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

ProbeResult Judge(const Comparison& c, bool improvement) {
  bool unknown = false;
  for (const CellComparison& cell : c.cells) {
    const Verdict v = cell.verdict.verdict;
    if (v == (improvement ? Verdict::kImproved : Verdict::kRegressed)) return ProbeResult::kBad;
    unknown = unknown || v == Verdict::kUnknown;
  }
  return unknown ? ProbeResult::kSkip : ProbeResult::kGood;
}

const CellComparison& Telling(const Comparison& c, bool improvement) {
  for (const CellComparison& cell : c.cells) {
    if (cell.verdict.verdict == (improvement ? Verdict::kImproved : Verdict::kRegressed)) return cell;
  }
  return c.cells.front();
}

absl::StatusOr<Comparison> CompareBuilds(const BuildSourceOptions& options, int blocks, const std::string& baseline,
                                         const std::string& candidate, const Suite& suite) {
  absl::StatusOr<std::unique_ptr<ProcessBlockSource>> base = StartBuild(options, baseline, suite);
  if (!base.ok()) return base.status();
  absl::StatusOr<std::unique_ptr<ProcessBlockSource>> cand = StartBuild(options, candidate, suite);
  if (!cand.ok()) return cand.status();
  CompareOptions compare;
  compare.blocks = blocks;
  return CompareInterleaved(**base, **cand, suite, compare);
}

absl::Status RecordCulprit(Store& store, const CellComparison& cell, const std::string& culprit,
                           const std::string& parent, const std::string& device_class, bool improvement) {
  Regression r;
  r.commit = CanonicalCommit(culprit).value_or(culprit);
  r.baseline_commit = CanonicalCommit(parent).value_or(parent);
  r.device_class = device_class;
  r.problem_key = cell.cell.problem.Key();
  r.config_key = cell.cell.config.Key();
  r.metric = improvement ? "bisect_improvement" : "bisect_culprit";
  r.ratio = cell.verdict.ratio.pairwise_ratio;
  r.p_value = improvement ? cell.verdict.p_faster_adjusted : cell.verdict.p_slower_adjusted;
  r.verdict = VerdictName(cell.verdict.verdict);
  r.created_unix_ms = NowUnixMs();
  return store.RecordRegression(r).status();
}

absl::StatusOr<std::string> BuildCache::Get(const std::string& commit) {
  auto it = built_.find(commit);
  if (it != built_.end()) return it->second;
  absl::StatusOr<std::string> binary = build_(commit);
  if (binary.ok() || absl::IsNotFound(binary.status())) {
    built_[commit] = binary;
    order_.push_back(commit);
  }
  return binary;
}

std::vector<std::pair<std::string, absl::StatusOr<std::string>>> BuildCache::all() const {
  std::vector<std::pair<std::string, absl::StatusOr<std::string>>> out;
  for (const std::string& c : order_) out.emplace_back(c, built_.at(c));
  return out;
}

absl::StatusOr<BisectReport> RunBisect(const BisectRange& range, const BisectRunOptions& options, BuildCache& builds,
                                       const CompareBuildsFn& compare) {
  const std::vector<std::string>& commits = range.commits;
  if (commits.empty()) return absl::InvalidArgumentError("the good and the bad commit are the same");
  absl::StatusOr<std::string> good_binary = builds.Get(range.good);
  if (!good_binary.ok()) {
    return absl::Status(good_binary.status().code(),
                        fmt::format("the good commit must build: {}", std::string(good_binary.status().message())));
  }
  absl::StatusOr<std::string> bad_binary = builds.Get(range.bad);
  if (!bad_binary.ok()) {
    return absl::Status(bad_binary.status().code(),
                        fmt::format("the bad commit must build: {}", std::string(bad_binary.status().message())));
  }
  BisectReport report;
  absl::StatusOr<Comparison> endpoints = compare(*good_binary, *bad_binary);
  if (!endpoints.ok()) return endpoints.status();
  if (endpoints->cells.empty()) return absl::InvalidArgumentError("the comparison holds no cell");
  report.endpoints = *std::move(endpoints);
  if (options.on_endpoints) options.on_endpoints(report.endpoints);
  if (Judge(report.endpoints, options.improvement) != ProbeResult::kBad) {
    return absl::FailedPreconditionError(fmt::format("the bad commit is not {} than the good one on this cell: nothing to find",
                                                     options.improvement ? "faster" : "slower"));
  }
  auto probe = [&](int i) -> absl::StatusOr<ProbeResult> {
    const std::string& commit = commits[i];
    if (i == static_cast<int>(commits.size()) - 1) return ProbeResult::kBad;
    absl::StatusOr<std::string> binary = builds.Get(commit);
    if (absl::IsNotFound(binary.status())) {
      if (options.on_probe) options.on_probe(commit, ProbeResult::kSkip, nullptr);
      return ProbeResult::kSkip;
    }
    if (!binary.ok()) return binary.status();
    absl::StatusOr<Comparison> c = compare(*good_binary, *binary);
    if (!c.ok()) return c.status();
    if (c->cells.empty()) return absl::InvalidArgumentError("the comparison holds no cell");
    const ProbeResult result = Judge(*c, options.improvement);
    if (options.on_probe) options.on_probe(commit, result, &*c);
    return result;
  };
  absl::StatusOr<BisectOutcome> outcome =
      Bisect(static_cast<int>(commits.size()), probe, std::max(1, options.max_builds - builds.count()));
  if (!outcome.ok()) return outcome.status();
  report.outcome = *std::move(outcome);
  if (!report.outcome.found) return report;
  report.culprit = commits[report.outcome.first_bad];
  report.parent = report.outcome.first_bad == 0 ? range.good : commits[report.outcome.first_bad - 1];
  absl::StatusOr<std::string> parent_binary = builds.Get(report.parent);
  absl::StatusOr<std::string> culprit_binary = builds.Get(report.culprit);
  if (!parent_binary.ok() || !culprit_binary.ok()) {
    return absl::UnavailableError("the culprit or its parent no longer builds");
  }
  // A range need not be monotonic: the culprit is confirmed against its parent, afresh.
  absl::StatusOr<Comparison> confirm = compare(*parent_binary, *culprit_binary);
  if (!confirm.ok()) return confirm.status();
  if (confirm->cells.empty()) return absl::InvalidArgumentError("the comparison holds no cell");
  report.confirmed = Judge(*confirm, options.improvement) == ProbeResult::kBad;
  report.confirmation = *std::move(confirm);
  return report;
}

}  // namespace fusetune::regress
