// Test doubles for the bench's tests: Backends that compute attention with the real CPU
// backend (so verification is real) but whose Time() reports synthetic samples: fixed ones, or
// (NoiseBackend) a seeded noise model of a GPU, with the simulated device whose state two such
// backends share. Not part of the library.
//
// The noise model, per block (one Time call) of `repeats` launches of a cell with steady
// latency t:
//   sample_i = t * drift * interference * exp(launch_sigma * Z_i)
//   - drift: the device's speed, shared by every backend on the device and moving one step
//     per block measured on it, whichever backend measured it (clocks following the power
//     cap and temperature): exp(x), x an Ornstein–Uhlenbeck walk with stationary standard
//     deviation drift_sd and correlation length drift_blocks blocks;
//   - interference: with probability outlier_probability, the whole block is slowed by
//     1 + U(outlier_min, outlier_max) (another process on the device);
//   - Z_i standard normal per launch.
// A planted slowdown is the candidate's NoiseBackend wrapped in a PlantedSlowdownBackend
// (fusetune/regress/planted_slowdown.h): the same decorator `bench-serve --plant-slowdown`
// puts around a real device.
//
// Thread-safety: none (a device and its backends belong to one test thread).
#ifndef FUSETUNE_REGRESS_SRC_TESTING_NOISE_BACKEND_H_
#define FUSETUNE_REGRESS_SRC_TESTING_NOISE_BACKEND_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/cpu_backend.h"

namespace fusetune::regress::testing {

struct NoiseModel {
  double launch_sigma = 0.03;  // per launch: a median of 20 varies by about 0.85 %
  double drift_sd = 0.02;      // the device's speed wanders about +-2 % ...
  double drift_blocks = 400;   //   ... over a few hundred blocks
  double outlier_probability = 0.05;
  double outlier_min = 0.02;
  double outlier_max = 0.10;
};

// One simulated device. Every backend on it draws from its one generator, in call order, so
// a test is deterministic for a seed and a call sequence.
class NoiseDevice {
 public:
  NoiseDevice(NoiseModel model, uint64_t seed) : model_(model), rng_(seed) {
    // Start the walk from its stationary distribution, not from the mean.
    log_drift_ = model_.drift_sd * normal_(rng_);
  }

  // The samples of one block of `repeats` launches at steady latency `latency_us`; moves the
  // drift one step afterwards.
  std::vector<double> Block(double latency_us, int repeats) {
    double factor = latency_us * std::exp(log_drift_);
    if (uniform_(rng_) < model_.outlier_probability) {
      factor *= 1 + model_.outlier_min + (model_.outlier_max - model_.outlier_min) * uniform_(rng_);
    }
    std::vector<double> micros;
    micros.reserve(repeats);
    for (int i = 0; i < repeats; ++i) micros.push_back(factor * std::exp(model_.launch_sigma * normal_(rng_)));
    Step();
    ++blocks_;
    return micros;
  }

  // The current speed factor (1 = nominal; 1.02 = 2 % slower).
  double drift() const { return std::exp(log_drift_); }
  int64_t blocks() const { return blocks_; }
  const NoiseModel& model() const { return model_; }

 private:
  void Step() {
    // x' = rho x + sd sqrt(1 - rho^2) Z keeps x's standard deviation at drift_sd.
    const double rho = std::exp(-1.0 / model_.drift_blocks);
    log_drift_ = rho * log_drift_ + model_.drift_sd * std::sqrt(1 - rho * rho) * normal_(rng_);
  }

  NoiseModel model_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  double log_drift_ = 0;
  int64_t blocks_ = 0;
};

// The CPU backend's results with timing from elsewhere: every call goes to a real CPU backend,
// except that Time() runs the kernel once (so the output is written and the errors are Run's)
// and reports Samples() instead of the clock's.
class SyntheticTimeBackend : public Backend {
 public:
  int calls = 0;  // calls that reached the CPU backend (Time counts one)

  DeviceInfo Describe() const override {
    DeviceInfo info = cpu_->Describe();
    info.name = name_;
    return info;
  }
  absl::Status CanImplement(const AttentionProblem& p, const KernelConfig& c) const override {
    return cpu_->CanImplement(p, c);
  }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& p) const override {
    return cpu_->CandidateConfigs(p);
  }
  absl::Status Run(const AttentionProblem& p, const KernelConfig& c, const AttentionBuffers& b) override {
    ++calls;
    return cpu_->Run(p, c, b);
  }
  absl::StatusOr<TimingSamples> Time(const AttentionProblem& p, const KernelConfig& c,
                                     const AttentionBuffers& b, const TimingOptions& o) override {
    if (o.repeats < 1) return absl::InvalidArgumentError("timing options: repeats must be >= 1");
    if (auto s = Run(p, c, b); !s.ok()) return s;
    return Samples(p, c, o);
  }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    ++calls;
    return cpu_->Allocate(bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    ++calls;
    return cpu_->CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    ++calls;
    return cpu_->CopyToHost(dst, src, bytes);
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override {
    ++calls;
    return cpu_->Fill(dst, value, bytes);
  }
  void SetStopToken(StopToken stop) override { cpu_->SetStopToken(std::move(stop)); }

 protected:
  // `name` replaces the CPU's model name in Describe().
  explicit SyntheticTimeBackend(std::string name) : name_(std::move(name)) {}
  // The samples of one Time() call, after its kernel ran.
  virtual TimingSamples Samples(const AttentionProblem& p, const KernelConfig& c, const TimingOptions& o) = 0;

 private:
  std::string name_;
  std::unique_ptr<Backend> cpu_ = CreateCpuBackend();
};

// The CPU backend's results with the device's timing. `device` must outlive the backend.
class NoiseBackend : public SyntheticTimeBackend {
 public:
  explicit NoiseBackend(NoiseDevice& device) : SyntheticTimeBackend("noise model"), device_(device) {}

  // A cell's steady latency: 50..150 us, fixed by the cell's name (FNV-1a), so every cell of
  // a suite has its own scale and both builds agree on it.
  static double LatencyUs(const AttentionProblem& problem, const KernelConfig& config) {
    uint64_t hash = 14695981039346656037ull;
    for (char c : problem.Key() + " " + config.Key()) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    return 50.0 + static_cast<double>(hash % 1001) / 10.0;
  }

 protected:
  TimingSamples Samples(const AttentionProblem& p, const KernelConfig& c, const TimingOptions& o) override {
    TimingSamples samples;
    samples.micros = device_.Block(LatencyUs(p, c), o.repeats);
    return samples;
  }

 private:
  NoiseDevice& device_;
};

}  // namespace fusetune::regress::testing

#endif  // FUSETUNE_REGRESS_SRC_TESTING_NOISE_BACKEND_H_
