#include "fusetune/kernels/default_config.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

// The GPU defaults compute in the storage type's own precision (fp32 stays exact, never tf32).
Precision StoragePrecision(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return Precision::kFp32;
    case DType::kFp16: return Precision::kFp16;
    case DType::kBf16: return Precision::kBf16;
  }
  return Precision::kFp32;
}

}  // namespace

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
  if (backend == "cuda" && (problem.kind == ProblemKind::kDecode || problem.is_paged())) {
    // The CUDA decode family (the fused variant of decode problems and of prefills over a
    // paged cache): 16 rows (a KV group's heads x the new tokens) for decode, 64 for a
    // prefill; 128 threads, two stages. Its fp32 instances are 16-row SIMT tiles whose
    // double-buffered block_s 32 fits the 99 KiB of sm_86/sm_89 at head_dim 128. Decode
    // splits the keys as planned at launch for the device (ChooseSplitKv); a prefill never
    // splits.
    const bool fp32_storage = problem.dtype == DType::kFp32;
    const bool decode = problem.kind == ProblemKind::kDecode;
    c.block_m = decode || fp32_storage ? 16 : 64;
    c.block_s = fp32_storage ? 32 : 64;
    c.threads = 128;
    c.stages = 2;
    c.split_kv = decode ? kAutoSplitKv : 1;
    c.precision = StoragePrecision(problem.dtype);
    if (problem.is_kv_quantized()) {
      // e4m3 K/V: fp16 products, and three stages of the half-size tiles (compiled for decode).
      c.precision = Precision::kFp16;
      c.stages = decode ? 3 : 2;
    }
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
    c.precision = StoragePrecision(problem.dtype);
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("no default config for backend '", std::string(backend),
                                                 "' (expected cpu, cuda or hip)"));
}

KernelConfig DefaultConfigOfDeviceClass(std::string_view device_class, const AttentionProblem& problem) {
  absl::StatusOr<KernelConfig> config = DefaultConfig(BackendOfDeviceClass(device_class), problem);
  if (config.ok()) return *config;
  return *DefaultConfig("cpu", problem);  // "cpu" is always known
}

std::string_view BackendOfDeviceClass(std::string_view device_class) {
  return device_class.substr(0, device_class.find('/'));
}

}  // namespace fusetune
