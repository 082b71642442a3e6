// RunnerBlockSource (in this process) and ServeBlocks (the child side of ProcessBlockSource).
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <optional>
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

// What the Runner of a RunnerBlockSource calls: the kernels of the selected side, and always
// the source's own backend for memory, so every side runs on the inputs the Runner made.
class RunnerBlockSource::KernelSwitch final : public Backend {
 public:
  explicit KernelSwitch(Backend& own) : own_(own) { kernels_.push_back(&own); }

  void Select(size_t side) { selected_ = side; }
  size_t Add(std::unique_ptr<Backend> kernels) {
    kernels->SetStopToken(stop_);
    kernels_.push_back(kernels.get());
    owned_.push_back(std::move(kernels));
    // All sides or none: a side on its own scratch or threads beside others on shared ones
    // would differ from them in exactly what sharing removes. Asking (UseScratchArena(nullptr,
    // 0), UseWorkers(nullptr)) also puts every side back on its own until the next launch.
    shares_scratch_ = true;
    absl::StatusOr<WorkerPool> workers = own_.LendWorkers();
    bool shares_workers = workers.ok();
    for (Backend* k : kernels_) {
      shares_scratch_ = k->UseScratchArena(nullptr, 0).ok() && shares_scratch_;
      shares_workers = k->UseWorkers(nullptr).ok() && shares_workers;
    }
    lent_workers_.reset();
    if (shares_workers) lent_workers_ = *workers;
    return kernels_.size() - 1;
  }
  // Whether the sides share the arena and the own backend's worker threads: once sides exist,
  // when every side's kernels take them.
  bool SharesScratch() const { return shares_scratch_; }
  bool SharesWorkers() const { return lent_workers_.has_value(); }

  DeviceInfo Describe() const override { return Selected().Describe(); }
  absl::Status CanImplement(const AttentionProblem& problem, const KernelConfig& config) const override {
    return Selected().CanImplement(problem, config);
  }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const override {
    return Selected().CandidateConfigs(problem);
  }
  bool TakesGraphTiming() const override { return Selected().TakesGraphTiming(); }
  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = LendToSelected(problem, config); !s.ok()) return s;
    return Selected().Run(problem, config, buffers);
  }
  absl::Status RunOnStream(const AttentionProblem& problem, const KernelConfig& config,
                           const AttentionBuffers& buffers, const StreamLaunch& launch) override {
    if (auto s = LendToSelected(problem, config); !s.ok()) return s;
    return Selected().RunOnStream(problem, config, buffers, launch);
  }
  // A side whose timing reports no device state (another build's library: the C ABI returns
  // samples only) gets the own backend's reading around its whole call, warm-up included, so
  // that every side's blocks say the clock, power and throttle state they ran at.
  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers, const TimingOptions& options) override {
    if (auto s = LendToSelected(problem, config); !s.ok()) return s;
    const DeviceState before = &Selected() == &own_ ? DeviceState{} : own_.CurrentDeviceState();
    absl::StatusOr<TimingSamples> samples = Selected().Time(problem, config, buffers, options);
    if (samples.ok() && !samples->before.known && !samples->after.known && before.known) {
      samples->before = before;
      samples->after = own_.CurrentDeviceState();
      if (samples->sm_clock_mhz == 0) samples->sm_clock_mhz = samples->after.sm_clock_mhz;
    }
    return samples;
  }
  DeviceState CurrentDeviceState() const override { return own_.CurrentDeviceState(); }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override { return own_.Allocate(bytes); }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return own_.CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override { return own_.CopyToHost(dst, src, bytes); }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override { return own_.Fill(dst, value, bytes); }
  void SetStopToken(StopToken stop) override {
    for (Backend* b : kernels_) b->SetStopToken(stop);
    stop_ = std::move(stop);
  }

 private:
  Backend& Selected() const { return *kernels_[selected_]; }

  // Once sides exist and all take them, hands the selected side's kernels, before every call
  // that launches, the own backend's worker threads and the shared arena, grown to what the
  // call needs (to at least twice its size, so that a suite's cells grow it a few times at
  // most): growing moves it for all sides alike, and each is pointed at it again before its
  // next launch. A pair the kernels cannot run is left to the call itself to refuse. A lone
  // backend keeps its own, as in the tuner.
  absl::Status LendToSelected(const AttentionProblem& problem, const KernelConfig& config) {
    Backend& kernels = Selected();
    if (lent_workers_) {
      if (auto s = kernels.UseWorkers(&*lent_workers_); !s.ok()) return s;
    }
    if (!SharesScratch()) return absl::OkStatus();
    absl::StatusOr<size_t> need = kernels.ScratchBytes(problem, config);
    // Then the call refuses the pair itself; never with an arena that may have moved since.
    if (!need.ok()) return kernels.UseScratchArena(nullptr, 0);
    if (*need > arena_.bytes()) {
      absl::StatusOr<DeviceMemory> grown = own_.Allocate(std::max(*need, 2 * arena_.bytes()));
      if (!grown.ok()) return grown.status();
      arena_ = *std::move(grown);
    }
    return kernels.UseScratchArena(arena_.data(), arena_.bytes());
  }

  Backend& own_;
  std::vector<Backend*> kernels_;  // [0] = own_
  DeviceMemory arena_;             // the sides' scratch (LendToSelected), freed after the kernels using it
  std::vector<std::unique_ptr<Backend>> owned_;
  size_t selected_ = 0;
  StopToken stop_;
  // Set by Add (all sides or none): whether the sides share the arena, and the own backend's
  // threads they share.
  bool shares_scratch_ = false;
  std::optional<WorkerPool> lent_workers_;
};

// An added side, as a source of its own.
class RunnerBlockSource::Side final : public BlockSource {
 public:
  Side(RunnerBlockSource& parent, size_t index) : parent_(parent), index_(index) {}
  absl::StatusOr<SourceInfo> Describe() override { return parent_.DescribeSide(index_); }
  absl::StatusOr<bool> CanRun(const AttentionProblem& problem, const KernelConfig& config, std::string* why) override {
    return parent_.CanRunSide(index_, problem, config, why);
  }
  absl::StatusOr<CellCheck> Verify(const AttentionProblem& problem, const KernelConfig& config) override {
    return parent_.VerifySide(index_, problem, config);
  }
  absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& problem, const KernelConfig& config) override {
    return parent_.MeasureBlockSide(index_, problem, config);
  }

 private:
  RunnerBlockSource& parent_;
  size_t index_;
};

RunnerBlockSource::RunnerBlockSource(Backend& backend, std::string commit, const TimingOptions& block,
                                     RunnerOptions runner_options, int timing_cpu)
    : backend_(backend),
      kernels_(std::make_unique<KernelSwitch>(backend)),
      block_(block),
      runner_(*kernels_, [&] {
        runner_options.timing = block;
        return runner_options;
      }()),
      timing_cpu_(timing_cpu) {
  sides_.push_back(SideState{std::move(commit), {}, nullptr});
}

RunnerBlockSource::~RunnerBlockSource() = default;

absl::StatusOr<BlockSource*> RunnerBlockSource::AddSide(std::unique_ptr<Backend> kernels, std::string commit) {
  if (kernels == nullptr) return absl::InvalidArgumentError("a side needs a backend");
  const std::string own = backend_.Describe().DeviceClass();
  const std::string theirs = kernels->Describe().DeviceClass();
  if (own != theirs) {
    return absl::InvalidArgumentError(Cat("a side on ", theirs, " cannot share inputs made on ", own));
  }
  const size_t index = kernels_->Add(std::move(kernels));
  sides_.push_back(SideState{std::move(commit), {}, std::make_unique<Side>(*this, index)});
  return sides_.back().source.get();
}

BlockSource* RunnerBlockSource::side(size_t side) {
  if (side >= sides_.size()) return nullptr;
  return side == 0 ? static_cast<BlockSource*>(this) : sides_[side].source.get();
}

absl::StatusOr<SourceInfo> RunnerBlockSource::Describe() { return DescribeSide(0); }
absl::StatusOr<bool> RunnerBlockSource::CanRun(const AttentionProblem& problem, const KernelConfig& config,
                                               std::string* why) {
  return CanRunSide(0, problem, config, why);
}
absl::StatusOr<CellCheck> RunnerBlockSource::Verify(const AttentionProblem& problem, const KernelConfig& config) {
  return VerifySide(0, problem, config);
}
absl::StatusOr<SampleBlock> RunnerBlockSource::MeasureBlock(const AttentionProblem& problem,
                                                            const KernelConfig& config) {
  return MeasureBlockSide(0, problem, config);
}

absl::StatusOr<SourceInfo> RunnerBlockSource::DescribeSide(size_t side) {
  kernels_->Select(side);
  SourceInfo info;
  info.commit = sides_[side].commit;
  info.device = kernels_->Describe();
  info.environment = info.device.driver;
  info.shared_scratch = kernels_->SharesScratch();
  info.shared_workers = kernels_->SharesWorkers();
  return info;
}

absl::StatusOr<bool> RunnerBlockSource::CanRunSide(size_t side, const AttentionProblem& problem,
                                                   const KernelConfig& config, std::string* why) {
  kernels_->Select(side);
  absl::Status s = problem.Validate();
  if (s.ok()) s = config.Validate();
  if (s.ok()) s = kernels_->CanImplement(problem, config);
  if (!s.ok() && why != nullptr) *why = std::string(s.ToString());
  return s.ok();
}

absl::StatusOr<CellCheck> RunnerBlockSource::VerifySide(size_t side, const AttentionProblem& problem,
                                                        const KernelConfig& config) {
  kernels_->Select(side);
  const Trial t = runner_.Measure(problem, config, block_, /*run_id=*/0, /*attempt=*/0);
  CellCheck check;
  check.outcome = t.outcome;
  check.message = t.message;
  check.max_abs_error = t.max_abs_error;
  check.max_rel_error = t.max_rel_error;
  check.tolerance = ToleranceFor(config.precision, problem.dtype);
  const std::string name = CellName(problem, config);
  std::vector<std::string>& verified = sides_[side].verified;
  if (t.outcome == TrialOutcome::kOk && std::find(verified.begin(), verified.end(), name) == verified.end()) {
    verified.push_back(name);
  }
  return check;
}

absl::StatusOr<SampleBlock> RunnerBlockSource::MeasureBlockSide(size_t side, const AttentionProblem& problem,
                                                                const KernelConfig& config) {
  const std::string name = CellName(problem, config);
  const std::vector<std::string>& verified = sides_[side].verified;
  if (std::find(verified.begin(), verified.end(), name) == verified.end()) {
    return absl::FailedPreconditionError(Cat("cell ", name, " was not verified on this source"));
  }
  kernels_->Select(side);
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

absl::Status ServeBlocks(BlockSource& source, std::FILE* in, std::FILE* out, const SideOpener& open_side) {
  std::vector<BlockSource*> sides = {&source};
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
    if (request->op == protocol::Op::kOpenSide) {
      if (!open_side) {
        reply({{"error", "this bench-serve opens no sides"}});
        continue;
      }
      absl::StatusOr<BlockSource*> opened = open_side(request->library, request->commit, request->planted);
      if (!opened.ok()) {
        reply({{"error", std::string(opened.status().ToString())}});
        continue;
      }
      sides.push_back(*opened);
      absl::StatusOr<SourceInfo> opened_info = (*opened)->Describe();
      reply({{"side", sides.size() - 1},
             {"shared_scratch", opened_info.ok() && opened_info->shared_scratch},
             {"shared_workers", opened_info.ok() && opened_info->shared_workers}});
      continue;
    }
    if (static_cast<size_t>(request->side) >= sides.size()) {
      reply({{"error", Cat("no side ", request->side, " (", sides.size(), " open)")}});
      continue;
    }
    BlockSource& served = *sides[static_cast<size_t>(request->side)];
    if (request->op == protocol::Op::kCanRun) {
      std::string why;
      absl::StatusOr<bool> can = served.CanRun(request->problem, request->config, &why);
      if (!can.ok()) {
        reply({{"error", std::string(can.status().ToString())}, {"fatal", true}});
        return can.status();
      }
      reply({{"can_run", *can}, {"why", why}});
      continue;
    }
    if (request->op == protocol::Op::kVerify) {
      absl::StatusOr<CellCheck> check = served.Verify(request->problem, request->config);
      if (!check.ok()) {
        reply({{"error", std::string(check.status().ToString())}, {"fatal", true}});
        return check.status();
      }
      reply(protocol::CheckToJson(*check));
      continue;
    }
    absl::StatusOr<SampleBlock> block = served.MeasureBlock(request->problem, request->config);
    if (!block.ok()) {
      reply({{"error", std::string(block.status().ToString())}, {"fatal", true}});
      return block.status();
    }
    reply(protocol::BlockToJson(*block));
  }
}

}  // namespace fusetune::regress
