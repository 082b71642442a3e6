#include "sweep_progress.h"

#include <algorithm>

#include "fmt/format.h"

namespace fusetune::cli {

std::string ProgressLine(const SweepActivity& a, double seconds_in_step) {
  std::string what;
  if (a.step == "screen") {
    what = fmt::format("screening {} configs: {} of {} done, now {} ({:.0f} s in it)", a.variant, a.configs_done,
                       a.configs_in_space, a.config_key, seconds_in_step);
  } else {
    what = fmt::format("{} rounds of {} configs ({:.0f} s in them)", a.step, a.configs_in_space, seconds_in_step);
  }
  const double elapsed = a.problem_seconds + seconds_in_step;
  std::string budget = a.budget_seconds > 0
                           ? fmt::format("{:.0f} s of its {:g} s budget left", std::max(0.0, a.budget_seconds - elapsed),
                                         a.budget_seconds)
                           : "no time budget";
  return fmt::format("... [{}/{}] {}: {}; {} trials, {:.0f} s into the problem, {}", a.problem_index + 1,
                     a.problem_count, a.problem_key, what, a.trials, elapsed, budget);
}

SweepProgressTicker::SweepProgressTicker(std::FILE* out, std::chrono::duration<double> interval)
    : out_(out), interval_(interval), thread_([this] { Loop(); }) {}

SweepProgressTicker::~SweepProgressTicker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SweepProgressTicker::Update(const SweepActivity& activity) {
  bool new_problem = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    new_problem = !latest_ || latest_->problem_index != activity.problem_index;
    if (new_problem) print_now_ = true;
    latest_ = activity;
    latest_at_ = std::chrono::steady_clock::now();
  }
  if (new_problem) wake_.notify_all();
}

void SweepProgressTicker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Woken by a new problem or at the interval: either way the latest activity is printed.
    // A new problem announced just before the stop is still printed.
    wake_.wait_for(lock, interval_, [this] { return stopping_ || print_now_; });
    if (stopping_ && !print_now_) break;
    print_now_ = false;
    if (!latest_) continue;
    const double in_step = std::chrono::duration<double>(std::chrono::steady_clock::now() - latest_at_).count();
    const std::string line = ProgressLine(*latest_, in_step);
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
}

}  // namespace fusetune::cli
