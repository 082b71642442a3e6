// The default config must run wherever a problem is supported: it is what the service sends
// when nothing is tuned and what the client cache serves while the service is unreachable.
#include "fusetune/kernels/default_config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/reference.h"
#include "gtest/gtest.h"
#ifdef FUSETUNE_HAVE_CUDA_FUSED
#include "attention_params.h"
#include "fused/fused_configs.h"
#endif
#ifdef FUSETUNE_HAVE_CUDA_DECODE
#include "decode/decode_dispatch.h"
#endif

namespace fusetune {
namespace {

enum class Lengths { kUniform, kVarlen, kKeyPadding };

// One small problem of every class: storage dtype x head_dim x causal x head grouping
// (MHA, GQA, MQA) x lengths (uniform, varlen, key padding). Odd lengths on purpose.
std::vector<AttentionProblem> ProblemClasses(const std::vector<int>& head_dims) {
  std::vector<AttentionProblem> out;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : head_dims) {
      for (bool causal : {false, true}) {
        for (int kv_heads : {4, 2, 1}) {
          for (Lengths lengths : {Lengths::kUniform, Lengths::kVarlen, Lengths::kKeyPadding}) {
            AttentionProblem p;
            p.batch = 2;
            p.q_heads = 4;
            p.kv_heads = kv_heads;
            p.q_len = 37;
            p.kv_len = 53;
            p.head_dim = d;
            p.causal = causal;
            p.dtype = dtype;
            if (lengths == Lengths::kVarlen) {
              p.cu_seqlens_q = {0, 37, 58};
              p.cu_seqlens_k = {0, 53, 70};
            } else if (lengths == Lengths::kKeyPadding) {
              p.kv_valid_lens = {53, 19};
            }
            out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

enum class Cache { kContiguous, kPaged, kPagedVarlen, kPagedSharedPrefix };

// One small decode problem of every class: storage dtype x head_dim x causal x head grouping
// x KV cache (contiguous, paged uniform, paged varlen, paged with a shared prefix), three new
// tokens per sequence, cache lengths that are not page multiples.
std::vector<AttentionProblem> DecodeProblemClasses() {
  std::vector<AttentionProblem> out;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (bool causal : {false, true}) {
        for (int kv_heads : {4, 2, 1}) {
          for (Cache cache : {Cache::kContiguous, Cache::kPaged, Cache::kPagedVarlen, Cache::kPagedSharedPrefix}) {
            AttentionProblem p;
            p.kind = ProblemKind::kDecode;
            p.batch = 2;
            p.q_heads = 4;
            p.kv_heads = kv_heads;
            p.q_len = 3;
            p.kv_len = 53;
            p.kv_valid_lens = {53, 19};
            p.head_dim = d;
            p.causal = causal;
            p.dtype = dtype;
            if (cache == Cache::kPagedVarlen) {
              p.kv_valid_lens.clear();
              p.cu_seqlens_q = {0, 3, 4};
              p.cu_seqlens_k = {0, 53, 70};
            }
            if (cache != Cache::kContiguous) p.page_block_size = cache == Cache::kPagedVarlen ? 7 : 16;
            if (cache == Cache::kPagedSharedPrefix) p.shared_prefix_pages = 1;
            out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

// Pages 0..n-1 in reverse order, one distinct page per table entry (the shared prefix pages
// the same in every row).
std::vector<int32_t> ReversedTable(const AttentionProblem& p) {
  std::vector<int32_t> table(static_cast<size_t>(p.BlockTableEntries()), 0);
  int32_t next = static_cast<int32_t>(p.PoolPages()) - 1 - p.shared_prefix_pages;
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.PagesOfSequence(b); ++i) {
      table[static_cast<size_t>(b) * p.BlockTableWidth() + i] =
          i < p.shared_prefix_pages ? static_cast<int32_t>(p.PoolPages()) - 1 - i : next--;
    }
  }
  return table;
}

TEST(DefaultConfig, UnknownBackendIsInvalidArgument) {
  AttentionProblem p;
  p.q_len = p.kv_len = 8;
  EXPECT_TRUE(absl::IsInvalidArgument(DefaultConfig("rocm", p).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DefaultConfig("", p).status()));
}

TEST(DefaultConfig, OfDeviceClassIsItsBackendsAndTheCpusForAnUnknownBackend) {
  AttentionProblem p;
  p.q_len = p.kv_len = 8;
  p.dtype = DType::kBf16;
  EXPECT_EQ(DefaultConfigOfDeviceClass("cuda/NVIDIA-H200/sm90", p), *DefaultConfig("cuda", p));
  EXPECT_EQ(DefaultConfigOfDeviceClass("hip/AMD-MI300X/gfx942", p), *DefaultConfig("hip", p));
  EXPECT_EQ(DefaultConfigOfDeviceClass("tpu/v5", p), *DefaultConfig("cpu", p));
  EXPECT_EQ(DefaultConfigOfDeviceClass("", p), *DefaultConfig("cpu", p));
}

TEST(DefaultConfig, BackendOfDeviceClassIsTheFirstPart) {
  EXPECT_EQ(BackendOfDeviceClass("cuda/NVIDIA-H200/sm90"), "cuda");
  EXPECT_EQ(BackendOfDeviceClass("cpu/AMD-EPYC/avx512"), "cpu");
  EXPECT_EQ(BackendOfDeviceClass("hip"), "hip");
  EXPECT_EQ(BackendOfDeviceClass(""), "");
}

TEST(DefaultConfig, GpuDefaultComputesInTheStorageDtypeNeverTf32) {
  AttentionProblem p;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    p.dtype = dtype;
    for (const char* backend : {"cuda", "hip"}) {
      absl::StatusOr<KernelConfig> c = DefaultConfig(backend, p);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_NE(c->precision, Precision::kTf32) << backend;
      EXPECT_EQ(static_cast<int>(c->precision),
                dtype == DType::kFp32 ? static_cast<int>(Precision::kFp32)
                : dtype == DType::kFp16 ? static_cast<int>(Precision::kFp16)
                                        : static_cast<int>(Precision::kBf16));
    }
  }
}

// The CPU default of `p` passes CanImplement and is among the candidates; with `run`, it
// also runs and matches the reference (a paged problem's through ReversedTable).
void ExpectCpuDefaultImplementedAndCorrect(Backend& cpu, const AttentionProblem& p, bool run) {
  ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
  absl::StatusOr<KernelConfig> c = DefaultConfig("cpu", p);
  ASSERT_TRUE(c.ok()) << c.status();
  const absl::Status can = cpu.CanImplement(p, *c);
  ASSERT_TRUE(can.ok()) << p.Key() << " " << c->Key() << ": " << can;
  // ... and it is one of the configs the tuner's space can reach.
  const std::vector<KernelConfig> candidates = cpu.CandidateConfigs(p);
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), *c), candidates.end())
      << p.Key() << " " << c->Key() << " is not among the CPU backend's candidates";
  if (!run) return;
  testing_util::Inputs in = testing_util::RandomInputs(p, 7);
  testing_util::RunOptions options;
  std::vector<float> k = in.k, v = in.v;
  if (p.is_paged()) {
    options.block_table = ReversedTable(p);
    absl::StatusOr<std::vector<float>> gk = GatherPagedKV(p, in.k, options.block_table);
    absl::StatusOr<std::vector<float>> gv = GatherPagedKV(p, in.v, options.block_table);
    ASSERT_TRUE(gk.ok() && gv.ok()) << p.Key() << ": " << gk.status() << gv.status();
    k = *gk;
    v = *gv;
  }
  absl::StatusOr<std::vector<float>> out = testing_util::RunBackend(cpu, p, *c, in, options);
  ASSERT_TRUE(out.ok()) << p.Key() << ": " << out.status();
  absl::StatusOr<std::vector<double>> ref = ReferenceAttention(p.Unpaged(), in.q, k, v, testing_util::ScalesOf(p, in));
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_LE(testing_util::MaxAbsError(*out, *ref), testing_util::Tolerance(c->precision, p.dtype))
      << p.Key() << " " << c->Key();
}

// The CPU backend implements the default for every class and computes it correctly.
TEST(DefaultConfig, CpuDefaultRunsEveryProblemClassAndMatchesTheReference) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  int checked = 0;
  for (const AttentionProblem& p : ProblemClasses({32, 64, 96, 128, 256})) {
    // Running every class is cheap at these sizes; one head_dim per dtype keeps it short.
    const bool run = p.head_dim == 64 || p.head_dim == 256;
    ExpectCpuDefaultImplementedAndCorrect(*cpu, p, run);
    checked += run ? 1 : 0;
  }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 3);
}

TEST(DefaultConfig, CpuDecodeDefaultPlansTheSplitAtLaunch) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.q_len = 1;
  p.kv_len = 4096;
  EXPECT_EQ(DefaultConfig("cpu", p)->split_kv, kAutoSplitKv);
  // The CUDA decode family plans its split at launch too; HIP has no split-KV path.
  EXPECT_EQ(DefaultConfig("cuda", p)->split_kv, kAutoSplitKv);
  EXPECT_EQ(DefaultConfig("hip", p)->split_kv, 1);
  p.kind = ProblemKind::kPrefill;
  EXPECT_EQ(DefaultConfig("cpu", p)->split_kv, 1);
  EXPECT_EQ(DefaultConfig("cuda", p)->split_kv, 1);
  // A prefill over a paged cache runs on the decode family, unsplit, with its 64-row tiles
  // (fp32 storage: the 16-row SIMT tiles, the only fp32 ones).
  p.page_block_size = 16;
  EXPECT_EQ(DefaultConfig("cuda", p)->split_kv, 1);
  EXPECT_EQ(DefaultConfig("cuda", p)->block_m, 16);
  p.dtype = DType::kBf16;
  EXPECT_EQ(DefaultConfig("cuda", p)->split_kv, 1);
  EXPECT_EQ(DefaultConfig("cuda", p)->block_m, 64);
}

// The same for decode problems, contiguous and paged.
TEST(DefaultConfig, CpuDefaultRunsEveryDecodeClassAndMatchesTheReference) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  int checked = 0;
  for (const AttentionProblem& p : DecodeProblemClasses()) {
    ExpectCpuDefaultImplementedAndCorrect(*cpu, p, /*run=*/true);
    ++checked;
  }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 4);
}

// K/V stored as e4m3: every fp16/bf16 decode class and the prefill classes at head_dim 64.
TEST(DefaultConfig, CpuDefaultRunsEveryE4m3ClassAndMatchesTheReference) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  int checked = 0;
  std::vector<AttentionProblem> classes = DecodeProblemClasses();
  for (const AttentionProblem& p : ProblemClasses({64})) classes.push_back(p);
  for (AttentionProblem p : classes) {
    if (p.dtype == DType::kFp32) continue;  // e4m3 needs fp16 or bf16 queries
    p.kv_storage = KvStorage::kE4m3;
    ExpectCpuDefaultImplementedAndCorrect(*cpu, p, /*run=*/true);
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 2 * 2 * 3 * 4 + 2 * 2 * 3 * 3);
}

#ifdef FUSETUNE_HAVE_CUDA_FUSED
// Host-only: the CUDA default has a compiled fused instance for every supported class and
// fits both GPU generations' shared memory (no GPU is touched).
TEST(DefaultConfig, CudaDefaultHasACompiledInstanceForEveryProblemClass) {
  struct Gpu {
    int sm_version;
    int64_t smem_per_block;
  };
  // Opt-in shared memory per block: A100 (sm_80), the sm_86/sm_89 parts, H100/H200 (sm_90).
  const Gpu gpus[] = {{80, 163 * 1024}, {86, 99 * 1024}, {89, 99 * 1024}, {90, 227 * 1024}};
  int checked = 0;
  for (const AttentionProblem& p : ProblemClasses({64, 128})) {
    absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const Gpu& gpu : gpus) {
      const absl::Status can = cuda::FusedCanImplement(p, *c, gpu.smem_per_block, gpu.sm_version);
      EXPECT_TRUE(can.ok()) << "sm_" << gpu.sm_version << " " << p.Key() << " " << c->Key() << ": " << can;
      ++checked;
    }
    // The compiled table is where the CUDA backend's candidates come from.
    const std::vector<KernelConfig> compiled = cuda::FusedCompiledConfigs(p.head_dim, p.dtype);
    EXPECT_NE(std::find(compiled.begin(), compiled.end(), *c), compiled.end()) << p.Key() << " " << c->Key();
  }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 3 * 4);
}
#else
TEST(DefaultConfig, CudaDefaultHasACompiledInstanceForEveryProblemClass) {
  GTEST_SKIP() << "built without the CUDA fused kernel (FUSETUNE_WITH_CUDA=OFF or no nvcc)";
}
#endif

// Every class of problem the CUDA decode family serves: DecodeProblemClasses above, then the
// serving shapes (GQA 32/8 and MQA 32/1 at 1, 4 and 16 new tokens) contiguous and paged by 1
// and by 16, and prefills over a paged cache (pages of 1 and 16, with and without a shared
// prefix, varlen) for each storage dtype and head_dim.
std::vector<AttentionProblem> CudaDecodeFamilyClasses() {
  std::vector<AttentionProblem> out = DecodeProblemClasses();
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (int kv_heads : {8, 1}) {
        for (int q_len : {1, 4, 16}) {
          for (int page : {0, 1, 16}) {
            AttentionProblem p;
            p.kind = ProblemKind::kDecode;
            p.batch = 3;
            p.q_heads = 32;
            p.kv_heads = kv_heads;
            p.q_len = q_len;
            p.kv_len = 300;
            p.kv_valid_lens = {300, 17, q_len};
            p.head_dim = d;
            p.causal = true;
            p.dtype = dtype;
            p.page_block_size = page;
            out.push_back(p);
          }
        }
      }
      for (int page : {1, 16}) {
        for (bool varlen : {false, true}) {
          AttentionProblem p;
          p.batch = 2;
          p.q_heads = 8;
          p.kv_heads = 2;
          p.q_len = 40;
          p.kv_len = 40 + 96;
          p.head_dim = d;
          p.causal = true;
          p.dtype = dtype;
          p.page_block_size = page;
          if (varlen) {
            p.cu_seqlens_q = {0, 40, 57};
            p.cu_seqlens_k = {0, 136, 136 + 57 + 64};
            p.kv_len = 136;  // the longest sequence's keys
          } else {
            p.shared_prefix_pages = 96 / page;  // the 96-key prompt shared by both sequences
          }
          out.push_back(p);
        }
      }
    }
  }
  return out;
}

#ifdef FUSETUNE_HAVE_CUDA_DECODE
// Host-only: the CUDA default of every decode and paged class is a compiled decode-family
// instance within the 99 KiB of shared memory per block of sm_86/sm_89 (the smallest of the
// supported GPUs), and one of the candidates the tuner's space is built from.
TEST(DefaultConfig, CudaDefaultOfEveryDecodeAndPagedClassIsADecodeFamilyInstance) {
  constexpr int64_t kSm86SharedMemory = 101376;
  int checked = 0;
  for (const AttentionProblem& p : CudaDecodeFamilyClasses()) {
    ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
    ASSERT_TRUE(cuda::UsesDecodeFamily(p)) << p.Key();
    absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
    ASSERT_TRUE(c.ok()) << c.status();
    const absl::Status can = cuda::DecodeCanImplement(p, *c, kSm86SharedMemory);
    EXPECT_TRUE(can.ok()) << p.Key() << " " << c->Key() << ": " << can;
    const std::vector<KernelConfig> candidates = cuda::DecodeCandidateConfigs(p);
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), *c), candidates.end())
        << p.Key() << " " << c->Key() << " is not among the decode family's candidates";
    EXPECT_EQ(c->split_kv, p.kind == ProblemKind::kDecode ? kAutoSplitKv : 1) << p.Key();
    ++checked;
  }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 4 + 3 * 2 * (2 * 3 * 3 + 2 * 2));
}
#else
TEST(DefaultConfig, CudaDefaultOfEveryDecodeAndPagedClassIsADecodeFamilyInstance) {
  GTEST_SKIP() << "built without the CUDA decode kernels (FUSETUNE_WITH_CUDA=OFF or no nvcc)";
}
#endif

// The paged prefill classes above on the CPU default too (the CPU backend serves every class).
TEST(DefaultConfig, CpuDefaultRunsEveryPagedPrefillClassAndMatchesTheReference) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  int checked = 0;
  for (const AttentionProblem& p : CudaDecodeFamilyClasses()) {
    if (p.kind != ProblemKind::kPrefill || p.dtype != DType::kFp16) continue;
    ExpectCpuDefaultImplementedAndCorrect(*cpu, p, /*run=*/true);
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 2 * 2);
}

}  // namespace
}  // namespace fusetune
