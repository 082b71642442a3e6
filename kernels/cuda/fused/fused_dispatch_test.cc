// Host-only tests of the fused kernel's API checks and instance table: no GPU is touched
// (FusedCanImplement never calls CUDA; LaunchFused returns before launching on these inputs).
#include <cstdint>
#include <set>
#include <string>

#include "attention_params.h"
#include "fused/fused_configs.h"
#include "gtest/gtest.h"

namespace fusetune::cuda {
namespace {

constexpr int64_t kHopperSmem = 227 * 1024;
constexpr int kHopper = 90;

AttentionProblem Problem(int head_dim, DType dtype) {
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.q_len = 77;
  p.kv_len = 1000;
  p.head_dim = head_dim;
  p.dtype = dtype;
  return p;
}

KernelConfig Config(int bm, int bs, int threads, Precision precision, int stages) {
  KernelConfig c;
  c.variant = Variant::kFused;
  c.block_m = bm;
  c.block_s = bs;
  c.threads = threads;
  c.precision = precision;
  c.stages = stages;
  return c;
}

// The backend sizes the split of a persistent launch's last round (SplitTail) for the head_dim
// 64 persistent instance with two Q buffers where the plan saves at least a quarter of the
// round, and for nothing else: a launch given nothing runs unsplit.
TEST(FusedSplitWorkspaceFor, SizesTheSplitOnlyWhereALaunchSplits) {
  KernelConfig c = Config(128, 128, 384, Precision::kFp16, 2);
  c.persistent = true;
  AttentionProblem p = Problem(64, DType::kFp16);
  p.batch = 1;
  p.q_heads = p.kv_heads = 12;
  p.q_len = p.kv_len = 2048;
  // 192 tiles on 132 blocks: 60 split, spans of 8 of their 16 key tiles, at most 3 pieces a
  // tile; 256 consumer threads of 32 accumulators and (m, m, l, l) each; 8 consumer warps.
  const FusedSplitWorkspace w = FusedSplitWorkspaceFor(p, c, 132);
  EXPECT_EQ(w.partial_floats, int64_t{60} * 3 * 256 * 36);
  EXPECT_EQ(w.counters, 60 * 8);

  auto none = [&](const AttentionProblem& q, const KernelConfig& k, int sms, const char* why) {
    const FusedSplitWorkspace n = FusedSplitWorkspaceFor(q, k, sms);
    EXPECT_EQ(n.partial_floats, 0) << why;
    EXPECT_EQ(n.counters, 0) << why;
  };
  none(p, c, 96, "192 tiles fill two rounds of 96");
  AttentionProblem causal = p;
  causal.causal = true;
  none(causal, c, 132, "causal");
  AttentionProblem varlen = p;
  varlen.cu_seqlens_q = {0, 2048};
  varlen.cu_seqlens_k = {0, 2048};
  none(varlen, c, 132, "varlen");
  AttentionProblem padded = p;
  padded.kv_valid_lens = {2000};
  none(padded, c, 132, "key padding");
  AttentionProblem d128 = p;
  d128.head_dim = 128;
  none(d128, c, 132, "head_dim 128");
  KernelConfig pingpong = c;
  pingpong.pingpong = true;
  none(p, pingpong, 132, "ping-pong (one Q buffer)");
  KernelConfig one_tile = c;
  one_tile.persistent = false;
  none(p, one_tile, 132, "a block per tile");
}

TEST(FusedCanImplement, AcceptsEveryCompiledConfigThatFitsSharedMemory) {
  int accepted = 0;
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      const auto configs = FusedCompiledConfigs(d, dtype);
      EXPECT_FALSE(configs.empty()) << d << " " << DTypeName(dtype);
      for (const KernelConfig& c : configs) {
        const int64_t smem = FusedSharedMemoryBytes(d, dtype, c);
        ASSERT_GT(smem, 0) << c.Key();
        const absl::Status s = FusedCanImplement(Problem(d, dtype), c, kHopperSmem, kHopper);
        if (smem <= kHopperSmem) {
          EXPECT_TRUE(s.ok()) << c.Key() << ": " << s;
          ++accepted;
        } else {
          EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.Key();
        }
      }
    }
  }
  EXPECT_GT(accepted, 50);
}

TEST(FusedCanImplement, CompiledConfigKeysAreUniquePerStorageType) {
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      std::set<std::string> keys;
      for (const KernelConfig& c : FusedCompiledConfigs(d, dtype)) {
        EXPECT_TRUE(keys.insert(c.Key()).second) << "duplicate " << c.Key();
      }
    }
  }
}

TEST(FusedCanImplement, HeadDimWithoutInstantiationIsUnimplemented) {
  const absl::Status s = FusedCanImplement(Problem(96, DType::kFp32),
                                           Config(64, 64, 128, Precision::kFp32, 1), kHopperSmem, kHopper);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(s.message()).find("head_dim"), std::string::npos) << s;
  EXPECT_TRUE(FusedCompiledConfigs(96, DType::kFp32).empty());
}

TEST(FusedCanImplement, HopperKernelIsRejectedOnOtherGpus) {
  // block_m 128 with 384 threads = two consumer warpgroups + the producer warpgroup.
  KernelConfig c = Config(128, 128, 384, Precision::kBf16, 2);
  EXPECT_TRUE(FusedCanImplement(Problem(128, DType::kBf16), c, kHopperSmem, kHopper).ok());
  const absl::Status s = FusedCanImplement(Problem(128, DType::kBf16), c, 163 * 1024, 80);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(std::string(s.message()).find("sm_90a"), std::string::npos) << s;
  // The mma.sync kernel with the same tiles still runs on sm_80.
  EXPECT_TRUE(FusedCanImplement(Problem(128, DType::kBf16), Config(128, 64, 256, Precision::kBf16, 2),
                                163 * 1024, 80)
                  .ok());
}

TEST(FusedCanImplement, TileShapeWithoutInstantiationIsUnimplemented) {
  const absl::Status s = FusedCanImplement(Problem(64, DType::kFp32),
                                           Config(48, 64, 128, Precision::kFp32, 1), kHopperSmem, kHopper);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

TEST(FusedCanImplement, SharedMemoryOverTheLimitIsFailedPrecondition) {
  const KernelConfig c = Config(64, 64, 128, Precision::kFp32, 1);
  const int64_t need = FusedSharedMemoryBytes(64, DType::kFp32, c);
  ASSERT_GT(need, 0);
  EXPECT_TRUE(FusedCanImplement(Problem(64, DType::kFp32), c, need, kHopper).ok());
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp32), c, need - 1, kHopper).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FusedCanImplement, PrecisionMustMatchStorageForTensorCores) {
  // fp16 storage cannot run bf16 or tf32 operands; fp32 storage cannot run fp16 operands.
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp16), Config(64, 64, 128, Precision::kBf16, 1),
                              kHopperSmem, kHopper)
                .code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp16), Config(64, 64, 128, Precision::kTf32, 1),
                              kHopperSmem, kHopper)
                .code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp32), Config(64, 64, 128, Precision::kFp16, 1),
                              kHopperSmem, kHopper)
                .code(),
            absl::StatusCode::kUnimplemented);
  // Exact fp32 runs on every storage type.
  EXPECT_TRUE(FusedCanImplement(Problem(64, DType::kBf16), Config(64, 64, 128, Precision::kFp32, 1),
                                kHopperSmem, kHopper)
                  .ok());
}

TEST(FusedCanImplement, SplitKvPagedKvAndOtherVariantsAreRejected) {
  KernelConfig c = Config(64, 64, 128, Precision::kFp32, 1);
  c.split_kv = 4;
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp32), c, kHopperSmem, kHopper).code(),
            absl::StatusCode::kUnimplemented);
  AttentionProblem paged = Problem(64, DType::kFp32);
  paged.kind = ProblemKind::kDecode;
  paged.q_len = 1;
  paged.page_block_size = 16;
  const absl::Status s =
      FusedCanImplement(paged, Config(64, 64, 128, Precision::kFp32, 1), kHopperSmem, kHopper);
  EXPECT_FALSE(s.ok());
  c = Config(64, 64, 128, Precision::kFp32, 1);
  c.variant = Variant::kMaterialized;
  EXPECT_EQ(FusedCanImplement(Problem(64, DType::kFp32), c, kHopperSmem, kHopper).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FusedCanImplement, OnlyTheHopperKernelReadsAPagedPrefillWithPagesOfSixteenTokensOrMore) {
  AttentionProblem prefill = Problem(128, DType::kBf16);
  prefill.q_len = 300;
  prefill.kv_len = 700;
  prefill.causal = true;
  const KernelConfig hopper = Config(128, 128, 384, Precision::kBf16, 2);  // wgmma: 2 consumer warpgroups
  ASSERT_TRUE(FusedCanImplement(prefill, hopper, kHopperSmem, kHopper).ok());
  for (int page : {16, 32, 64, 128, 256}) {
    prefill.page_block_size = page;
    EXPECT_TRUE(FusedCanImplement(prefill, hopper, kHopperSmem, kHopper).ok()) << page;
  }
  for (int page : {1, 3, 8, 24, 48}) {  // not a multiple of 16, or neither divides block_s 128 nor a multiple of it
    prefill.page_block_size = page;
    const absl::Status s = FusedCanImplement(prefill, hopper, kHopperSmem, kHopper);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << page;
    EXPECT_NE(std::string(s.message()).find("paged"), std::string::npos) << s;
  }
  prefill.page_block_size = 16;
  // The mma.sync kernel and an sm_80 GPU do not read pages; decode steps stay on the decode family.
  EXPECT_FALSE(FusedCanImplement(prefill, Config(64, 64, 128, Precision::kBf16, 2), kHopperSmem, kHopper).ok());
  EXPECT_FALSE(FusedCanImplement(prefill, hopper, kHopperSmem, 80).ok());
  AttentionProblem decode = prefill;
  decode.kind = ProblemKind::kDecode;
  decode.q_len = 1;
  EXPECT_FALSE(FusedCanImplement(decode, hopper, kHopperSmem, kHopper).ok());
  AttentionProblem e4m3 = prefill;
  e4m3.kv_storage = KvStorage::kE4m3;
  EXPECT_FALSE(FusedCanImplement(e4m3, hopper, kHopperSmem, kHopper).ok());
}

TEST(FusedCanImplement, InvalidProblemIsInvalidArgument) {
  AttentionProblem p = Problem(64, DType::kFp32);
  p.kv_heads = 3;  // does not divide q_heads
  EXPECT_EQ(FusedCanImplement(p, Config(64, 64, 128, Precision::kFp32, 1), kHopperSmem, kHopper).code(),
            absl::StatusCode::kInvalidArgument);
}

AttentionParams AlignedParams() {
  AttentionParams a;
  a.q = a.k = a.v = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  a.o = reinterpret_cast<void*>(uintptr_t{1} << 21);
  a.q_row_stride = a.k_row_stride = a.v_row_stride = a.o_row_stride = 64;
  a.q_head_stride = a.k_head_stride = a.v_head_stride = a.o_head_stride = 64;
  a.batch = 1;
  a.q_heads = a.kv_heads = 1;
  a.head_dim = 64;
  a.q_len = a.kv_len = 10;
  a.dtype = DType::kFp32;
  a.scale = 0.125f;
  a.scale_log2 = 0.125f * 1.4426950f;
  return a;
}

TEST(LaunchFused, UnknownConfigIsNotSupportedWithoutLaunching) {
  EXPECT_EQ(LaunchFused(AlignedParams(), Config(48, 64, 128, Precision::kFp32, 1), nullptr),
            cudaErrorNotSupported);
}

TEST(LaunchFused, MisalignedTensorsAreRefusedWithoutLaunching) {
  AttentionParams a = AlignedParams();
  a.k = reinterpret_cast<const void*>((uintptr_t{1} << 20) + 4);
  EXPECT_EQ(LaunchFused(a, Config(64, 64, 128, Precision::kFp32, 1), nullptr),
            cudaErrorMisalignedAddress);
  a = AlignedParams();
  a.q_row_stride = 66;  // 264 bytes: not a multiple of 16
  EXPECT_EQ(LaunchFused(a, Config(64, 64, 128, Precision::kFp32, 1), nullptr),
            cudaErrorMisalignedAddress);
}

TEST(LaunchFused, EmptyProblemLaunchesNothing) {
  AttentionParams a = AlignedParams();
  a.q_len = 0;
  EXPECT_EQ(LaunchFused(a, Config(64, 64, 128, Precision::kFp32, 1), nullptr), cudaSuccess);
}

}  // namespace
}  // namespace fusetune::cuda
