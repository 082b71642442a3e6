#include "fusetune/kernels/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

// Device class parts are '/'-separated: keep each part free of '/' and whitespace.
std::string Sanitize(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '/' || c == '\n') {
      if (!out.empty() && out.back() != '-') out.push_back('-');
    } else {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

}  // namespace

std::string DeviceInfo::DeviceClass() const {
  return absl::StrCat(Sanitize(backend), "/", Sanitize(name), "/", Sanitize(arch));
}

bool DeviceStateMoved(const DeviceState& before, const DeviceState& after) {
  if (!before.known || !after.known) return false;
  if (before.throttle_reasons != after.throttle_reasons) return true;
  const int lo = std::min(before.sm_clock_mhz, after.sm_clock_mhz);
  const int hi = std::max(before.sm_clock_mhz, after.sm_clock_mhz);
  return lo > 0 ? (hi - lo) * 50 > lo : hi > 0;  // more than 2 %
}

absl::Status ValidateBuffers(const AttentionProblem& problem, const AttentionBuffers& buffers) {
  if (problem.is_paged()) {
    if (buffers.block_table == nullptr) return absl::InvalidArgumentError("a paged problem needs a block_table");
    if (reinterpret_cast<uintptr_t>(buffers.block_table) % alignof(int32_t) != 0) {
      return absl::InvalidArgumentError("block_table is not aligned to 4 bytes");
    }
  } else if (buffers.block_table != nullptr) {
    return absl::InvalidArgumentError("block_table is set but the problem's K/V are contiguous (page_block_size 0)");
  }
  if (problem.is_kv_quantized()) {
    for (const auto& [name, ptr] : {std::pair<const char*, const float*>{"k_scale", buffers.k_scale},
                                    std::pair<const char*, const float*>{"v_scale", buffers.v_scale}}) {
      if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat("K/V stored as e4m3 need ", name));
      if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(name, " is not aligned to 4 bytes"));
      }
    }
  } else if (buffers.k_scale != nullptr || buffers.v_scale != nullptr) {
    return absl::InvalidArgumentError("k_scale/v_scale are set but the problem's K/V are not quantised (kv_storage dtype)");
  }
  const std::pair<const char*, const void*> tensors[] = {
      {"q", buffers.q}, {"k", buffers.k}, {"v", buffers.v}, {"o", buffers.o}};
  for (const auto& [name, ptr] : tensors) {
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is a null pointer"));
    if (reinterpret_cast<uintptr_t>(ptr) % kBufferAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " (", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                                                     ") is not aligned to ", kBufferAlignment, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKvScales(const AttentionProblem& problem, const float* k_scale, const float* v_scale) {
  if (k_scale == nullptr || v_scale == nullptr) return absl::InvalidArgumentError("K/V stored as e4m3 need k_scale and v_scale");
  const double softmax = problem.EffectiveScale();
  for (int h = 0; h < problem.kv_heads; ++h) {
    for (const auto& [name, x] : {std::pair<const char*, float>{"k_scale", k_scale[h]},
                                  std::pair<const char*, float>{"v_scale", v_scale[h]}}) {
      if (!std::isfinite(x) || x < 0.0f) {
        return absl::InvalidArgumentError(absl::StrCat(name, "[", h, "] = ", x, " (a scale must be finite and >= 0)"));
      }
    }
    if (softmax * k_scale[h] > kMaxSoftmaxScale) {
      return absl::InvalidArgumentError(absl::StrCat("k_scale[", h, "] = ", k_scale[h], " times the softmax scale ",
                                                     softmax, " exceeds ", kMaxSoftmaxScale));
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::RunOnStream(const AttentionProblem& problem, const KernelConfig& config,
                                  const AttentionBuffers& buffers, const StreamLaunch& launch) {
  return absl::UnimplementedError(absl::StrCat("the ", Describe().backend,
                                               " backend has no stream launches; use Run (synchronous)"));
}

absl::StatusOr<size_t> Backend::ScratchBytes(const AttentionProblem&, const KernelConfig&) const {
  return absl::UnimplementedError(absl::StrCat("the ", Describe().backend, " backend keeps its scratch in memory of its own"));
}

absl::StatusOr<WorkerPool> Backend::LendWorkers() {
  return absl::UnimplementedError(absl::StrCat("the ", Describe().backend, " backend has no worker threads to lend"));
}

absl::Status Backend::UseWorkers(const WorkerPool*) {
  return absl::UnimplementedError(absl::StrCat("the ", Describe().backend, " backend runs no tasks on host threads"));
}

absl::Status Backend::UseScratchArena(void*, size_t) {
  return absl::UnimplementedError(absl::StrCat("the ", Describe().backend, " backend keeps its scratch in memory of its own"));
}

}  // namespace fusetune
