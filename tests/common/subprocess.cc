#include "subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace fusetune::testing {
namespace {

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;  // parent (or -1)
  // Child: only async-signal-safe calls until exec.
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0 || err < 0) _exit(127);
  dup2(out, 1);
  dup2(err, 2);
  close(out);
  close(err);
  execv(args[0], args.data());
  _exit(127);
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CommandResult RunCommand(const std::vector<std::string>& argv, double timeout_seconds) {
  TempDir dir;
  Subprocess p(argv, dir.path());
  CommandResult r;
  if (!p.started()) return r;
  std::optional<int> code = p.Wait(timeout_seconds);
  if (!code.has_value()) {
    p.Signal(SIGKILL);
    code = p.Wait(10);
    r.err = "timed out";
  }
  r.exit_code = code.value_or(-1);
  r.out = p.Stdout();
  r.err = p.Stderr() + r.err;
  return r;
}

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::string& log_dir) {
  static int counter = 0;
  const std::string base = log_dir + "/proc" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  out_path_ = base + ".out";
  err_path_ = base + ".err";
  pid_ = Spawn(argv, out_path_, err_path_);
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_.has_value()) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !status_.has_value()) kill(pid_, signal);
}

std::optional<int> Subprocess::Poll() {
  if (status_.has_value() || pid_ <= 0) return status_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = DecodeStatus(status);
  return status_;
}

std::optional<int> Subprocess::Wait(double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (!Poll().has_value()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

std::string Subprocess::Stdout() const { return ReadFile(out_path_); }
std::string Subprocess::Stderr() const { return ReadFile(err_path_); }

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fusetune-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace fusetune::testing
