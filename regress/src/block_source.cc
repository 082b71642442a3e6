// RunnerBlockSource (in this process) and ServeBlocks (the child side of ProcessBlockSource).
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"
#include "fusetune/regress/block_source.h"
#include "fusetune/regress/suite.h"
#include "fusetune/kernels/reference.h"
#include "nlohmann/json.hpp"
#include "protocol.h"

namespace fusetune::regress {

using fusetune::Cat;
namespace {

std::string CellName(const AttentionProblem& problem, const KernelConfig& config) {
  return Cat(problem.Key(), " ", config.Key());
}

// Pins the calling thread to one CPU while alive (cpu < 0: does nothing) and restores its
// previous affinity after.
class PinnedThread {
 public:
  explicit PinnedThread(int cpu) {
    if (cpu < 0) return;
    if (cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof saved_, &saved_) != 0) {
      status_ = absl::InvalidArgumentError(Cat("cannot pin to CPU ", cpu));
      return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
      status_ = absl::InvalidArgumentError(Cat("cannot pin to CPU ", cpu, ": ", std::strerror(errno)));
      return;
    }
    pinned_ = true;
  }
  ~PinnedThread() {
    if (pinned_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  const absl::Status& status() const { return status_; }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
  absl::Status status_;
};

}  // namespace

RunnerBlockSource::RunnerBlockSource(Backend& backend, std::string commit, const TimingOptions& block,
                                     RunnerOptions runner_options, int timing_cpu)
    : backend_(backend),
      commit_(std::move(commit)),
      block_(block),
      runner_(backend, [&] {
        runner_options.timing = block;
        return runner_options;
      }()),
      timing_cpu_(timing_cpu) {}

RunnerBlockSource::~RunnerBlockSource() = default;

absl::StatusOr<SourceInfo> RunnerBlockSource::Describe() {
  SourceInfo info;
  info.commit = commit_;
  info.device = backend_.Describe();
  info.environment = info.device.driver;
  return info;
}

absl::StatusOr<bool> RunnerBlockSource::CanRun(const AttentionProblem& problem, const KernelConfig& config,
                                               std::string* why) {
  absl::Status s = problem.Validate();
  if (s.ok()) s = config.Validate();
  if (s.ok()) s = backend_.CanImplement(problem, config);
  if (!s.ok() && why != nullptr) *why = std::string(s.ToString());
  return s.ok();
}

absl::StatusOr<CellCheck> RunnerBlockSource::Verify(const AttentionProblem& problem, const KernelConfig& config) {
  const Trial t = runner_.Measure(problem, config, block_, /*run_id=*/0, /*attempt=*/0);
  CellCheck check;
  check.outcome = t.outcome;
  check.message = t.message;
  check.max_abs_error = t.max_abs_error;
  check.max_rel_error = t.max_rel_error;
  check.tolerance = ToleranceFor(config.precision, problem.dtype);
  const std::string name = CellName(problem, config);
  if (t.outcome == TrialOutcome::kOk && std::find(verified_.begin(), verified_.end(), name) == verified_.end()) {
    verified_.push_back(name);
  }
  return check;
}

absl::StatusOr<SampleBlock> RunnerBlockSource::MeasureBlock(const AttentionProblem& problem,
                                                            const KernelConfig& config) {
  const std::string name = CellName(problem, config);
  if (std::find(verified_.begin(), verified_.end(), name) == verified_.end()) {
    return absl::FailedPreconditionError(Cat("cell ", name, " was not verified on this source"));
  }
  const KernelConfig configs[] = {config};
  PinnedThread pinned(timing_cpu_);
  if (!pinned.status().ok()) return pinned.status();
  std::vector<Trial> trials = runner_.MeasureRounds(problem, configs, /*rounds=*/1, block_,
                                                    /*order_seed=*/++blocks_measured_, /*run_id=*/0,
                                                    TrialStage::kFinal, /*attempt=*/0);
  const Trial& t = trials.front();
  if (t.outcome != TrialOutcome::kOk || t.blocks.empty()) {
    return absl::InternalError(Cat("cell ", name, " failed while timing (", TrialOutcomeName(t.outcome),
                                            "): ", t.message));
  }
  return t.blocks.front();
}

absl::Status ServeBlocks(BlockSource& source, std::FILE* in, std::FILE* out) {
  auto reply = [out](const nlohmann::json& j) {
    const std::string line = j.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), out);
    std::fflush(out);
  };
  absl::StatusOr<SourceInfo> info = source.Describe();
  if (!info.ok()) {
    reply({{"error", std::string(info.status().ToString())}});
    return info.status();
  }
  reply(protocol::HelloToJson(*info));
  std::string line;
  for (;;) {
    line.clear();
    int c;
    while ((c = std::fgetc(in)) != EOF && c != '\n') line.push_back(static_cast<char>(c));
    if (c == EOF && line.empty()) return absl::OkStatus();
    if (line.empty()) continue;
    absl::StatusOr<protocol::Request> request = protocol::ParseRequest(line);
    if (!request.ok()) {
      reply({{"error", std::string(request.status().message())}});
      continue;
    }
    if (request->op == protocol::Op::kQuit) return absl::OkStatus();
    if (request->op == protocol::Op::kCanRun) {
      std::string why;
      absl::StatusOr<bool> can = source.CanRun(request->problem, request->config, &why);
      if (!can.ok()) {
        reply({{"error", std::string(can.status().ToString())}, {"fatal", true}});
        return can.status();
      }
      reply({{"can_run", *can}, {"why", why}});
      continue;
    }
    if (request->op == protocol::Op::kVerify) {
      absl::StatusOr<CellCheck> check = source.Verify(request->problem, request->config);
      if (!check.ok()) {
        reply({{"error", std::string(check.status().ToString())}, {"fatal", true}});
        return check.status();
      }
      reply(protocol::CheckToJson(*check));
      continue;
    }
    absl::StatusOr<SampleBlock> block = source.MeasureBlock(request->problem, request->config);
    if (!block.ok()) {
      reply({{"error", std::string(block.status().ToString())}, {"fatal", true}});
      return block.status();
    }
    reply(protocol::BlockToJson(*block));
  }
}

}  // namespace fusetune::regress
