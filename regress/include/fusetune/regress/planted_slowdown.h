// A planted slowdown: a Backend decorator that reports chosen cells slower by a set fraction,
// for measuring what the regression method detects on a device's real noise (the samples are
// the device's own, multiplied by 1 + fraction, so the effect is exact and the noise is real).
// Used by `fusetune bench-serve --plant-slowdown` and by the method's tests; never by a tune.
//
// Thread-safety: as the wrapped backend.
#ifndef FUSETUNE_REGRESS_PLANTED_SLOWDOWN_H_
#define FUSETUNE_REGRESS_PLANTED_SLOWDOWN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"

namespace fusetune::regress {

struct PlantedSlowdown {
  // Cells whose "<problem key> <config key>" contains this text (empty: every cell).
  std::string cell_substring;
  double fraction = 0;  // 0.03 = 3 % slower; in (-0.5, 10]
};

// Parses "SUBSTRING=FRACTION" (e.g. "q4096/k4096/d128/causal1/bf16 fused=0.03"); the fraction
// may end in '%' ("3%"). InvalidArgument for a missing '=', a bad number or one out of range.
absl::StatusOr<PlantedSlowdown> ParsePlantedSlowdown(std::string_view spec);

// Forwards everything to `inner`, except that Time() multiplies the samples of matching cells
// by 1 + fraction (the first matching slowdown wins).
class PlantedSlowdownBackend : public Backend {
 public:
  PlantedSlowdownBackend(std::unique_ptr<Backend> inner, std::vector<PlantedSlowdown> slowdowns);
  // Decorates a backend it does not own (`inner` must outlive it), e.g. one that an unslowed
  // source measures too, so that both share one device context.
  PlantedSlowdownBackend(Backend& inner, std::vector<PlantedSlowdown> slowdowns);

  DeviceInfo Describe() const override;
  absl::Status CanImplement(const AttentionProblem& problem, const KernelConfig& config) const override;
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const override;
  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override;
  // The inner backend's samples, each multiplied by 1 + fraction of the first matching
  // slowdown (unchanged when none matches); the device state is the inner one's. Errors are
  // the inner backend's.
  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers,
                                     const TimingOptions& options) override;
  // The inner backend's: a planted side lays its scratch out and runs its tasks as the unplanted
  // one it is compared with.
  absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& problem, const KernelConfig& config) const override;
  absl::Status UseScratchArena(void* base, size_t bytes) override;
  absl::StatusOr<WorkerPool> LendWorkers() override;
  absl::Status UseWorkers(const WorkerPool* pool) override;
  DeviceState CurrentDeviceState() const override;
  bool TakesGraphTiming() const override;  // the inner backend's (Time passes the options on)
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override;
  void SetStopToken(StopToken stop) override;  // the inner backend's

  // The factor Time() applies to (problem, config): 1 + fraction of the first matching
  // slowdown, else 1.
  double FactorFor(const AttentionProblem& problem, const KernelConfig& config) const;

 private:
  std::unique_ptr<Backend> owned_;  // null when borrowed
  Backend* inner_;
  std::vector<PlantedSlowdown> slowdowns_;
};

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_PLANTED_SLOWDOWN_H_
