// CapiBackend over this build's own libfusetune_capi.so on the CPU backend: served cells verify
// against the reference and time through the library; what the library or ABI cannot do is a
// clear error.
#include "fusetune/regress/capi_backend.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fusetune/regress/block_source.h"
#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

std::unique_ptr<Backend> Cpu() { return *CreateBackend("cpu", 0); }

AttentionProblem Small() { return *AttentionProblem::FromKey("prefill/b2/hq4/hkv2/q33/k47/d32/causal1/fp32"); }

TEST(CapiBackendTest, ServesALibrarysKernelsVerifiedAndTimed) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->Describe().DeviceClass(), Cpu()->Describe().DeviceClass());
  RunnerBlockSource source(**lib, "0123abcd", TimingOptions{.warmup = 0, .repeats = 3, .max_seconds = 0.1, .flush_l2 = false});
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  absl::StatusOr<CellCheck> check = source.Verify(Small(), c);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->outcome, TrialOutcome::kOk) << check->message;
  EXPECT_LE(check->max_rel_error, check->tolerance);
  absl::StatusOr<SampleBlock> block = source.MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GE(block->samples, 3);
  EXPECT_GT(block->median_us, 0);
}

TEST(CapiBackendTest, TheLibrarysRefusalComesBackWithItsCode) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  KernelConfig odd = *KernelConfig::FromKey("fused/bm16/bs48/t1/fp32/st1");
  absl::Status s = (*lib)->CanImplement(Small(), odd);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library"), std::string::npos) << s;
  AttentionProblem paged = Small();
  paged.page_block_size = 16;
  EXPECT_TRUE(absl::IsUnimplemented((*lib)->CanImplement(paged, *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1"))));
}

TEST(CapiBackendTest, ThisBuildsLibraryTakesTheScheduleFlags) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  // Handed to the library, whose CPU backend refuses them itself.
  absl::Status s = (*lib)->CanImplement(Small(), *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1/pingpong"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: cpu: no pingpong or persistent"), std::string::npos) << s;
}

// An older commit's library (version 1) reads the first seven fields of the same struct; a
// config it cannot express never reaches it.
TEST(CapiBackendTest, AVersionOneLibraryIsServedWhatItCanExpress) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V1, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  absl::Status s = (*lib)->CanImplement(Small(), *KernelConfig::FromKey("partial/bm16/bs32/t2/bf16/st1/sk4"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: fake v1 read 1/16/32/2/3/1/4"), std::string::npos) << s;
  for (const char* key : {"fused/bm16/bs32/t1/fp32/st1/pingpong", "fused/bm16/bs32/t1/fp32/st1/persistent",
                          "fused/bm16/bs32/t1/fp32/st1/pingpong/persistent"}) {
    const KernelConfig c = *KernelConfig::FromKey(key);
    std::vector<float> none(1);
    const AttentionBuffers buffers{.q = none.data(), .k = none.data(), .v = none.data(), .o = none.data()};
    for (absl::Status refused : {(*lib)->CanImplement(Small(), c), (*lib)->Run(Small(), c, buffers),
                                 (*lib)->Time(Small(), c, buffers, TimingOptions{}).status()}) {
      EXPECT_TRUE(absl::IsUnimplemented(refused)) << key << ": " << refused;
      EXPECT_NE(refused.message().find("the C ABI (version 1) has no pingpong or persistent schedule"),
                std::string::npos)
          << refused;
      EXPECT_EQ(refused.message().find("C ABI library"), std::string::npos) << refused;
    }
  }
}

TEST(CapiBackendTest, ALibraryOfAnotherVersionIsRefused) {
  absl::Status s = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V3, "cpu", 0, Cpu()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("speaks C ABI version 3"), std::string::npos) << s;
}

TEST(CapiBackendTest, AMissingOrForeignLibraryIsAClearError) {
  EXPECT_TRUE(absl::IsNotFound(OpenCapiBackend("/nonexistent/libfusetune_capi.so", "cpu", 0, Cpu()).status()));
  const std::string text = ::testing::TempDir() + "/not_a_library.so";
  std::ofstream(text) << "not an ELF file\n";
  absl::Status s = OpenCapiBackend(text, "cpu", 0, Cpu()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("cannot load"), std::string::npos) << s;
  std::remove(text.c_str());
  EXPECT_TRUE(absl::IsNotFound(OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "nosuchbackend", 0, Cpu()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, nullptr).status()));
}

}  // namespace
}  // namespace fusetune::regress
