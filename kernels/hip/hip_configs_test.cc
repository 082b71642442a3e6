#include "hip_configs.h"

#include <string>

#include "gtest/gtest.h"

namespace fusetune::hip {
namespace {

AttentionProblem Problem(int head_dim, DType dtype) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 8;
  p.kv_heads = 8;
  p.q_len = 512;
  p.kv_len = 512;
  p.head_dim = head_dim;
  p.dtype = dtype;
  return p;
}

HipDeviceLimits Cdna() {  // gfx90a (MI250X) as hipDeviceProp_t reports it
  HipDeviceLimits l;
  l.wavefront_size = 64;
  l.compute_units = 110;
  l.lds_bytes_per_block = 65536;
  l.workspace_limit_bytes = int64_t{32} << 30;
  return l;
}

HipDeviceLimits Rdna() {  // gfx1030
  HipDeviceLimits l = Cdna();
  l.wavefront_size = 32;
  l.compute_units = 40;
  return l;
}

TEST(HipConfigsTest, EveryCandidateIsAcceptedAndAWavefrontMultipleWithinLds) {
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (const HipDeviceLimits& limits : {Cdna(), Rdna()}) {
        const AttentionProblem p = Problem(d, dtype);
        const auto configs = HipCandidateConfigs(p, limits);
        EXPECT_FALSE(configs.empty());
        bool fused = false;
        for (const KernelConfig& c : configs) {
          EXPECT_TRUE(HipCanImplement(p, c, limits).ok()) << c.Key();
          EXPECT_EQ(c.threads % limits.wavefront_size, 0) << c.Key();
          fused |= c.variant == Variant::kFused;
        }
        EXPECT_TRUE(fused) << "no fused SIMT instance fits 64 KiB of LDS for d" << d;
      }
    }
  }
}

TEST(HipConfigsTest, ThreadsOfHalfAWavefrontAreRefusedOnCdnaOnly) {
  const AttentionProblem p = Problem(64, DType::kFp32);
  KernelConfig c;
  c.variant = Variant::kMaterialized;
  c.block_m = c.block_s = 64;
  c.threads = 32;
  c.precision = Precision::kFp32;
  const absl::Status cdna = HipCanImplement(p, c, Cdna());
  EXPECT_EQ(cdna.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(cdna.message()).find("wavefront size (64)"), std::string::npos) << cdna;
  EXPECT_TRUE(HipCanImplement(p, c, Rdna()).ok());
}

TEST(HipConfigsTest, FusedConfigsOverTheLdsAreFailedPrecondition) {
  const AttentionProblem p = Problem(128, DType::kFp32);
  HipDeviceLimits small = Cdna();
  small.lds_bytes_per_block = 16 * 1024;
  int refused = 0;
  for (const KernelConfig& c : HipCandidateConfigs(p, Cdna())) {
    if (c.variant != Variant::kFused) continue;
    const absl::Status s = HipCanImplement(p, c, small);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(HipConfigsTest, PingpongAndPersistentAreUnimplemented) {
  const AttentionProblem p = Problem(64, DType::kFp32);
  for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
    KernelConfig c;
    c.variant = v;
    c.block_m = 64;
    c.block_s = 64;
    c.threads = 128;
    c.pingpong = true;
    EXPECT_EQ(HipCanImplement(p, c, Cdna()).code(), absl::StatusCode::kUnimplemented) << c.Key();
    c.pingpong = false;
    c.persistent = true;
    EXPECT_EQ(HipCanImplement(p, c, Cdna()).code(), absl::StatusCode::kUnimplemented) << c.Key();
  }
}

TEST(HipConfigsTest, TensorCorePrecisionsAreUnimplemented) {
  const AttentionProblem p = Problem(64, DType::kFp16);
  KernelConfig c;
  c.variant = Variant::kFused;
  c.block_m = 64;
  c.block_s = 64;
  c.threads = 128;
  c.precision = Precision::kFp16;  // the mma.sync kernel on CUDA
  EXPECT_EQ(HipCanImplement(p, c, Cdna()).code(), absl::StatusCode::kUnimplemented);
  c.variant = Variant::kPartial;
  c.stages = 1;
  EXPECT_TRUE(HipCanImplement(p, c, Cdna()).ok());  // partial: PV in fp16 storage, fp32 QK^T
  KernelConfig tf32 = c;
  tf32.precision = Precision::kTf32;
  EXPECT_EQ(HipCanImplement(Problem(64, DType::kFp32), tf32, Cdna()).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(HipConfigsTest, WorkspaceOverTheLimitIsFailedPrecondition) {
  const AttentionProblem p = Problem(64, DType::kFp32);
  HipDeviceLimits tiny = Cdna();
  tiny.workspace_limit_bytes = 1024;
  KernelConfig c;
  c.variant = Variant::kMaterialized;
  c.block_m = c.block_s = 64;
  c.threads = 256;
  c.precision = Precision::kFp32;
  EXPECT_EQ(HipCanImplement(p, c, tiny).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fusetune::hip
