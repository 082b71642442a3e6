// Builds of fusetune at other commits: resolving commit names, building one with a command, and
// starting a build's bench-serve as a block source. What `regress`, `bisect` and `bisect-step`
// share about builds.
//
// Thread-safety: the functions keep no state; RunShell and BuildCommit run a child process each.
#ifndef FUSETUNE_REGRESS_BUILDS_H_
#define FUSETUNE_REGRESS_BUILDS_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/db/store.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/suite.h"

namespace fusetune::regress {

// A commit named by `flag` as `name`, in canonical form (fusetune/records/commit.h): a hash or
// a label as CanonicalCommit, an abbreviation resolved against `known`, the commits at hand
// (`where` says what they are). InvalidArgument (naming the flag) for a malformed name or an
// abbreviation of several known commits (listed), NotFound for one of none (the message says
// to give at least 12 digits).
absl::StatusOr<std::string> ResolveCommitFlag(std::string_view flag, std::string_view name,
                                              const std::vector<std::string>& known, std::string_view where);

// The commits `store` holds that `name` may abbreviate: those starting with it when it is an
// abbreviation, none otherwise or without a store. The store's errors.
absl::StatusOr<std::vector<std::string>> StoredCommitsAbbreviated(Store* store, std::string_view name);

// Runs `line` through /bin/sh and reads its whole stdout. `status` is pclose's (-1 when the
// command could not be started).
struct ShellResult {
  int status = -1;
  std::string out;
};
ShellResult RunShell(const std::string& line);

// `s` quoted for /bin/sh.
std::string ShellQuote(const std::string& s);

// This process's executable ("" when /proc/self/exe cannot be read).
std::string SelfBinary();

// Told the command line of a build just before it runs (callers say on stderr what they build).
using BuildAnnouncer = std::function<void(const std::string& line)>;

// Runs `command` through /bin/sh with every "{commit}" replaced by `commit`; its last stdout
// line must name the build: an executable (the build's fusetune), or the build's C ABI library
// (a file named libfusetune_capi.so*, for commits older than bench-serve: StartBuild serves it
// through this build's bench-serve --capi-library). `announce` (may be empty) is told the
// command line first. NotFound ("does not build") when the command exits 125 (a commit that
// does not build, as ci/build-commit.sh says), Unavailable for any other failure or a last
// line that is not an executable.
absl::StatusOr<std::string> BuildCommit(const std::string& command, const std::string& commit,
                                        const BuildAnnouncer& announce = nullptr);

// True when `build` names a C ABI library rather than a fusetune executable.
bool IsCapiLibrary(const std::string& build);

// The value of --timing-cpu that means "choose by backend".
inline constexpr int kAutoTimingCpu = -2;

// The CPU builds launch from during blocks (block_source.h says why): `timing_cpu` unless it is
// kAutoTimingCpu; then for a GPU backend the last CPU this process may run on (CPU 0 takes most
// interrupts), and -1 (none) for the CPU backend, whose worker threads need every core.
int TimingCpu(int timing_cpu, const std::string& backend);

struct BuildSourceOptions {
  std::string backend = "cpu";
  int device = 0;
  int timing_cpu = kAutoTimingCpu;
  std::vector<std::string> plant_slowdowns;
};

// `binary bench-serve` with the suite's block options (ProcessBlockSource::Start's errors); for
// a C ABI library, this build's bench-serve serving it.
absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartBuild(const BuildSourceOptions& options,
                                                               const std::string& binary, const Suite& suite);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_BUILDS_H_
