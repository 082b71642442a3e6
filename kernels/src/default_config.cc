#include "fusetune/kernels/default_config.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fusetune {

absl::StatusOr<KernelConfig> DefaultConfig(std::string_view backend, const AttentionProblem& problem) {
  KernelConfig c;
  c.variant = Variant::kFused;
  c.split_kv = 1;
  if (backend == "cpu") {
    // Decode: the split planned at launch from the workers and the cache lengths
    // (ChooseSplitKv); prefill never splits.
    if (problem.kind == ProblemKind::kDecode) c.split_kv = kAutoSplitKv;
    c.block_m = problem.kind == ProblemKind::kDecode ? 16 : 64;
    c.block_s = 64;
    c.threads = 1;
    c.precision = Precision::kFp32;
    c.stages = 1;
    return c;
  }
  if (backend == "cuda" || backend == "hip") {
    // Exact-fp32 tiles take twice the bytes of fp16/bf16 ones: with block_s 32 and one
    // stage they fit the 99 KiB of shared memory per block of the smallest supported GPUs
    // (sm_86, sm_89) at head_dim 128, as the half-precision double-buffered tiles do.
    const bool fp32_storage = problem.dtype == DType::kFp32;
    c.block_m = 64;
    c.block_s = fp32_storage ? 32 : 64;
    c.threads = backend == "cuda" ? 128 : 256;
    c.stages = fp32_storage ? 1 : 2;
    switch (problem.dtype) {
      case DType::kFp32: c.precision = Precision::kFp32; break;
      case DType::kFp16: c.precision = Precision::kFp16; break;
      case DType::kBf16: c.precision = Precision::kBf16; break;
    }
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("no default config for backend '", std::string(backend),
                                                 "' (expected cpu, cuda or hip)"));
}

std::string_view BackendOfDeviceClass(std::string_view device_class) {
  return device_class.substr(0, device_class.find('/'));
}

}  // namespace fusetune
