#include "fusetune/regress/builds.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "fmt/format.h"
#include "fusetune/records/commit.h"

namespace fusetune::regress {

absl::StatusOr<std::string> ResolveCommitFlag(std::string_view flag, std::string_view name,
                                              const std::vector<std::string>& known, std::string_view where) {
  absl::StatusOr<std::string> commit = ResolveCommitName(name, known, where);
  if (commit.ok()) return commit;
  if (absl::IsNotFound(commit.status())) {
    return absl::NotFoundError(fmt::format("{}: {}; give at least {} hex digits", flag,
                                           std::string(commit.status().message()), kCommitHashDigits));
  }
  return absl::InvalidArgumentError(fmt::format("{}: {}", flag, std::string(commit.status().message())));
}

absl::StatusOr<std::vector<std::string>> StoredCommitsAbbreviated(Store* store, std::string_view name) {
  absl::StatusOr<CommitName> parsed = ParseCommitName(name);
  if (store == nullptr || !parsed.ok() || parsed->kind != CommitNameKind::kAbbreviation) {
    return std::vector<std::string>{};
  }
  return store->CommitsStartingWith(parsed->text);
}

std::string SelfBinary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

ShellResult RunShell(const std::string& line) {
  ShellResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) result.out += buffer;
  result.status = pclose(pipe);
  return result;
}

absl::StatusOr<std::string> BuildCommit(const std::string& command, const std::string& commit,
                                        const BuildAnnouncer& announce) {
  std::string line = command;
  for (size_t at; (at = line.find("{commit}")) != std::string::npos;) line.replace(at, 8, commit);
  if (announce) announce(line);
  ShellResult run = RunShell(line);
  const int status = run.status;
  std::string& out = run.out;
  if (status == -1) return absl::UnavailableError(fmt::format("cannot run '{}'", line));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 125) {
    return absl::NotFoundError(fmt::format("{} does not build ('{}' exited 125)", commit, line));
  }
  if (status != 0) return absl::UnavailableError(fmt::format("'{}' failed (status {})", line, status));
  const size_t end = out.find_last_not_of("\n ");
  if (end == std::string::npos) return absl::UnavailableError(fmt::format("'{}' printed no binary path", line));
  out.resize(end + 1);
  const size_t newline = out.find_last_of('\n');
  const std::string last = out.substr(newline == std::string::npos ? 0 : newline + 1);
  if (IsCapiLibrary(last) ? access(last.c_str(), R_OK) != 0 : access(last.c_str(), X_OK) != 0) {
    return absl::UnavailableError(
        fmt::format("'{}' printed '{}', which is neither an executable nor a readable C ABI library", line, last));
  }
  return last;
}

bool IsCapiLibrary(const std::string& build) {
  return std::filesystem::path(build).filename().string().rfind("libfusetune_capi.so", 0) == 0;
}

int TimingCpu(int timing_cpu, const std::string& backend) {
  if (timing_cpu != kAutoTimingCpu) return timing_cpu;
  if (backend == "cpu") return -1;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
  for (int cpu = CPU_SETSIZE - 1; cpu >= 0; --cpu) {
    if (CPU_ISSET(cpu, &allowed)) return cpu;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<ProcessBlockSource>> StartBuild(const BuildSourceOptions& options,
                                                               const std::string& binary, const Suite& suite) {
  ProcessOptions process;
  process.binary = binary;
  process.args = {"--backend", options.backend, "--device", std::to_string(options.device)};
  if (IsCapiLibrary(binary)) {
    process.binary = SelfBinary();
    process.args.insert(process.args.end(), {"--capi-library", binary});
  }
  for (const std::string& spec : options.plant_slowdowns) process.args.insert(process.args.end(), {"--plant-slowdown", spec});
  process.block = suite.block;
  process.timing_cpu = TimingCpu(options.timing_cpu, options.backend);
  return ProcessBlockSource::Start(process);
}

}  // namespace fusetune::regress
