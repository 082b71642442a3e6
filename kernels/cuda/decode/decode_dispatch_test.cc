// Host-only tests of the decode family's instance table and API checks: no GPU is touched
// (DecodeCanImplement, DecodeCandidateConfigs and ResolveDecodeSplits never call CUDA).
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "decode/decode_dispatch.h"
#include "fusetune/kernels/split_kv.h"
#include "gtest/gtest.h"

namespace fusetune::cuda {
namespace {

// The H200's opt-in shared memory per block: every compiled instance fits it.
constexpr int64_t kLargeSmem = 232448;
// The default (no opt-in) limit: the deeper pipelines of the d128 tiles do not fit.
constexpr int64_t kSmallSmem = 48 * 1024;

// The serving shape of the decode preset: batch 16, 32 query heads over 8 KV heads, d128, bf16.
AttentionProblem Decode(int cache_len, int page_block_size = 0, DType dtype = DType::kBf16, int q_heads = 32,
                        int kv_heads = 8, int head_dim = 128) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 16;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.q_len = 1;
  p.kv_len = cache_len;
  p.head_dim = head_dim;
  p.causal = true;
  p.dtype = dtype;
  p.page_block_size = page_block_size;
  return p;
}

// 512 new tokens over an 8192-token prefix held in pages of 16, shared by every sequence.
AttentionProblem PagedPrefill(DType dtype = DType::kBf16, int head_dim = 128) {
  AttentionProblem p = Decode(8192 + 512, 16, dtype, 32, 8, head_dim);
  p.kind = ProblemKind::kPrefill;
  p.q_len = 512;
  p.shared_prefix_pages = 8192 / 16;
  return p;
}

Precision StoragePrecision(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return Precision::kFp32;
    case DType::kFp16: return Precision::kFp16;
    case DType::kBf16: return Precision::kBf16;
  }
  return Precision::kFp32;
}

// The first compiled config of (head_dim, dtype) with `block_m`, split_kv 1.
KernelConfig CompiledWithBlockM(int head_dim, DType dtype, int block_m) {
  for (const KernelConfig& c : DecodeCompiledConfigs(head_dim, dtype)) {
    if (c.block_m == block_m) return c;
  }
  ADD_FAILURE() << "no compiled decode config with block_m " << block_m << " for d" << head_dim << " "
                << DTypeName(dtype);
  return KernelConfig{};
}

bool Mentions(const absl::Status& s, std::string_view word) {
  return std::string(s.message()).find(word) != std::string::npos;
}

TEST(DecodeCompiledConfigs, CoverTheSupportedHeadDimsAndStorageTypesOnly) {
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      SCOPED_TRACE(std::to_string(d) + " " + std::string(DTypeName(dtype)));
      const std::vector<KernelConfig> configs = DecodeCompiledConfigs(d, dtype);
      EXPECT_FALSE(configs.empty());
      std::set<std::string> keys;
      for (const KernelConfig& c : configs) {
        EXPECT_TRUE(c.Validate().ok()) << c.Key() << ": " << c.Validate();
        EXPECT_EQ(c.variant, Variant::kFused) << c.Key();
        EXPECT_EQ(c.precision, StoragePrecision(dtype)) << c.Key();
        EXPECT_EQ(c.split_kv, 1) << c.Key();
        EXPECT_TRUE(keys.insert(c.Key()).second) << "duplicate " << c.Key();
      }
    }
  }
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    EXPECT_TRUE(DecodeCompiledConfigs(96, dtype).empty()) << DTypeName(dtype);
  }
}

TEST(DecodeCompiledConfigs, E4m3KvHasItsOwnFp16InstancesForDecodeAndPagedPrefill) {
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp16, DType::kBf16}) {
      SCOPED_TRACE(std::to_string(d) + " " + std::string(DTypeName(dtype)));
      const std::vector<KernelConfig> configs = DecodeCompiledConfigs(d, dtype, KvStorage::kE4m3);
      std::set<int> block_ms;
      for (const KernelConfig& c : configs) {
        EXPECT_EQ(c.precision, Precision::kFp16) << c.Key();
        block_ms.insert(c.block_m);
      }
      EXPECT_EQ(block_ms, (std::set<int>{16, 64}));
      AttentionProblem p = Decode(8192, 16, dtype, 32, 8, d);
      p.kv_storage = KvStorage::kE4m3;
      AttentionProblem prefill = PagedPrefill(dtype, d);
      prefill.kv_storage = KvStorage::kE4m3;
      for (const AttentionProblem& problem : {p, prefill}) {
        const std::vector<KernelConfig> candidates = DecodeCandidateConfigs(problem);
        EXPECT_FALSE(candidates.empty()) << problem.Key();
        for (const KernelConfig& c : candidates) {
          EXPECT_TRUE(DecodeCanImplement(problem, c, kLargeSmem).ok()) << problem.Key() << " " << c.Key();
        }
      }
      // The 16-bit instances of the same tile do not read e4m3: a bf16 config is refused, naming fp16.
      KernelConfig wrong = CompiledWithBlockM(d, dtype, 16);
      const absl::Status s = DecodeCanImplement(p, wrong, kLargeSmem);
      if (dtype == DType::kBf16) {
        EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
        EXPECT_TRUE(Mentions(s, "e4m3")) << s;
      }
    }
  }
  EXPECT_TRUE(DecodeCompiledConfigs(64, DType::kFp32, KvStorage::kE4m3).empty());
}

TEST(UsesDecodeFamily, DecodeProblemsAndPagedPrefillsOnly) {
  EXPECT_TRUE(UsesDecodeFamily(Decode(1024)));
  EXPECT_TRUE(UsesDecodeFamily(Decode(1024, 16)));
  EXPECT_TRUE(UsesDecodeFamily(PagedPrefill()));
  AttentionProblem contiguous_prefill = PagedPrefill();
  contiguous_prefill.page_block_size = 0;
  contiguous_prefill.shared_prefix_pages = 0;
  ASSERT_TRUE(contiguous_prefill.Validate().ok()) << contiguous_prefill.Validate();
  EXPECT_FALSE(UsesDecodeFamily(contiguous_prefill));
}

// The problems the tuner meets against a KV cache: the decode preset's serving shape at cache
// lengths 1K..32K, contiguous and paged by 16 and by 1; MQA; fp32 and fp16 storage; several new
// tokens; a prefill of 512 new tokens over a paged 8K prefix.
std::vector<AttentionProblem> CacheProblems() {
  std::vector<AttentionProblem> out;
  for (int cache : {1024, 8192, 32768}) {
    for (int page : {0, 16, 1}) out.push_back(Decode(cache, page));
  }
  out.push_back(Decode(8192, 0, DType::kBf16, 8, 1));   // MQA
  out.push_back(Decode(8192, 16, DType::kBf16, 8, 1));  // MQA, paged
  out.push_back(Decode(4096, 0, DType::kFp32));
  out.push_back(Decode(4096, 16, DType::kFp32, 32, 8, 64));
  out.push_back(Decode(4096, 16, DType::kFp16, 32, 8, 64));
  AttentionProblem four_tokens = Decode(2048, 16, DType::kFp16);
  four_tokens.q_len = 4;
  out.push_back(four_tokens);
  AttentionProblem sixteen_tokens_mqa = Decode(2048, 0, DType::kBf16, 32, 1, 64);
  sixteen_tokens_mqa.q_len = 16;
  out.push_back(sixteen_tokens_mqa);
  out.push_back(PagedPrefill());
  out.push_back(PagedPrefill(DType::kFp16, 64));
  out.push_back(PagedPrefill(DType::kFp32));
  return out;
}

TEST(DecodeCanImplement, AcceptsEveryCandidateWithTheLargestSharedMemory) {
  for (const AttentionProblem& p : CacheProblems()) {
    SCOPED_TRACE(p.Key());
    ASSERT_TRUE(p.Validate().ok()) << p.Validate();
    const std::vector<KernelConfig> candidates = DecodeCandidateConfigs(p);
    EXPECT_FALSE(candidates.empty());
    for (const KernelConfig& c : candidates) {
      const absl::Status s = DecodeCanImplement(p, c, kLargeSmem);
      EXPECT_TRUE(s.ok()) << c.Key() << ": " << s;
    }
  }
}

TEST(DecodeCanImplement, RefusesAPrecisionOtherThanTheStorageTypes) {
  AttentionProblem fp32 = Decode(4096, 16, DType::kFp32);
  KernelConfig c = CompiledWithBlockM(128, DType::kFp32, 16);
  ASSERT_TRUE(DecodeCanImplement(fp32, c, kLargeSmem).ok());
  c.precision = Precision::kTf32;
  absl::Status s = DecodeCanImplement(fp32, c, kLargeSmem);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(Mentions(s, "precision")) << s;

  const AttentionProblem bf16 = Decode(4096, 16);
  c = CompiledWithBlockM(128, DType::kBf16, 16);
  ASSERT_TRUE(DecodeCanImplement(bf16, c, kLargeSmem).ok());
  for (Precision other : {Precision::kFp32, Precision::kTf32, Precision::kFp16}) {
    c.precision = other;
    s = DecodeCanImplement(bf16, c, kLargeSmem);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << PrecisionName(other) << ": " << s;
    EXPECT_TRUE(Mentions(s, "precision")) << s;
  }
}

TEST(DecodeCanImplement, RefusesAnUncompiledTile) {
  const AttentionProblem p = Decode(4096, 16);
  const KernelConfig compiled = CompiledWithBlockM(128, DType::kBf16, 16);
  KernelConfig c = compiled;
  c.block_s = 48;
  absl::Status s = DecodeCanImplement(p, c, kLargeSmem);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(Mentions(s, "no compiled")) << s;
  c = compiled;
  c.threads = 1024;
  EXPECT_EQ(DecodeCanImplement(p, c, kLargeSmem).code(), absl::StatusCode::kUnimplemented);
  c = compiled;
  c.stages = 7;
  EXPECT_EQ(DecodeCanImplement(p, c, kLargeSmem).code(), absl::StatusCode::kUnimplemented);
  // A head_dim without instances.
  AttentionProblem d96 = p;
  d96.head_dim = 96;
  ASSERT_TRUE(d96.Validate().ok()) << d96.Validate();
  s = DecodeCanImplement(d96, compiled, kLargeSmem);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(Mentions(s, "head_dim 96")) << s;
}

TEST(DecodeCanImplement, RefusesASplitOfAPagedPrefill) {
  const AttentionProblem p = PagedPrefill();
  KernelConfig c = CompiledWithBlockM(128, DType::kBf16, 64);
  ASSERT_TRUE(DecodeCanImplement(p, c, kLargeSmem).ok());
  c.split_kv = 4;
  const absl::Status s = DecodeCanImplement(p, c, kLargeSmem);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(Mentions(s, "split_kv")) << s;
  // The same split of a decode problem is fine.
  EXPECT_TRUE(DecodeCanImplement(Decode(4096, 16), c, kLargeSmem).ok());
}

TEST(DecodeCanImplement, RefusesThePingpongAndPersistentSchedules) {
  for (const AttentionProblem& p : {Decode(4096, 16), PagedPrefill()}) {
    const KernelConfig compiled = CompiledWithBlockM(128, DType::kBf16, p.kind == ProblemKind::kDecode ? 16 : 64);
    ASSERT_TRUE(DecodeCanImplement(p, compiled, kLargeSmem).ok()) << p.Key();
    KernelConfig c = compiled;
    c.pingpong = true;
    absl::Status s = DecodeCanImplement(p, c, kLargeSmem);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_TRUE(Mentions(s, "pingpong or persistent")) << s;
    c = compiled;
    c.persistent = true;
    EXPECT_EQ(DecodeCanImplement(p, c, kLargeSmem).code(), absl::StatusCode::kUnimplemented);
  }
}

// Each compiled instance is refused exactly when its shared memory exceeds the limit, and at
// 48 KiB some are (the exact-fp32 tiles and the deep pipelines need the opt-in).
TEST(DecodeCanImplement, RefusesAConfigOverTheSharedMemoryLimit) {
  int over = 0;
  for (decode::DecodeInstanceList list :
       {decode::DecodeFp32Instances(), decode::DecodeFp16Instances(), decode::DecodeBf16Instances()}) {
    for (int i = 0; i < list.size; ++i) {
      const decode::DecodeInstance& inst = list.data[i];
      const DType dtype = static_cast<DType>(static_cast<int>(inst.storage));
      AttentionProblem p = Decode(4096, 16, dtype, 32, 8, inst.head_dim);
      KernelConfig c;
      c.variant = Variant::kFused;
      c.precision = StoragePrecision(dtype);
      c.block_m = inst.block_m;
      c.block_s = inst.block_s;
      c.threads = inst.threads;
      c.stages = inst.stages;
      ASSERT_GT(inst.smem_bytes, 0) << c.Key();
      EXPECT_TRUE(DecodeCanImplement(p, c, kLargeSmem).ok()) << c.Key() << " needs " << inst.smem_bytes;
      const absl::Status s = DecodeCanImplement(p, c, kSmallSmem);
      if (inst.smem_bytes > kSmallSmem) {
        ++over;
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.Key() << ": " << s;
        EXPECT_TRUE(Mentions(s, "shared memory")) << s;
      } else {
        EXPECT_TRUE(s.ok()) << c.Key() << ": " << s;
      }
    }
  }
  EXPECT_GT(over, 0) << "no instance needs more than 48 KiB: pick a smaller limit for this test";
}

TEST(ResolveDecodeSplits, AFixedSplitIsTheConfigsAndAutoIsChooseSplitKvs) {
  for (const AttentionProblem& p : {Decode(1024), Decode(32768, 16), Decode(8192, 1, DType::kBf16, 8, 1)}) {
    SCOPED_TRACE(p.Key());
    KernelConfig c = CompiledWithBlockM(128, DType::kBf16, 16);
    for (int split : kGpuDecodeSplits) {
      c.split_kv = split;
      for (int resident : {0, 1, 132, 4 * 132, 8 * 132}) {
        const int expected = split == kAutoSplitKv ? ChooseSplitKv(p, resident < 1 ? 1 : resident) : split;
        EXPECT_EQ(ResolveDecodeSplits(p, c, resident), expected) << "split " << split << " resident " << resident;
      }
    }
  }
  // One sequence with a long cache on a large GPU: the plan splits.
  AttentionProblem lone = Decode(65536);
  lone.batch = 1;
  KernelConfig c = CompiledWithBlockM(128, DType::kBf16, 16);
  c.split_kv = kAutoSplitKv;
  EXPECT_GT(ResolveDecodeSplits(lone, c, 4 * 132), 1);
}

TEST(DecodeWorkspaceFloats, NoneForOneSplitAndAPartialRowPerSplitOtherwise) {
  const AttentionProblem p = Decode(4096);  // 16 tokens x 32 heads x d128
  EXPECT_EQ(DecodeWorkspaceFloats(p, 1), 0);
  EXPECT_EQ(DecodeWorkspaceFloats(p, 4), int64_t{4} * 16 * 32 * (128 + 2));
}

// block_m 64 (the prefill tiles) only where a (sequence, KV head) has more than 16 rows
// (query heads per KV head x new tokens); decode candidates carry every GPU split, a prefill
// over a cache split 1 only.
TEST(DecodeCandidateConfigs, OfferBlockM64OnlyForMoreThan16RowsPerKvHead) {
  struct Shape {
    int q_heads, kv_heads, q_len;
  };
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (Shape shape : {Shape{32, 8, 1}, Shape{32, 8, 4}, Shape{32, 8, 5}, Shape{8, 1, 1}, Shape{32, 1, 1},
                        Shape{32, 32, 16}, Shape{32, 16, 8}, Shape{32, 16, 9}}) {
      AttentionProblem p = Decode(4096, 16, dtype, shape.q_heads, shape.kv_heads);
      p.q_len = shape.q_len;
      SCOPED_TRACE(p.Key());
      ASSERT_TRUE(p.Validate().ok()) << p.Validate();
      const bool many_rows = p.heads_per_kv() * p.q_len > 16;
      bool has_64 = false;
      std::set<int> splits;
      for (const KernelConfig& c : DecodeCandidateConfigs(p)) {
        has_64 = has_64 || c.block_m == 64;
        splits.insert(c.split_kv);
      }
      EXPECT_EQ(has_64, many_rows);
      EXPECT_EQ(splits, std::set<int>(std::begin(kGpuDecodeSplits), std::end(kGpuDecodeSplits)));
    }
  }
  // fp32 has no 64-row instance, whatever the rows.
  for (const KernelConfig& c : DecodeCandidateConfigs(Decode(4096, 16, DType::kFp32, 32, 1))) {
    EXPECT_EQ(c.block_m, 16) << c.Key();
  }
  const AttentionProblem prefill = PagedPrefill();
  bool has_64 = false;
  for (const KernelConfig& c : DecodeCandidateConfigs(prefill)) {
    has_64 = has_64 || c.block_m == 64;
    EXPECT_EQ(c.split_kv, 1) << c.Key();
  }
  EXPECT_TRUE(has_64);
}

}  // namespace
}  // namespace fusetune::cuda
