#include <cstdio>
#include <exception>

#include "commands.h"

#ifndef FUSETUNE_VERSION
#define FUSETUNE_VERSION "0.0.0"
#endif

namespace fusetune::cli {

extern const char kBuildCommit[];  // build_info.cc, generated at build time

const char* BuiltCommit() { return kBuildCommit; }
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
