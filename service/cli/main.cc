// fusetune: the command line. Each subcommand registers itself; add new ones to the list.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace fusetune::cli;
  CLI::App app{"fusetune: autotuning and regression tracking for fused attention kernels"};
  app.set_version_flag("--version", std::string(ToolVersion()) + " (commit " + BuiltCommit() + ")");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 not found, 4 cancelled by a signal.\n"
      "Run 'fusetune <command> --help' for a command's options.");
  CommandContext context;

  AddSweepCommand(app, context);
  AddBestCommand(app, context);
  AddReportCommand(app, context);
  AddBenchCommand(app, context);
  AddAuditCommand(app, context);
  AddBenchServeCommand(app, context);
  AddRegressCommand(app, context);
  AddRejudgeCommand(app, context);
  AddBisectCommand(app, context);
  AddHistoryCommand(app, context);
  AddDbCommand(app, context);
#ifdef FUSETUNE_WITH_SERVICE
  AddWorkerCommand(app, context);
  AddServeCommand(app, context);
  AddSubmitCommand(app, context);
  AddJobsCommand(app, context);
  AddWorkersCommand(app, context);
  AddAuditsCommand(app, context);
  AddRegressionsCommand(app, context);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a usage hint
    return kExitUsage;
  }
  return context.exit_code;
}
