// The fused kernel's SIMT families are compiled from the same sources by nvcc and hipcc
// (gpu/shared_kernels.cmake): both builds must register the same instances, so a kernel
// instantiated (or dropped) for one backend is for the other. Needs a build with both
// FUSETUNE_WITH_CUDA and FUSETUNE_WITH_HIP; host-only (no GPU).
#include <vector>

#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "gtest/gtest.h"

// fused/fused_configs.h declares these in the namespace of the build that includes it; this
// test links both builds, so it names each one.
namespace fusetune::cuda {
std::vector<KernelConfig> FusedCompiledConfigs(int head_dim, DType dtype);
}
namespace fusetune::hip {
std::vector<KernelConfig> FusedCompiledConfigs(int head_dim, DType dtype);
}

namespace fusetune {
namespace {

std::vector<std::string> Keys(const std::vector<KernelConfig>& configs, bool simt_only) {
  std::vector<std::string> keys;
  for (const KernelConfig& c : configs) {
    // The SIMT kernels compute in exact fp32; every other precision is a CUDA tensor-core kernel.
    if (!simt_only || c.precision == Precision::kFp32) keys.push_back(c.Key());
  }
  return keys;
}

TEST(HipCudaSharedInstancesTest, BothBuildsRegisterTheSameSimtInstances) {
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      const auto cuda = Keys(cuda::FusedCompiledConfigs(d, dtype), /*simt_only=*/true);
      const auto hip = Keys(hip::FusedCompiledConfigs(d, dtype), /*simt_only=*/false);
      EXPECT_FALSE(hip.empty()) << DTypeName(dtype) << " d" << d;
      EXPECT_EQ(cuda, hip) << DTypeName(dtype) << " d" << d;
    }
  }
}

}  // namespace
}  // namespace fusetune
