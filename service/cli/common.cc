#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "fusetune/base/time.h"
#include "fusetune/records/commit.h"

#ifndef FUSETUNE_VERSION
#define FUSETUNE_VERSION "0.0.0"
#endif

namespace fusetune::cli {

extern const char kBuildCommit[];  // build_info.cc, generated at build time

const std::string& BuiltCommit() {
  // The full hash git reports (or kUnknownCommit), in the form every commit is stored in.
  static const std::string* const kCanonical = new std::string(CanonicalCommit(kBuildCommit).value_or(kUnknownCommit));
  return *kCanonical;
}
const char* ToolVersion() { return FUSETUNE_VERSION; }

namespace {

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);  // so the handler is async-signal-safe

extern "C" void OnStopSignal(int) { g_stop_requested.store(true); }

}  // namespace

StopOnSignal::StopOnSignal() {
  g_stop_requested.store(false);
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
}

StopOnSignal::~StopOnSignal() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

const std::atomic<bool>* StopOnSignal::flag() const { return &g_stop_requested; }

RunInfo LocalRunInfo(const DeviceInfo& device, const std::string& commit, const std::string& label) {
  RunInfo info;
  info.commit = commit;
  char host[256] = {};
  info.host = gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown";
  info.device = device;
  info.tool_version = ToolVersion();
  info.environment = std::string("compiler ") + __VERSION__;
  info.label = label;
  info.started_unix_ms = NowUnixMs();
  return info;
}

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
