// GPU test of the HIP backend through CreateBackend("hip"): exits 77 (ctest: Skipped) on a host
// without an AMD GPU, saying so.
#include <cstdio>
#include <cstdlib>

#include "fusetune/kernels/backend.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(HipBackendTest, DescribesAnAmdGpuWithItsWavefrontSize) {
  auto backend = CreateBackend("hip", 0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const DeviceInfo info = (*backend)->Describe();
  EXPECT_EQ(info.backend, "hip");
  EXPECT_EQ(info.arch.rfind("gfx", 0), 0u) << info.arch;
  EXPECT_GT(info.sm_count, 0);
}

}  // namespace
}  // namespace fusetune

int main(int argc, char** argv) {
  if (fusetune::CountDevices("hip") == 0) {
    auto status = fusetune::CreateBackend("hip", 0).status();
    std::printf("SKIPPED: no AMD GPU on this host (%s)\n", std::string(status.message()).c_str());
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
