// `fusetune bisect` as library calls: the commit range from git, the cell(s) to measure, builds
// by commit, and the search (bisect.h) with each probe measured interleaved against the good
// endpoint and the culprit confirmed against its parent. Building and comparing are callbacks,
// so the search runs the same over real builds and in tests over fakes.
//
// Thread-safety: the functions keep no state; a BuildCache is not thread-safe.
#ifndef FUSETUNE_REGRESS_BISECT_RUN_H_
#define FUSETUNE_REGRESS_BISECT_RUN_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/bisect.h"
#include "fusetune/regress/builds.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/suite.h"

namespace fusetune::regress {

// `git -C repo args...`: its stdout (trailing newlines removed); Unavailable when git cannot be
// run, FailedPrecondition on a non-zero exit.
absl::StatusOr<std::string> Git(const std::string& repo, const std::vector<std::string>& args);

// `name` resolved by git in `repo`: the commit's full hash (what builds are asked for).
// NotFound when git knows no such commit.
absl::StatusOr<std::string> ResolveCommit(const std::string& repo, const std::string& name);

// The commits between a good and a bad endpoint, first-parent, oldest first; the bad one last.
struct BisectRange {
  std::string good;  // full hashes
  std::string bad;
  std::vector<std::string> commits;
};

// Checks the repository (InvalidArgument: not one; FailedPrecondition: uncommitted changes,
// since builds are of commits, not of the worktree), the endpoints (NotFound: unknown) and the
// range (InvalidArgument: good is not an ancestor of bad, or they are the same commit).
absl::StatusOr<BisectRange> ResolveRange(const std::string& repo, const std::string& good, const std::string& bad);

// The cell(s) to measure: the suite file `suite_file` when given, else the one cell `cell`
// ("PROBLEM_KEY CONFIG_KEY") with its problem from `store`'s bench cells (when given: a key
// alone does not hold every problem, e.g. varlen), else from the key. InvalidArgument for a
// malformed cell or key; NotFound (listing some cells it holds; `db` names the store) when the
// store holds no such bench cell; the store's and the suite file's errors.
absl::StatusOr<Suite> CellSuite(const std::string& suite_file, const std::string& cell, Store* store,
                                const std::string& db);

// The change bisect looks for (a regression, or with `improvement` a speed-up) in any cell:
// bad; else skip when a cell is unknown; else good.
ProbeResult Judge(const Comparison& comparison, bool improvement);

// The most telling cell of a comparison: the first bad one, else the first. The comparison
// must hold a cell.
const CellComparison& Telling(const Comparison& comparison, bool improvement);

// `candidate` against `baseline` (builds: a fusetune or a C ABI library) on `suite`,
// interleaved, `blocks` first-pass blocks (0: the suite's). The builds' and the comparison's
// errors.
absl::StatusOr<Comparison> CompareBuilds(const BuildSourceOptions& options, int blocks, const std::string& baseline,
                                         const std::string& candidate, const Suite& suite);

// Records a confirmed culprit in `store`: a "bisect_culprit" row ("bisect_improvement" with
// `improvement`) of `cell`'s ratio, the culprit against its parent. The store's error.
absl::Status RecordCulprit(Store& store, const CellComparison& cell, const std::string& culprit,
                           const std::string& parent, const std::string& device_class, bool improvement);

// Builds by commit, each once: a commit's build is asked of `build` the first time only.
class BuildCache {
 public:
  // The build of a commit (a path), NotFound when the commit does not build.
  using BuildFn = std::function<absl::StatusOr<std::string>(const std::string& commit)>;
  explicit BuildCache(BuildFn build) : build_(std::move(build)) {}
  // The build; NotFound when the commit does not build (remembered); other errors are not
  // remembered, so the build is tried again.
  absl::StatusOr<std::string> Get(const std::string& commit);
  int count() const { return static_cast<int>(built_.size()); }
  // In the order they were built.
  std::vector<std::pair<std::string, absl::StatusOr<std::string>>> all() const;

 private:
  BuildFn build_;
  std::map<std::string, absl::StatusOr<std::string>> built_;
  std::vector<std::string> order_;
};

// Compares two builds (baseline first) on the bisected cells.
using CompareBuildsFn =
    std::function<absl::StatusOr<Comparison>(const std::string& baseline_build, const std::string& candidate_build)>;

struct BisectRunOptions {
  bool improvement = false;  // look for the commit that made the cells faster
  int max_builds = 16;       // builds in all, the endpoints' included (at least one probe)
  // Told, when set, the endpoints' comparison before the search, and each probe as it ends:
  // the commit, its result, its comparison (null when it did not build).
  std::function<void(const Comparison& endpoints)> on_endpoints;
  std::function<void(const std::string& commit, ProbeResult result, const Comparison* comparison)> on_probe;
};

struct BisectReport {
  Comparison endpoints;  // the bad endpoint against the good one
  BisectOutcome outcome;
  // When outcome.found: the first bad commit, its parent, and the culprit measured afresh
  // against its parent (a range need not be monotonic); `confirmed` when that is bad too.
  std::string culprit;
  std::string parent;
  std::optional<Comparison> confirmation;
  bool confirmed = false;
};

// Bisects `range`: builds both endpoints (an endpoint that does not build is an error: its
// status with the message prefixed), compares them (FailedPrecondition when the bad one does
// not show the change: nothing to find), searches, and confirms the culprit. A build or
// comparison error during the search ends it with that error.
absl::StatusOr<BisectReport> RunBisect(const BisectRange& range, const BisectRunOptions& options, BuildCache& builds,
                                       const CompareBuildsFn& compare);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_BISECT_RUN_H_
