// ProcessBlockSource: another build's `fusetune bench-serve`, spoken to over pipes.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fusetune/base/file.h"
#include "fusetune/base/strings.h"
#include "fusetune/records/commit.h"
#include "fusetune/regress/block_source.h"
#include "protocol.h"

extern char** environ;

namespace fusetune::regress {

using fusetune::Cat;
namespace {

std::string ReadTail(const std::string& path, size_t max_bytes = 2000) {
  std::string s = ReadFileToString(path).value_or("");  // no log is no tail
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> ChildArgs(const ProcessOptions& options) {
  std::vector<std::string> args = {options.binary, "bench-serve"};
  args.insert(args.end(), options.args.begin(), options.args.end());
  args.insert(args.end(), {"--warmup", std::to_string(options.block.warmup), "--repeats",
                           std::to_string(options.block.repeats), "--block-seconds",
                           Cat(options.block.max_seconds), "--flush-l2",
                           options.block.flush_l2 ? "true" : "false"});
  // Only when on: a bench-serve from before the flag would refuse it (and then fails to start).
  if (options.block.graph) args.push_back("--graph-timing");
  if (options.timing_cpu >= 0) args.insert(args.end(), {"--timing-cpu", std::to_string(options.timing_cpu)});
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessBlockSource>> ProcessBlockSource::Start(const ProcessOptions& options) {
  if (options.binary.empty() || access(options.binary.c_str(), X_OK) != 0) {
    return absl::UnavailableError(Cat("cannot run ", options.binary, ": ", std::strerror(errno)));
  }
  std::unique_ptr<ProcessBlockSource> source(new ProcessBlockSource());
  source->reply_timeout_seconds_ = options.reply_timeout_seconds;
  char stderr_template[] = "/tmp/fusetune-bench-serve-XXXXXX";
  const int err_fd = mkstemp(stderr_template);
  if (err_fd < 0) return absl::InternalError(Cat("mkstemp: ", std::strerror(errno)));
  source->stderr_path_ = stderr_template;
  // A socket rather than pipes: writes to a child that died fail with EPIPE (MSG_NOSIGNAL)
  // instead of raising SIGPIPE in the driver.
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    close(err_fd);
    return absl::InternalError(Cat("socketpair: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  const std::vector<std::string> args = ChildArgs(options);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, options.binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  close(err_fd);
  if (rc != 0) {
    close(fds[0]);
    return absl::UnavailableError(Cat("cannot start ", options.binary, ": ", std::strerror(rc)));
  }
  source->pid_ = pid;
  source->socket_ = fds[0];
  absl::StatusOr<std::string> hello = source->Request("");
  if (!hello.ok()) return hello.status();
  absl::StatusOr<SourceInfo> info = protocol::ParseHello(*hello);
  if (!info.ok()) {
    return absl::UnavailableError(Cat(options.binary, " does not serve bench blocks (", info.status().message(),
                                               "); a build without bench-serve cannot be compared interleaved"));
  }
  source->info_ = *std::move(info);
  return source;
}

ProcessBlockSource::~ProcessBlockSource() {
  if (socket_ >= 0) {
    const std::string quit = protocol::RequestLine(protocol::Op::kQuit, {}, {}) + "\n";
    (void)send(socket_, quit.data(), quit.size(), MSG_NOSIGNAL);
    close(socket_);
  }
  if (pid_ > 0) {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (!stderr_path_.empty()) std::remove(stderr_path_.c_str());
}

absl::Status ProcessBlockSource::ChildGone(std::string_view what) {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (socket_ >= 0) close(socket_);
  socket_ = -1;
  return absl::UnavailableError(Cat("bench-serve ", what, "; its stderr: ", ReadTail(stderr_path_)));
}

// Sends `line` (nothing when empty: the hello is read) and reads one reply line.
absl::StatusOr<std::string> ProcessBlockSource::Request(const std::string& line) {
  if (socket_ < 0) return absl::UnavailableError("bench-serve is gone");
  if (!line.empty()) {
    const std::string out = line + "\n";
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = send(socket_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ChildGone("exited");
      sent += static_cast<size_t>(n);
    }
  }
  for (;;) {
    const size_t newline = received_.find('\n');
    if (newline != std::string::npos) {
      std::string reply = received_.substr(0, newline);
      received_.erase(0, newline + 1);
      return reply;
    }
    pollfd p{socket_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(reply_timeout_seconds_ * 1000));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      absl::Status gone = ChildGone(Cat("did not answer within ", reply_timeout_seconds_, " s and was killed"));
      return absl::DeadlineExceededError(gone.message());
    }
    char buffer[4096];
    const ssize_t n = recv(socket_, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ChildGone("exited");
    received_.append(buffer, static_cast<size_t>(n));
  }
}

absl::StatusOr<SourceInfo> ProcessBlockSource::Describe() { return info_; }

absl::StatusOr<bool> ProcessBlockSource::CanRun(const AttentionProblem& problem, const KernelConfig& config,
                                                std::string* why) {
  return CanRunOn(0, problem, config, why);
}

absl::StatusOr<CellCheck> ProcessBlockSource::Verify(const AttentionProblem& problem, const KernelConfig& config) {
  return VerifyOn(0, problem, config);
}

absl::StatusOr<SampleBlock> ProcessBlockSource::MeasureBlock(const AttentionProblem& problem,
                                                             const KernelConfig& config) {
  return MeasureBlockOn(0, problem, config);
}

absl::StatusOr<bool> ProcessBlockSource::CanRunOn(int side, const AttentionProblem& problem,
                                                  const KernelConfig& config, std::string* why) {
  absl::StatusOr<std::string> reply = Request(protocol::RequestLine(protocol::Op::kCanRun, problem, config, side));
  if (!reply.ok()) return reply.status();
  return protocol::ParseCanRun(*reply, why);
}

absl::StatusOr<CellCheck> ProcessBlockSource::VerifyOn(int side, const AttentionProblem& problem,
                                                       const KernelConfig& config) {
  absl::StatusOr<std::string> reply = Request(protocol::RequestLine(protocol::Op::kVerify, problem, config, side));
  if (!reply.ok()) return reply.status();
  return protocol::ParseCheck(*reply);
}

absl::StatusOr<SampleBlock> ProcessBlockSource::MeasureBlockOn(int side, const AttentionProblem& problem,
                                                               const KernelConfig& config) {
  absl::StatusOr<std::string> reply = Request(protocol::RequestLine(protocol::Op::kBlock, problem, config, side));
  if (!reply.ok()) return reply.status();
  return protocol::ParseBlock(*reply);
}

// A side opened in the child: its requests name the side.
class ProcessBlockSource::Side final : public BlockSource {
 public:
  Side(ProcessBlockSource& child, int side, SourceInfo info) : child_(child), side_(side), info_(std::move(info)) {}
  absl::StatusOr<SourceInfo> Describe() override { return info_; }
  absl::StatusOr<bool> CanRun(const AttentionProblem& problem, const KernelConfig& config, std::string* why) override {
    return child_.CanRunOn(side_, problem, config, why);
  }
  absl::StatusOr<CellCheck> Verify(const AttentionProblem& problem, const KernelConfig& config) override {
    return child_.VerifyOn(side_, problem, config);
  }
  absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& problem, const KernelConfig& config) override {
    return child_.MeasureBlockOn(side_, problem, config);
  }

 private:
  ProcessBlockSource& child_;
  int side_;
  SourceInfo info_;
};

absl::StatusOr<std::unique_ptr<BlockSource>> ProcessBlockSource::OpenSide(const std::string& library,
                                                                         const std::string& commit, bool planted) {
  absl::StatusOr<std::string> canonical = CanonicalCommit(commit);
  if (!canonical.ok()) return absl::InvalidArgumentError(Cat("a side's commit: ", canonical.status().message()));
  absl::StatusOr<std::string> reply = Request(protocol::OpenSideLine(library, *canonical, planted));
  if (!reply.ok()) return reply.status();
  absl::StatusOr<protocol::OpenedSide> side = protocol::ParseOpenSide(*reply);
  if (!side.ok()) {
    // The child answered and serves on: a refusal, not a failure of the child.
    if (side.status().message().find("unknown op") != std::string_view::npos) {
      return absl::UnimplementedError(Cat("this bench-serve (", info_.commit, ") cannot open sides"));
    }
    return absl::FailedPreconditionError(Cat("cannot open ", library, " as a side: ", side.status().message()));
  }
  SourceInfo info = info_;
  info.commit = *std::move(canonical);
  info.shared_scratch = side->shared_scratch;
  info.shared_workers = side->shared_workers;
  return std::unique_ptr<BlockSource>(new Side(*this, side->side, std::move(info)));
}

}  // namespace fusetune::regress
