#include "fusetune/tuner/config_space.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

bool IsCpu(const DeviceInfo& device) { return device.backend == "cpu"; }

// Keeps the block sizes that fit in `length`, plus the smallest one that covers it: larger
// blocks than that would run the same single, partly empty tile again.
std::vector<int> FitBlocks(std::vector<int> blocks, int length) {
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  std::vector<int> out;
  for (int b : blocks) {
    if (b <= length) {
      out.push_back(b);
    } else {
      out.push_back(b);  // the smallest block >= length; the rest would repeat it
      break;
    }
  }
  return out;
}

absl::Status CheckRange(const std::vector<int>& values, int lo, int hi, const char* name) {
  for (int v : values) {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " value ", v, " is outside [", lo, ", ", hi, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<Precision> DefaultPrecisions(DType dtype, const DeviceInfo& device) {
  switch (dtype) {
    case DType::kFp32:
      if (IsCpu(device)) return {Precision::kFp32};
      return {Precision::kFp32, Precision::kTf32};
    case DType::kFp16: return {Precision::kFp32, Precision::kFp16};
    case DType::kBf16: return {Precision::kFp32, Precision::kBf16};
  }
  return {Precision::kFp32};
}

ConfigSpaceOptions DefaultSpaceOptions(const ConfigSpaceOptions& options, DType dtype,
                                       const DeviceInfo& device) {
  ConfigSpaceOptions o = options;
  const bool cpu = IsCpu(device);
  if (o.variants.empty()) o.variants = {Variant::kFused, Variant::kPartial, Variant::kMaterialized};
  if (o.precisions.empty()) o.precisions = DefaultPrecisions(dtype, device);
  // GPU: 192 rows and 384/512 threads are the Hopper kernel's three and two consumer
  // warpgroups plus its producer warpgroup.
  if (o.block_m.empty()) o.block_m = cpu ? std::vector<int>{16, 32, 64, 128} : std::vector<int>{64, 128, 192};
  if (o.block_s.empty()) o.block_s = {16, 32, 64, 128};
  if (o.threads.empty()) {
    if (cpu) {
      const int hw = std::max(1, device.sm_count);
      for (int t = 1; t < hw; t *= 2) o.threads.push_back(t);
      o.threads.push_back(hw);
    } else {
      o.threads = {128, 256, 384, 512};
    }
  }
  if (o.stages.empty()) o.stages = cpu ? std::vector<int>{1} : std::vector<int>{1, 2, 3};
  return o;
}

absl::StatusOr<ConfigSpace> ConfigSpace::Create(const AttentionProblem& problem,
                                                const DeviceInfo& device,
                                                const ConfigSpaceOptions& options) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  const ConfigSpaceOptions o = DefaultSpaceOptions(options, problem.dtype, device);
  if (auto s = CheckRange(o.block_m, 1, 1024, "block_m"); !s.ok()) return s;
  if (auto s = CheckRange(o.block_s, 1, 1024, "block_s"); !s.ok()) return s;
  if (auto s = CheckRange(o.threads, 1, 1024, "threads"); !s.ok()) return s;
  if (auto s = CheckRange(o.stages, 1, 8, "stages"); !s.ok()) return s;

  const bool cpu = IsCpu(device);
  // Longest query / key run a tile can cover.
  const int max_q = std::max(1, problem.q_len);
  const int max_k = std::max(1, problem.kv_len);
  const std::vector<int> block_m = FitBlocks(o.block_m, max_q);
  const std::vector<int> block_s = FitBlocks(o.block_s, max_k);

  std::vector<int> threads;
  for (int t : o.threads) {
    if (cpu) {
      // More workers than hardware threads only adds contention to the measurement.
      if (device.sm_count > 0 && t > device.sm_count) continue;
    } else if (t % 32 != 0) {
      continue;  // GPU blocks are whole warps
    }
    threads.push_back(t);
  }

  std::vector<KernelConfig> configs;
  for (Variant variant : o.variants) {
    for (Precision precision : o.precisions) {
      // 16-bit products on 32-bit storage would lose precision the caller did not give up,
      // and tf32 is a tensor-core mode with no CPU counterpart.
      if (problem.dtype == DType::kFp32 && (precision == Precision::kFp16 || precision == Precision::kBf16)) continue;
      if (problem.dtype == DType::kFp16 && precision == Precision::kBf16) continue;
      if (problem.dtype == DType::kBf16 && precision == Precision::kFp16) continue;
      if (cpu && precision == Precision::kTf32) continue;
      for (int bm : block_m) {
        for (int bs : block_s) {
          // On GPUs the materialized variant is cuBLAS GEMMs around one softmax kernel: its
          // tiles are cuBLAS's, so block sizes would only repeat the same measurement.
          if (!cpu && variant == Variant::kMaterialized &&
              (bm != block_m.front() || bs != block_s.front())) {
            continue;
          }
          for (int t : threads) {
            for (int st : o.stages) {
              KernelConfig c;
              c.variant = variant;
              c.precision = precision;
              c.block_m = bm;
              c.block_s = bs;
              c.threads = t;
              c.stages = st;
              configs.push_back(c);
            }
          }
        }
      }
    }
  }
  std::sort(configs.begin(), configs.end(), ConfigOrderLess);
  configs.erase(std::unique(configs.begin(), configs.end()), configs.end());
  if (configs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no config left for problem ", problem.Key(), " on ", device.DeviceClass(),
        " (check the variant, precision and threads options)"));
  }
  return ConfigSpace(std::move(configs));
}

std::vector<KernelConfig> ConfigSpace::ForVariant(Variant variant) const {
  std::vector<KernelConfig> out;
  for (const KernelConfig& c : configs_) {
    if (c.variant == variant) out.push_back(c);
  }
  return out;
}

std::vector<Variant> ConfigSpace::variants() const {
  std::set<int> seen;
  for (const KernelConfig& c : configs_) seen.insert(static_cast<int>(c.variant));
  std::vector<Variant> out;
  for (int v : seen) out.push_back(static_cast<Variant>(v));
  return out;
}

}  // namespace fusetune
