// Test doubles for the tuner's tests: a Backend whose memory is host memory and whose Run
// computes attention with the fp64 reference (a paged problem's K/V gathered through its
// block table first), with switches that make it misbehave in the
// ways the Runner must catch. Not part of the library.
#ifndef FUSETUNE_TUNER_SRC_TESTING_HOST_BACKEND_H_
#define FUSETUNE_TUNER_SRC_TESTING_HOST_BACKEND_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"

namespace fusetune::testing {

enum class Fault {
  kNone,
  kWrongValue,      // one output element off by 5% of its magnitude (plus 1e-2)
  kNan,             // one output element NaN
  kUnwritten,       // the last output element is never written
  kRunError,        // Run() fails
  kCannotImplement, // CanImplement() says no
  kThrows,          // Run() throws
  kSlow,            // Run() sleeps 50 ms
  kInfKeysAsZero,   // Run() reads a -inf key element as 0 (a kernel that mishandles masked keys)
  kIgnoresBlockTable,  // Run() reads a paged pool's pages in order instead of through the table
  kLongLaunch,      // Run() runs until its stop token asks (a launch of minutes), 1 ms at a time
  kOutOfMemory,     // Run() throws std::bad_alloc
  kIgnoresKvScales, // Run() reads e4m3 K/V as their bare e4m3 values (every scale taken as 1)
};

class HostBackend : public Backend {
 public:
  Fault fault = Fault::kNone;
  int runs = 0;
  int uploads = 0;  // CopyToDevice calls
  std::vector<std::vector<int32_t>> block_tables;  // the table of each paged Run(), in order
  // Configs CanImplement refuses (besides kCannotImplement refusing all).
  std::function<bool(const KernelConfig&)> refuse = [](const KernelConfig&) { return false; };
  // What CandidateConfigs() offers; empty = the CPU backend's grid for two hardware threads
  // (all variants, tiles {16, 32, 64, 128}^2, threads {1, 2}, the storage dtype's precisions).
  // Not filtered by `refuse`, so a refusing double still hands the Runner configs to reject.
  std::vector<KernelConfig> candidates;
  // Median latency reported by Time(), per config key (default 100 us), and the spread.
  std::function<double(const KernelConfig&)> latency_us = [](const KernelConfig&) { return 100.0; };
  // The load of a shared host, for tests of how the tuner copes with it. When set, each Time()
  // block is scaled by seeded noise instead of the fixed +-2 % spread: every launch by
  // exp(jitter_sigma * Z), and with probability spell_probability the whole block by
  // 1 + U(spell_min, spell_max) (another process taking the cores for a while).
  struct Load {
    double jitter_sigma = 0.02;
    double spell_probability = 0.1;
    double spell_min = 0.05;
    double spell_max = 0.5;
    uint64_t seed = 1;
  };
  std::optional<Load> load;
  // Whether Time() honours TimingOptions::graph (as the CUDA backend can): its blocks then say
  // they were graphed.
  bool takes_graph_timing = false;
  // The first Allocate() sleeps this long: a problem whose inputs take long to prepare.
  std::chrono::milliseconds first_allocation_delay{0};

  DeviceInfo Describe() const override {
    DeviceInfo d;
    d.backend = "cpu";
    d.name = "test host";
    d.arch = "test";
    d.sm_count = 2;
    return d;
  }
  absl::Status CanImplement(const AttentionProblem& p, const KernelConfig& c) const override {
    if (fault == Fault::kCannotImplement || refuse(c)) return absl::UnimplementedError("test: cannot implement");
    if (auto s = p.Validate(); !s.ok()) return s;
    return c.Validate();
  }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& p) const override {
    std::vector<KernelConfig> out = candidates;
    if (!p.Validate().ok()) return {};
    if (out.empty()) {
      std::vector<Precision> precisions = {Precision::kFp32};
      if (p.dtype == DType::kFp16) precisions.push_back(Precision::kFp16);
      if (p.dtype == DType::kBf16) precisions.push_back(Precision::kBf16);
      for (Variant variant : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
        for (Precision precision : precisions) {
          for (int bm : {16, 32, 64, 128}) {
            for (int bs : {16, 32, 64, 128}) {
              for (int t : {1, 2}) {
                KernelConfig c;
                c.variant = variant;
                c.precision = precision;
                c.block_m = bm;
                c.block_s = bs;
                c.threads = t;
                out.push_back(c);
              }
            }
          }
        }
      }
    }
    std::sort(out.begin(), out.end(), ConfigOrderLess);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  // Called at the start of every Run() with the run's number (1-based), e.g. to set a
  // cancel flag while a launch is in flight.
  std::function<void(int)> on_run = [](int) {};

  absl::Status Run(const AttentionProblem& p, const KernelConfig& c, const AttentionBuffers& b) override {
    ++runs;
    on_run(runs);
    if (auto s = CanImplement(p, c); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;
    if (fault == Fault::kOutOfMemory) throw std::bad_alloc();
    if (fault == Fault::kLongLaunch) {
      // As the CPU backend between tiles: the token is read until it asks. A test that never
      // stops it fails after 60 s instead of hanging.
      for (int ms = 0; ms < 60000; ++ms) {
        if (auto s = stop_token().Check(); !s.ok()) return s;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return absl::InternalError("test: the long launch was never stopped");
    }
    if (fault == Fault::kRunError) return absl::InternalError("test: launch failed");
    if (fault == Fault::kThrows) throw std::runtime_error("test: thrown");
    if (fault == Fault::kSlow) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (auto s = ValidateBuffers(p, b); !s.ok()) return s;
    std::vector<float> q(p.QElements()), k(p.KVElements()), v(p.KVElements());
    DecodeTensor(p.dtype, b.q, q.size(), q.data());
    // K/V stored as e4m3: the bytes' values, with the scales (host memory here) for the reference.
    std::vector<float> k_scale, v_scale;
    if (p.is_kv_quantized()) {
      if (auto s = ValidateKvScales(p, b.k_scale, b.v_scale); !s.ok()) return s;
      for (auto [dst, src] : {std::pair{&k, b.k}, std::pair{&v, b.v}}) {
        const auto* bytes = static_cast<const uint8_t*>(src);
        for (size_t i = 0; i < dst->size(); ++i) (*dst)[i] = E4m3ToFloat(bytes[i]);
      }
      k_scale.assign(b.k_scale, b.k_scale + p.kv_heads);
      v_scale.assign(b.v_scale, b.v_scale + p.kv_heads);
      if (fault == Fault::kIgnoresKvScales) {
        std::fill(k_scale.begin(), k_scale.end(), 1.0f);
        std::fill(v_scale.begin(), v_scale.end(), 1.0f);
      }
    } else {
      DecodeTensor(p.dtype, b.k, k.size(), k.data());
      DecodeTensor(p.dtype, b.v, v.size(), v.data());
    }
    if (fault == Fault::kInfKeysAsZero) {
      for (float& x : k) {
        if (std::isinf(x)) x = 0;
      }
    }
    // A paged cache: the reference of the contiguous twin on K/V gathered through the table.
    if (p.is_paged()) {
      const int32_t* table = b.block_table;
      if (table == nullptr) return absl::InvalidArgumentError("test: a paged problem needs a block_table");
      block_tables.emplace_back(table, table + p.BlockTableEntries());
      std::vector<int32_t> read = block_tables.back();
      // A kernel that ignores the table reads the pool's pages in order.
      if (fault == Fault::kIgnoresBlockTable) {
        for (size_t i = 0; i < read.size(); ++i) read[i] = static_cast<int32_t>(i % p.PoolPages());
      }
      for (std::vector<float>* tensor : {&k, &v}) {
        absl::StatusOr<std::vector<float>> gathered = GatherPagedKV(p, *tensor, read);
        if (!gathered.ok()) return gathered.status();
        *tensor = *std::move(gathered);
      }
    }
    absl::StatusOr<std::vector<double>> ref =
        ReferenceAttention(p.Unpaged(), q, k, v, p.is_kv_quantized() ? KvScales{k_scale, v_scale} : KvScales{});
    if (!ref.ok()) return ref.status();
    std::vector<float> out(ref->begin(), ref->end());
    size_t write = out.size();
    const size_t victim = out.size() - 1;
    if (fault == Fault::kWrongValue) out[victim] += 0.05f * std::fabs(out[victim]) + 1e-2f;
    if (fault == Fault::kNan) out[victim] = std::numeric_limits<float>::quiet_NaN();
    if (fault == Fault::kUnwritten) write = out.size() - 1;
    std::vector<uint8_t> bytes(out.size() * DTypeBytes(p.dtype));
    EncodeTensor(p.dtype, out, bytes.data());
    std::memcpy(b.o, bytes.data(), write * DTypeBytes(p.dtype));
    return absl::OkStatus();
  }
  absl::StatusOr<TimingSamples> Time(const AttentionProblem& p, const KernelConfig& c,
                                     const AttentionBuffers& b, const TimingOptions& o) override {
    if (auto s = Run(p, c, b); !s.ok()) return s;
    TimingSamples t;
    t.graphed = o.graph && takes_graph_timing;
    const double base = latency_us(c);
    if (load) {
      if (!load_rng_) load_rng_.emplace(load->seed);
      std::uniform_real_distribution<double> uniform(0, 1);
      std::normal_distribution<double> normal(0, 1);
      double block = base;
      if (uniform(*load_rng_) < load->spell_probability) {
        block *= 1 + load->spell_min + (load->spell_max - load->spell_min) * uniform(*load_rng_);
      }
      for (int i = 0; i < o.repeats; ++i) t.micros.push_back(block * std::exp(load->jitter_sigma * normal(*load_rng_)));
      return t;
    }
    // Samples spread +-2% around the median: p10..p90 spread ~ 3.2% of it.
    for (int i = 0; i < o.repeats; ++i) t.micros.push_back(base * (0.98 + 0.04 * ((i * 7) % o.repeats) / std::max(1, o.repeats - 1)));
    return t;
  }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    if (!allocated_once_) std::this_thread::sleep_for(first_allocation_delay);
    allocated_once_ = true;
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return absl::ResourceExhaustedError("test: out of memory");
    return DeviceMemory(p, bytes, [](void* x) { std::free(x); });
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override {
    std::memset(dst, value, bytes);
    return absl::OkStatus();
  }

 private:
  std::optional<std::mt19937_64> load_rng_;
  bool allocated_once_ = false;
};

}  // namespace fusetune::testing

#endif  // FUSETUNE_TUNER_SRC_TESTING_HOST_BACKEND_H_
