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
  absl::StatusOr<std::vector<double>> ref = ReferenceAttention(p.Unpaged(), in.q, k, v);
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
  // The GPU fused kernels have no split-KV path.
  EXPECT_EQ(DefaultConfig("cuda", p)->split_kv, 1);
  EXPECT_EQ(DefaultConfig("hip", p)->split_kv, 1);
  p.kind = ProblemKind::kPrefill;
  EXPECT_EQ(DefaultConfig("cpu", p)->split_kv, 1);
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

}  // namespace
}  // namespace fusetune
