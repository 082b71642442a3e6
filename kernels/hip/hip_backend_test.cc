// GPU tests of the HIP backend through CreateBackend("hip"): every candidate config of a few
// problems (each dtype, head_dim 64 and 128, causal, GQA, odd lengths) against the fp64
// reference. Exits 77 (ctest: Skipped) on a host without an AMD GPU, saying so.
#include <cstdio>
#include <string>
#include <vector>

#include "cpu_test_util.h"  // RandomInputs, RunBackend, MaxAbsError, Describe
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/reference.h"
#include "gtest/gtest.h"

namespace fusetune {
namespace {

class HipBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto b = CreateBackend("hip", 0);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = b->release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  static Backend* backend_;
};
Backend* HipBackendTest::backend_ = nullptr;

TEST_F(HipBackendTest, DescribesAnAmdGpuWithItsTarget) {
  const DeviceInfo info = backend_->Describe();
  EXPECT_EQ(info.backend, "hip");
  EXPECT_EQ(info.arch.rfind("gfx", 0), 0u) << info.arch;
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.shared_mem_per_block, 0);
}

TEST_F(HipBackendTest, EveryCandidateMatchesTheReference) {
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (bool causal : {false, true}) {
        AttentionProblem p;
        p.batch = 2;
        p.q_heads = 4;
        p.kv_heads = 2;  // GQA
        p.q_len = 77;    // not a multiple of any tile
        p.kv_len = 93;
        p.head_dim = d;
        p.causal = causal;
        p.dtype = dtype;
        const testing_util::Inputs in = testing_util::RandomInputs(p, 17);
        auto ref = ReferenceAttention(p, in.q, in.k, in.v);
        ASSERT_TRUE(ref.ok()) << ref.status();
        const auto configs = backend_->CandidateConfigs(p);
        EXPECT_FALSE(configs.empty());
        for (const KernelConfig& c : configs) {
          auto out = testing_util::RunBackend(*backend_, p, c, in);
          ASSERT_TRUE(out.ok()) << testing_util::Describe(p, c) << ": " << out.status();
          EXPECT_LE(testing_util::MaxAbsError(*out, *ref), testing_util::Tolerance(c.precision, dtype))
              << testing_util::Describe(p, c);
        }
      }
    }
  }
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
