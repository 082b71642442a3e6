#include "hip_configs.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "attention_params.h"  // FusedCanImplement (shared with the CUDA build)
#include "baseline_args.h"  // ForEachBaselineConfig, ToElemType (shared with the CUDA build)
#include "baseline_kernels.h"  // PartialScoresSharedBytes
#include "baseline_plan.h"
#include "fused/fused_configs.h"

namespace fusetune::hip {
namespace {

using absl::StrCat;

// The baselines' PV GEMM takes P in V's type and accumulates in fp32; there are no tensor-core
// paths on HIP, so each storage type has exactly one precision.
Precision BaselinePrecision(DType d) {
  switch (d) {
    case DType::kFp32: return Precision::kFp32;
    case DType::kFp16: return Precision::kFp16;
    case DType::kBf16: return Precision::kBf16;
  }
  return Precision::kFp32;
}

}  // namespace

absl::Status HipCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                             const HipDeviceLimits& limits) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (auto s = config.Validate(); !s.ok()) return s;
  if (problem.is_paged()) {
    return absl::UnimplementedError("no kernel of the HIP backend reads a paged KV cache");
  }
  if (config.pingpong || config.persistent) {
    return absl::UnimplementedError(
        "no kernel of the HIP backend has a pingpong or persistent schedule (the Hopper fused kernel's)");
  }
  if (problem.head_dim != 64 && problem.head_dim != 128) {
    return absl::UnimplementedError(
        StrCat("the HIP backend supports head_dim 64 and 128 only, got ", problem.head_dim));
  }
  const int wave = limits.wavefront_size;
  if (wave <= 0 || config.threads < wave || config.threads > limits.max_threads_per_block ||
      config.threads % wave != 0) {
    return absl::FailedPreconditionError(
        StrCat("threads per block must be a multiple of the wavefront size (", wave, ") in [", wave,
               ", ", limits.max_threads_per_block, "], got ", config.threads));
  }
  if (config.variant == Variant::kFused) {
    return FusedCanImplement(problem, config, limits.lds_bytes_per_block, /*sm_version=*/0);
  }
  if (config.precision != BaselinePrecision(problem.dtype)) {
    return absl::UnimplementedError(StrCat(
        "the HIP ", std::string(VariantName(config.variant)), " variant computes PV with fp32 accumulation on P in ",
        "V's type (no tensor-core path): ", std::string(DTypeName(problem.dtype)), " storage supports precision ",
        std::string(PrecisionName(BaselinePrecision(problem.dtype))), ", not ", std::string(PrecisionName(config.precision))));
  }
  if (config.stages != 1 || config.split_kv != 1) {
    return absl::UnimplementedError(StrCat(
        "the ", std::string(VariantName(config.variant)),
        " variant has no K/V load pipeline or KV split: stages and split_kv must be 1"));
  }
  if (config.variant == Variant::kPartial) {
    if (config.block_m > 256 || config.block_s > 256) {
      return absl::FailedPreconditionError("partial: block_m and block_s must be <= 256");
    }
    if (config.threads > kPartialMaxThreads) {
      return absl::FailedPreconditionError(StrCat("partial: at most ", kPartialMaxThreads,
                                                  " threads per block, got ", config.threads));
    }
    const int64_t lds = PartialScoresSharedBytes(problem.head_dim, config.block_m, config.block_s,
                                                 ToElemType(problem.dtype), /*tensor_cores=*/false);
    if (lds > limits.lds_bytes_per_block) {
      return absl::FailedPreconditionError(
          StrCat("partial: block_m=", config.block_m, " block_s=", config.block_s, " head_dim=",
                 problem.head_dim, " needs ", lds, " bytes of LDS, the device allows ",
                 limits.lds_bytes_per_block));
    }
  }
  const bool materialized = config.variant == Variant::kMaterialized;
  auto plan = PlanBaseline(problem, materialized, problem.dtype == DType::kFp32 ? 4 : 2);
  if (!plan.ok()) return plan.status();
  if (static_cast<int64_t>(plan->workspace_bytes) > limits.workspace_limit_bytes) {
    return absl::FailedPreconditionError(StrCat(
        std::string(VariantName(config.variant)), " needs ", plan->workspace_bytes >> 20,
        " MiB of workspace for S/P, over the backend's limit of ",
        limits.workspace_limit_bytes >> 20, " MiB"));
  }
  return absl::OkStatus();
}

std::vector<KernelConfig> HipCandidateConfigs(const AttentionProblem& problem,
                                              const HipDeviceLimits& limits) {
  std::vector<KernelConfig> out;
  if (!problem.Validate().ok()) return out;
  auto keep = [&](const KernelConfig& c) {
    if (HipCanImplement(problem, c, limits).ok()) out.push_back(c);
  };
  for (const KernelConfig& c : FusedCompiledConfigs(problem.head_dim, problem.dtype)) keep(c);
  ForEachBaselineConfig(BaselinePrecision(problem.dtype), keep);
  std::sort(out.begin(), out.end(), ConfigOrderLess);
  out.erase(std::unique(out.begin(), out.end(),
                        [](const KernelConfig& a, const KernelConfig& b) {
                          return !ConfigOrderLess(a, b) && !ConfigOrderLess(b, a);
                        }),
            out.end());
  return out;
}

}  // namespace fusetune::hip
