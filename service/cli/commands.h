// The `fusetune` command's subcommands. Each lives in its own file and registers itself with
// an Add...Command(app, context) function; main.cc is only the list of those calls.
//
// A subcommand's callback runs after parsing succeeded; it writes its exit code to
// context.exit_code and never lets an exception out (third-party throws are caught at the
// callback boundary and become kExitFailure).
#ifndef FUSETUNE_SERVICE_CLI_COMMANDS_H_
#define FUSETUNE_SERVICE_CLI_COMMANDS_H_

#include <atomic>
#include <functional>

#include "CLI/CLI.hpp"
#include "fusetune/records/run.h"

namespace fusetune::cli {

// Exit codes of every fusetune subcommand (the table in service/README.md). These are the
// one definition of each: a command that reports "not found" exits kExitNotFound. The
// commands that keep CI's 0 clean / 1 regression / 2 error convention (regress, bench
// --suite, bench-serve, bisect) say so in their help.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;    // runtime failure: database, backend, I/O
inline constexpr int kExitUsage = 2;      // bad flags or values; nothing was done
// The asked-for record does not exist: best without a record, audit with no record for any
// of its problems, history without bench runs, a server's NOT_FOUND (RpcFailure).
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitCancelled = 4;  // stopped by SIGINT/SIGTERM; a sweep resumes on rerun

struct CommandContext {
  int exit_code = kExitOk;
};

// Runs `body` as the subcommand's action: its return value becomes the exit code; an
// exception becomes kExitFailure with its message on stderr.
void SetAction(CLI::App* command, CommandContext& context, std::function<int()> body);

// While alive, SIGINT and SIGTERM set stop_requested() instead of killing the process, so
// that a long command (sweep, audit) stops between measurements and exits kExitCancelled
// with what it finished recorded; the destructor restores the default actions. One at a
// time (the flag is process-wide); not thread-safe to construct.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  // The flag the handlers set, for the tuner's `cancel` parameters.
  const std::atomic<bool>* flag() const;
  bool stop_requested() const { return flag()->load(); }
};

// The commit this binary was built at, canonical (fusetune/records/commit.h); "unknown" for a
// build outside a git checkout.
const std::string& BuiltCommit();
const char* ToolVersion();

// The RunInfo of a run this process measures on `device`: this host, this binary's version
// and compiler, started now.
RunInfo LocalRunInfo(const DeviceInfo& device, const std::string& commit, const std::string& label);

void AddSweepCommand(CLI::App& app, CommandContext& context);
void AddBestCommand(CLI::App& app, CommandContext& context);
void AddReportCommand(CLI::App& app, CommandContext& context);
void AddBenchCommand(CLI::App& app, CommandContext& context);
void AddAuditCommand(CLI::App& app, CommandContext& context);  // audit_command.cc
void AddBenchServeCommand(CLI::App& app, CommandContext& context);  // bench_serve_command.cc
void AddRegressCommand(CLI::App& app, CommandContext& context);     // regress_command.cc
void AddRejudgeCommand(CLI::App& app, CommandContext& context);     // rejudge_command.cc
void AddBisectCommand(CLI::App& app, CommandContext& context);      // bisect_command.cc (bisect, bisect-step)
void AddHistoryCommand(CLI::App& app, CommandContext& context);     // history_command.cc
void AddDbCommand(CLI::App& app, CommandContext& context);          // db_command.cc (db copy)
// Service commands (FUSETUNE_WITH_SERVICE builds only).
void AddWorkerCommand(CLI::App& app, CommandContext& context);  // worker_command.cc
void AddServeCommand(CLI::App& app, CommandContext& context);   // serve_command.cc
void AddSubmitCommand(CLI::App& app, CommandContext& context);  // submit_command.cc
void AddJobsCommand(CLI::App& app, CommandContext& context);    // jobs_command.cc
void AddWorkersCommand(CLI::App& app, CommandContext& context);  // workers_command.cc
void AddAuditsCommand(CLI::App& app, CommandContext& context);   // audits_command.cc
void AddRegressionsCommand(CLI::App& app, CommandContext& context);  // regressions_command.cc

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_COMMANDS_H_
