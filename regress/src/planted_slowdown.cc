#include "fusetune/regress/planted_slowdown.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"

namespace fusetune::regress {

absl::StatusOr<PlantedSlowdown> ParsePlantedSlowdown(std::string_view spec) {
  // The last '=' splits: keys hold no '=', so a substring that does is still taken whole.
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos) {
    return absl::InvalidArgumentError(
        Cat("planted slowdown \"", spec, "\": expected SUBSTRING=FRACTION (e.g. fused=0.03 or fused=3%)"));
  }
  PlantedSlowdown slowdown;
  slowdown.cell_substring = std::string(spec.substr(0, eq));
  std::string_view number = spec.substr(eq + 1);
  double scale = 1;
  if (!number.empty() && number.back() == '%') {
    number.remove_suffix(1);
    scale = 0.01;
  }
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(ToAbsl(number), &value)) {
    return absl::InvalidArgumentError(
        Cat("planted slowdown \"", spec, "\": \"", spec.substr(eq + 1), "\" is not a number"));
  }
  slowdown.fraction = value * scale;
  // Written so that NaN fails too.
  if (!(slowdown.fraction > -0.5 && slowdown.fraction <= 10)) {
    return absl::InvalidArgumentError(Cat("planted slowdown \"", spec, "\": the fraction ",
                                          slowdown.fraction, " is outside (-0.5, 10]"));
  }
  return slowdown;
}

PlantedSlowdownBackend::PlantedSlowdownBackend(std::unique_ptr<Backend> inner,
                                               std::vector<PlantedSlowdown> slowdowns)
    : owned_(std::move(inner)), inner_(owned_.get()), slowdowns_(std::move(slowdowns)) {}

PlantedSlowdownBackend::PlantedSlowdownBackend(Backend& inner, std::vector<PlantedSlowdown> slowdowns)
    : inner_(&inner), slowdowns_(std::move(slowdowns)) {}

DeviceInfo PlantedSlowdownBackend::Describe() const { return inner_->Describe(); }

absl::Status PlantedSlowdownBackend::CanImplement(const AttentionProblem& problem,
                                                  const KernelConfig& config) const {
  return inner_->CanImplement(problem, config);
}

std::vector<KernelConfig> PlantedSlowdownBackend::CandidateConfigs(const AttentionProblem& problem) const {
  return inner_->CandidateConfigs(problem);
}

absl::Status PlantedSlowdownBackend::Run(const AttentionProblem& problem, const KernelConfig& config,
                                         const AttentionBuffers& buffers) {
  return inner_->Run(problem, config, buffers);
}

double PlantedSlowdownBackend::FactorFor(const AttentionProblem& problem, const KernelConfig& config) const {
  if (slowdowns_.empty()) return 1;
  const std::string cell = absl::StrCat(problem.Key(), " ", config.Key());
  for (const PlantedSlowdown& slowdown : slowdowns_) {
    if (cell.find(slowdown.cell_substring) != std::string::npos) return 1 + slowdown.fraction;
  }
  return 1;
}

absl::StatusOr<TimingSamples> PlantedSlowdownBackend::Time(const AttentionProblem& problem,
                                                           const KernelConfig& config,
                                                           const AttentionBuffers& buffers,
                                                           const TimingOptions& options) {
  absl::StatusOr<TimingSamples> samples = inner_->Time(problem, config, buffers, options);
  if (!samples.ok()) return samples;
  const double factor = FactorFor(problem, config);
  if (factor != 1) {
    for (double& micros : samples->micros) micros *= factor;
  }
  return samples;
}

absl::StatusOr<size_t> PlantedSlowdownBackend::ScratchBytes(const AttentionProblem& problem,
                                                            const KernelConfig& config) const {
  return inner_->ScratchBytes(problem, config);
}

absl::Status PlantedSlowdownBackend::UseScratchArena(void* base, size_t bytes) {
  return inner_->UseScratchArena(base, bytes);
}

absl::StatusOr<WorkerPool> PlantedSlowdownBackend::LendWorkers() { return inner_->LendWorkers(); }

bool PlantedSlowdownBackend::TakesGraphTiming() const { return inner_->TakesGraphTiming(); }

absl::Status PlantedSlowdownBackend::UseWorkers(const WorkerPool* pool) { return inner_->UseWorkers(pool); }

DeviceState PlantedSlowdownBackend::CurrentDeviceState() const { return inner_->CurrentDeviceState(); }

absl::StatusOr<DeviceMemory> PlantedSlowdownBackend::Allocate(size_t bytes) { return inner_->Allocate(bytes); }

absl::Status PlantedSlowdownBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  return inner_->CopyToDevice(dst, src, bytes);
}

absl::Status PlantedSlowdownBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  return inner_->CopyToHost(dst, src, bytes);
}

absl::Status PlantedSlowdownBackend::Fill(void* dst, uint8_t value, size_t bytes) {
  return inner_->Fill(dst, value, bytes);
}

void PlantedSlowdownBackend::SetStopToken(StopToken stop) {
  inner_->SetStopToken(stop);
  Backend::SetStopToken(std::move(stop));
}

}  // namespace fusetune::regress
