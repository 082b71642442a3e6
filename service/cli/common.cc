#include <cstdio>
#include <exception>

#include "commands.h"

#ifndef FUSETUNE_GIT_COMMIT
#define FUSETUNE_GIT_COMMIT "unknown"
#endif
#ifndef FUSETUNE_VERSION
#define FUSETUNE_VERSION "0.0.0"
#endif

namespace fusetune::cli {

const char* BuiltCommit() { return FUSETUNE_GIT_COMMIT; }
const char* ToolVersion() { return FUSETUNE_VERSION; }

void SetAction(CLI::App* command, CommandContext& context, std::function<int()> body) {
  command->callback([&context, name = command->get_name(), body = std::move(body)] {
    try {
      context.exit_code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fusetune %s: %s\n", name.c_str(), e.what());
      context.exit_code = kExitFailure;
    }
  });
}

}  // namespace fusetune::cli
