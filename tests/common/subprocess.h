// Starting the real fusetune binaries from end-to-end tests: run to completion with output
// captured, or start in the background and signal/wait. Test support only.
//
// Thread-safety: a Subprocess is not thread-safe; RunCommand may be called from any thread.
#ifndef FUSETUNE_TESTS_COMMON_SUBPROCESS_H_
#define FUSETUNE_TESTS_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fusetune::testing {

struct CommandResult {
  int exit_code = -1;   // the exit status, or 128 + signal when killed, -1 if it could not start
  std::string out;      // stdout
  std::string err;      // stderr
};

// Runs argv[0] with argv, waits at most `timeout_seconds` (then SIGKILLs it and returns
// exit_code 128 + 9 with "timed out" appended to err).
CommandResult RunCommand(const std::vector<std::string>& argv, double timeout_seconds = 120);

// A child process running in the background, stdout/stderr to files in `log_dir`.
class Subprocess {
 public:
  // Starts argv; check started() afterwards.
  Subprocess(const std::vector<std::string>& argv, const std::string& log_dir);
  ~Subprocess();  // SIGKILLs and reaps the child if still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Sends `signal` (no-op once reaped).
  void Signal(int signal);
  // nullopt while running; else the exit status (128 + signal when killed). Does not block.
  std::optional<int> Poll();
  // Waits at most timeout_seconds; nullopt when still running.
  std::optional<int> Wait(double timeout_seconds);
  std::string Stdout() const;
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_path_, err_path_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);

// Polls `pred` every 50 ms until it holds or `seconds` pass; its last answer.
template <typename Pred>
bool WaitFor(Pred pred, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace fusetune::testing

#endif  // FUSETUNE_TESTS_COMMON_SUBPROCESS_H_
