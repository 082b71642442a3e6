#include "fusetune/kernels/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <set>
#include <thread>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu_backend_internal.h"
#include "cpu_test_util.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"
#include "thread_pool.h"

namespace fusetune {
// Readable names in parameterized test output.
void PrintTo(Variant v, std::ostream* os) { *os << VariantName(v); }
void PrintTo(DType d, std::ostream* os) { *os << DTypeName(d); }
void PrintTo(Precision p, std::ostream* os) { *os << PrecisionName(p); }

namespace {

using ::testing::HasSubstr;
using testing_util::Describe;
using testing_util::Inputs;
using testing_util::MaxAbsError;
using testing_util::RandomInputs;
using testing_util::RunBackend;
using testing_util::Tolerance;

constexpr Variant kVariants[] = {Variant::kFused, Variant::kPartial, Variant::kMaterialized};

AttentionProblem Problem(int q, int k, int d = 64, bool causal = false) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = d;
  p.causal = causal;
  return p;
}

KernelConfig Config(Variant variant, int bm = 32, int bs = 32, int threads = 2,
                    Precision precision = Precision::kFp32) {
  return testing_util::CpuConfig(variant, bm, bs, threads, precision);
}

// Runs every kernel build this host can run and checks every output element against the
// fp64 reference.
void ExpectMatchesReference(const AttentionProblem& problem, const KernelConfig& config,
                            uint64_t seed = 1) {
  Inputs in = RandomInputs(problem, seed);
  auto ref = ReferenceAttention(problem, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
    SCOPED_TRACE(Describe(problem, config) + " isa=" + isa);
    auto out = RunBackend(*backend, problem, config, in);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_LE(MaxAbsError(*out, *ref), Tolerance(config.precision, problem.dtype));
  }
}

// Every variant x storage dtype x precision, causal with q != k and GQA, lengths that are
// not multiples of any tile.
class CpuVariantDtypePrecision
    : public ::testing::TestWithParam<std::tuple<Variant, DType, Precision>> {};

TEST_P(CpuVariantDtypePrecision, MatchesFp64Reference) {
  const auto [variant, dtype, precision] = GetParam();
  AttentionProblem p = Problem(67, 129, 64, /*causal=*/true);
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.dtype = dtype;
  ExpectMatchesReference(p, Config(variant, 32, 64, 2, precision));
  p.causal = false;
  ExpectMatchesReference(p, Config(variant, 16, 32, 3, precision), 7);
}

INSTANTIATE_TEST_SUITE_P(
    AllCombinations, CpuVariantDtypePrecision,
    ::testing::Combine(::testing::ValuesIn(kVariants),
                       ::testing::Values(DType::kFp32, DType::kFp16, DType::kBf16),
                       ::testing::Values(Precision::kFp32, Precision::kTf32, Precision::kFp16,
                                         Precision::kBf16)),
    [](const auto& info) {
      return std::string(VariantName(std::get<0>(info.param))) + "_" +
             std::string(DTypeName(std::get<1>(info.param))) + "_" +
             std::string(PrecisionName(std::get<2>(info.param)));
    });

TEST(CpuBackend, OddLengthsAndEveryTileSizeMatchReference) {
  for (Variant variant : kVariants) {
    for (int q : {1, 17, 67, 129}) {
      for (int k : {1, 17, 129}) {
        for (bool causal : {false, true}) {
          const int tile = 16 << ((q + k) % 4);  // 16, 32, 64 or 128
          ExpectMatchesReference(Problem(q, k, 32, causal), Config(variant, tile, 128 / (tile / 16), 2));
        }
      }
    }
  }
}

TEST(CpuBackend, HeadDimsFrom32To256MatchReference) {
  for (Variant variant : kVariants) {
    for (int d : {32, 40, 72, 128, 200, 256}) {
      ExpectMatchesReference(Problem(33, 45, d, true), Config(variant, 16, 16, 2));
    }
  }
}

TEST(CpuBackend, GroupedAndMultiQueryHeadsMatchReference) {
  for (Variant variant : kVariants) {
    AttentionProblem gqa = Problem(40, 50, 64, true);
    gqa.q_heads = 8;
    gqa.kv_heads = 2;
    ExpectMatchesReference(gqa, Config(variant, 16, 32, 2));
    AttentionProblem mqa = gqa;
    mqa.kv_heads = 1;
    ExpectMatchesReference(mqa, Config(variant, 32, 16, 3));
  }
}

TEST(CpuBackend, VarlenBatchWithEmptySequencesMatchesReference) {
  for (Variant variant : kVariants) {
    for (bool causal : {false, true}) {
      AttentionProblem p = Problem(0, 0, 64, causal);
      p.batch = 5;
      p.q_heads = 4;
      p.kv_heads = 2;
      p.cu_seqlens_q = {0, 17, 17, 80, 81, 120};  // lengths 17, 0, 63, 1, 39
      p.cu_seqlens_k = {0, 33, 40, 80, 80, 180};  // lengths 33, 7, 40, 0, 100
      p.q_len = 63;
      p.kv_len = 100;
      ASSERT_TRUE(p.Validate().ok()) << p.Validate();
      ExpectMatchesReference(p, Config(variant, 16, 32, 2));
    }
  }
}

// With one key the output row is exactly that key's V row: checks the in-kernel decoding of
// fp16 subnormals, the largest fp16 values and bf16 through every variant and kernel build.
TEST(CpuBackend, SingleKeyOutputReproducesStoredValuesExactly) {
  const std::vector<float> specials = {5.9604645e-08f /* smallest fp16 subnormal */, -3.0517578e-05f,
                                       6.0975552e-05f, 65504.0f, -65504.0f, 1.0f / 3, 0.0f, -2.5f,
                                       std::numeric_limits<float>::infinity()};
  for (DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32}) {
    AttentionProblem p = Problem(3, 1, 40, false);
    p.q_heads = 1;
    p.kv_heads = 1;
    p.dtype = dtype;
    Inputs in = RandomInputs(p, 12);
    for (int x = 0; x < 40; ++x) in.v[x] = specials[x % specials.size()];
    RoundToDType(dtype, in.v);
    for (Variant variant : kVariants) {
      for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
        auto out = RunBackend(*backend, p, Config(variant, 16, 16, 1), in);
        ASSERT_TRUE(out.ok()) << out.status();
        for (int t = 0; t < 3; ++t) {
          for (int x = 0; x < 40; ++x) {
            ASSERT_EQ((*out)[t * 40 + x], in.v[x])
                << isa << " " << VariantName(variant) << " " << DTypeName(dtype) << " col " << x;
          }
        }
      }
    }
  }
}

// Every element against the reference, non-finite ones included: a NaN reference element must
// be NaN in the output, a finite one finite and within the tolerance.
void ExpectMatchesReferenceIncludingNonFinite(const AttentionProblem& problem, const KernelConfig& config,
                                              const Inputs& in) {
  auto ref = ReferenceAttention(problem, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
    SCOPED_TRACE(Describe(problem, config) + " isa=" + isa);
    auto out = RunBackend(*backend, problem, config, in);
    ASSERT_TRUE(out.ok()) << out.status();
    int mismatched = 0;
    double worst = 0;
    for (size_t i = 0; i < out->size(); ++i) {
      if (std::isnan((*ref)[i]) || !std::isfinite((*out)[i])) {
        mismatched += std::isnan((*ref)[i]) == std::isnan((*out)[i]) ? 0 : 1;
        continue;
      }
      worst = std::max(worst, std::abs((*out)[i] - (*ref)[i]));
    }
    EXPECT_EQ(mismatched, 0) << "elements NaN in one of output and reference but not the other";
    EXPECT_LE(worst, Tolerance(config.precision, problem.dtype));
  }
}

// Softmax scales up to the largest allowed: the probabilities are exp2((s - m) * c), so the
// row max gets exactly 1 and nothing overflows (s * c alone is inf past ~FLT_MAX / 8 here).
TEST(CpuBackend, HugeSoftmaxScalesMatchReference) {
  for (float scale : {1e6f, 1e10f, 1e30f, 1e38f}) {
    AttentionProblem p = Problem(37, 53, 64, /*causal=*/true);
    p.softmax_scale = scale;
    for (Variant variant : kVariants) {
      ExpectMatchesReferenceIncludingNonFinite(p, Config(variant, 16, 32, 2), RandomInputs(p, 3));
    }
  }
}

// +Inf in one key component: that key's score is -inf for queries with a negative component
// (weight 0) and +inf for the others (NaN rows); with +Inf in every key, rows whose scores are
// all -inf are zeros, as the reference defines.
TEST(CpuBackend, InfinityInKeysFollowsTheReference) {
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (bool all_keys : {false, true}) {
      AttentionProblem p = Problem(21, 45, 32, /*causal=*/false);
      p.dtype = dtype;
      Inputs in = RandomInputs(p, all_keys ? 14 : 15);
      const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
      for (int key = 0; key < p.kv_len; ++key) {
        if (all_keys || key == 5) in.k[key * row + 1] = std::numeric_limits<float>::infinity();
      }
      for (Variant variant : kVariants) {
        ExpectMatchesReferenceIncludingNonFinite(p, Config(variant, 16, 16, 1), in);
      }
    }
  }
}

// Inf in a stored value reaches the output as Inf even when averaged with another key
// (an fp16 decoder that turned Inf into 65536 would give a finite 32768 here).
TEST(CpuBackend, InfinityInStoredValuesPropagates) {
  for (DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32}) {
    AttentionProblem p = Problem(2, 2, 32, false);
    p.q_heads = 1;
    p.kv_heads = 1;
    p.dtype = dtype;
    Inputs in;
    in.q.assign(p.QElements(), 0.0f);  // equal weights 1/2
    in.k.assign(p.KVElements(), 0.5f);
    in.v.assign(p.KVElements(), 1.0f);
    in.v[0] = std::numeric_limits<float>::infinity();
    in.v[32] = 0.0f;
    for (Variant variant : kVariants) {
      for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
        auto out = RunBackend(*backend, p, Config(variant, 16, 16, 1), in);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ((*out)[0], std::numeric_limits<float>::infinity())
            << isa << " " << VariantName(variant) << " " << DTypeName(dtype);
        EXPECT_EQ((*out)[1], 1.0f);
      }
    }
  }
}

TEST(CpuBackend, DecodeProblemsMatchReference) {
  for (Variant variant : kVariants) {
    AttentionProblem p = Problem(1, 1000, 128, false);
    p.kind = ProblemKind::kDecode;
    p.batch = 3;
    p.q_heads = 8;
    p.kv_heads = 1;
    p.kv_valid_lens = {1000, 517, 1};
    ExpectMatchesReference(p, Config(variant, 16, 128, 2));
    p.q_len = 4;  // speculative decoding: a few queries, causal
    p.causal = true;
    ExpectMatchesReference(p, Config(variant, 16, 64, 2), 3);
  }
}

TEST(CpuBackend, KeyPaddingWithZeroVisibleKeysGivesZeroRows) {
  for (Variant variant : kVariants) {
    for (bool causal : {false, true}) {
      AttentionProblem p = Problem(20, 40, 32, causal);
      p.batch = 3;
      p.kv_valid_lens = {40, 0, 13};
      auto backend = CreateCpuBackend();
      Inputs in = RandomInputs(p, 3);
      auto out = RunBackend(*backend, p, Config(variant, 16, 16, 2), in);
      ASSERT_TRUE(out.ok()) << out.status();
      auto ref = ReferenceAttention(p, in.q, in.k, in.v);
      ASSERT_TRUE(ref.ok());
      EXPECT_LE(MaxAbsError(*out, *ref), 1e-5) << Describe(p, Config(variant));
      const int64_t row = static_cast<int64_t>(p.q_heads) * p.head_dim;
      for (int64_t i = 20 * row; i < 40 * row; ++i) ASSERT_EQ((*out)[i], 0.0f) << i;  // sequence 1
    }
  }
}

TEST(CpuBackend, CausalRowsThatSeeNoKeyAreZerosNotNan) {
  for (Variant variant : kVariants) {
    AttentionProblem p = Problem(50, 20, 32, true);  // queries 0..29 see nothing
    auto backend = CreateCpuBackend();
    Inputs in = RandomInputs(p, 4);
    auto out = RunBackend(*backend, p, Config(variant, 16, 16, 2), in);
    ASSERT_TRUE(out.ok()) << out.status();
    const int64_t row = static_cast<int64_t>(p.q_heads) * p.head_dim;
    for (int64_t i = 0; i < 30 * row; ++i) ASSERT_EQ((*out)[i], 0.0f) << VariantName(variant) << " " << i;
    auto ref = ReferenceAttention(p, in.q, in.k, in.v);
    EXPECT_LE(MaxAbsError(*out, *ref), 1e-5);
  }
}

TEST(CpuBackend, ResultDoesNotDependOnThreadCount) {
  for (Variant variant : kVariants) {
    AttentionProblem p = Problem(100, 90, 64, true);
    p.q_heads = 3;
    p.kv_heads = 1;
    auto backend = CreateCpuBackend();
    Inputs in = RandomInputs(p, 5);
    auto one = RunBackend(*backend, p, Config(variant, 16, 32, 1), in);
    ASSERT_TRUE(one.ok());
    for (int threads : {2, 3, 8}) {
      auto many = RunBackend(*backend, p, Config(variant, 16, 32, threads), in);
      ASSERT_TRUE(many.ok());
      EXPECT_EQ(*one, *many) << VariantName(variant) << " threads=" << threads;
    }
  }
}

TEST(CpuBackend, VariantsAgreeWithEachOther) {
  AttentionProblem p = Problem(130, 130, 64, true);
  auto backend = CreateCpuBackend();
  Inputs in = RandomInputs(p, 6);
  auto fused = RunBackend(*backend, p, Config(Variant::kFused, 64, 64), in);
  auto partial = RunBackend(*backend, p, Config(Variant::kPartial, 64, 64), in);
  auto materialized = RunBackend(*backend, p, Config(Variant::kMaterialized, 64, 64), in);
  ASSERT_TRUE(fused.ok() && partial.ok() && materialized.ok());
  for (size_t i = 0; i < fused->size(); ++i) {
    ASSERT_NEAR((*fused)[i], (*partial)[i], 1e-5);
    ASSERT_NEAR((*fused)[i], (*materialized)[i], 1e-5);
  }
}

// The workspace is reused across runs: a causal run after a dense one finds old
// probabilities past each row's visible keys, which must never be read.
TEST(CpuBackend, StaleWorkspaceFromAnEarlierRunIsNeverRead) {
  for (Variant variant : {Variant::kPartial, Variant::kMaterialized}) {
    auto backend = CreateCpuBackend();
    AttentionProblem dense = Problem(96, 96, 64, false);
    Inputs dense_in = RandomInputs(dense, 9);
    for (float& x : dense_in.q) x *= 0.01f;  // near-uniform P: large stale entries everywhere
    ASSERT_TRUE(RunBackend(*backend, dense, Config(variant, 32, 32), dense_in).ok());
    AttentionProblem causal = Problem(96, 96, 64, true);
    Inputs in = RandomInputs(causal, 10);
    auto out = RunBackend(*backend, causal, Config(variant, 32, 32), in);
    ASSERT_TRUE(out.ok());
    auto ref = ReferenceAttention(causal, in.q, in.k, in.v);
    EXPECT_LE(MaxAbsError(*out, *ref), 1e-5) << VariantName(variant);
  }
}

TEST(CpuBackend, NanInputPropagatesToItsRowWithoutCrashing) {
  for (Variant variant : kVariants) {
    AttentionProblem p = Problem(20, 20, 32, false);
    p.q_heads = 1;
    p.kv_heads = 1;
    auto backend = CreateCpuBackend();
    Inputs in = RandomInputs(p, 7);
    in.q[3 * 32 + 5] = std::nanf("");  // query row 3
    auto out = RunBackend(*backend, p, Config(variant, 16, 16), in);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(std::isnan((*out)[3 * 32])) << VariantName(variant);
    EXPECT_TRUE(std::isfinite((*out)[4 * 32])) << VariantName(variant);
    in.q[3 * 32 + 5] = 0.0f;
    in.v[7 * 32 + 1] = std::numeric_limits<float>::infinity();  // every row reads key 7
    out = RunBackend(*backend, p, Config(variant, 16, 16), in);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(std::isfinite((*out)[1])) << VariantName(variant);
  }
}

TEST(CpuBackend, InvalidProblemsGetTheValidationError) {
  auto backend = CreateCpuBackend();
  KernelConfig c = Config(Variant::kFused);
  AttentionProblem zero_heads = Problem(8, 8);
  zero_heads.q_heads = 0;
  absl::Status s = backend->CanImplement(zero_heads, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("q_heads"));
  AttentionProblem bad_gqa = Problem(8, 8);
  bad_gqa.q_heads = 6;
  bad_gqa.kv_heads = 4;
  EXPECT_THAT(backend->CanImplement(bad_gqa, c).message(), HasSubstr("divide"));
  AttentionProblem bad_dim = Problem(8, 8, 300);
  EXPECT_THAT(backend->CanImplement(bad_dim, c).message(), HasSubstr("head_dim"));
  AttentionProblem bad_cu = Problem(8, 8);
  bad_cu.batch = 2;
  bad_cu.cu_seqlens_q = {0, 4, 8};
  bad_cu.cu_seqlens_k = {0, 4};
  EXPECT_THAT(backend->CanImplement(bad_cu, c).message(), HasSubstr("cu_seqlens_k"));
  // Run returns the same error without touching O.
  std::vector<float> q(64 * 8 * 2, 1.0f), o(64 * 8 * 2, -7.0f);
  AttentionBuffers buffers{q.data(), q.data(), q.data(), o.data()};
  EXPECT_EQ(backend->Run(bad_dim, c, buffers).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o[0], -7.0f);
  EXPECT_EQ(backend->Run(Problem(8, 8), c, AttentionBuffers{}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackend, CanImplementRejectsConfigsTheCpuCannotRun) {
  auto backend = CreateCpuBackend();
  AttentionProblem p = Problem(64, 64);
  EXPECT_TRUE(backend->CanImplement(p, Config(Variant::kFused)).ok());
  KernelConfig c = Config(Variant::kFused, 64, 48);
  EXPECT_EQ(backend->CanImplement(p, c).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(backend->CanImplement(p, c).message(), HasSubstr("block_s"));
  c = Config(Variant::kFused, 8, 64);
  EXPECT_EQ(backend->CanImplement(p, c).code(), absl::StatusCode::kUnimplemented);
  c = Config(Variant::kFused);
  c.stages = 2;
  EXPECT_THAT(backend->CanImplement(p, c).message(), HasSubstr("stages"));
  c = Config(Variant::kFused);
  c.split_kv = 2;  // prefill: only decode splits its keys
  EXPECT_EQ(backend->CanImplement(p, c).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(backend->CanImplement(p, c).message(), HasSubstr("split_kv"));
  c.split_kv = kAutoSplitKv;  // planned at launch: 1
  EXPECT_TRUE(backend->CanImplement(p, c).ok());
  AttentionProblem decode = Problem(1, 64);
  decode.kind = ProblemKind::kDecode;
  c.split_kv = 2;
  EXPECT_TRUE(backend->CanImplement(decode, c).ok());
  c.variant = Variant::kPartial;
  EXPECT_EQ(backend->CanImplement(decode, c).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(backend->CanImplement(decode, c).message(), HasSubstr("split_kv"));
  c.variant = Variant::kMaterialized;
  c.split_kv = kAutoSplitKv;
  EXPECT_EQ(backend->CanImplement(decode, c).code(), absl::StatusCode::kUnimplemented);
  c = Config(Variant::kFused);
  c.threads = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) + 1;
  EXPECT_EQ(backend->CanImplement(p, c).code(), absl::StatusCode::kUnimplemented);
  c = Config(Variant::kFused);
  c.block_m = 0;
  EXPECT_EQ(backend->CanImplement(p, c).code(), absl::StatusCode::kInvalidArgument);
  // 16 heads x 32768^2 fp32 scores = 64 GiB of workspace: refused, fused is fine.
  AttentionProblem big = Problem(32768, 32768);
  big.q_heads = 16;
  big.kv_heads = 16;
  EXPECT_TRUE(backend->CanImplement(big, Config(Variant::kFused)).ok());
  absl::Status s = backend->CanImplement(big, Config(Variant::kMaterialized));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("workspace"));
  EXPECT_EQ(backend->CanImplement(big, Config(Variant::kPartial)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CpuBackend, CanImplementRefusesThePingpongAndPersistentSchedules) {
  auto backend = CreateCpuBackend();
  AttentionProblem decode = Problem(1, 64);
  decode.kind = ProblemKind::kDecode;
  for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
    for (const AttentionProblem& p : {Problem(64, 64), decode}) {
      for (int flags : {1, 2, 3}) {
        KernelConfig c = Config(v);
        c.pingpong = (flags & 1) != 0;
        c.persistent = (flags & 2) != 0;
        absl::Status s = backend->CanImplement(p, c);
        EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << c.Key();
        EXPECT_THAT(s.message(), HasSubstr("pingpong or persistent")) << c.Key();
      }
    }
  }
  for (const KernelConfig& c : backend->CandidateConfigs(Problem(64, 64))) {
    EXPECT_FALSE(c.pingpong || c.persistent) << c.Key();
  }
}

// Every candidate the backend offers runs and is correct: a small causal GQA problem with
// lengths that are not tile multiples, 16-bit storage so that both precisions appear.
TEST(CpuBackend, EveryCandidateConfigPassesCanImplementAndMatchesReference) {
  auto backend = CreateCpuBackend();
  AttentionProblem p = Problem(20, 37, 32, /*causal=*/true);
  p.q_heads = 4;
  p.kv_heads = 2;
  p.dtype = DType::kBf16;
  const std::vector<KernelConfig> candidates = backend->CandidateConfigs(p);
  ASSERT_FALSE(candidates.empty());
  std::set<Precision> precisions;
  for (const KernelConfig& c : candidates) {
    precisions.insert(c.precision);
    ASSERT_TRUE(backend->CanImplement(p, c).ok()) << c.Key();
    ExpectMatchesReference(p, c);
  }
  EXPECT_EQ(precisions, (std::set<Precision>{Precision::kFp32, Precision::kBf16}));
}

TEST(CpuBackend, CandidateConfigsCoverTilesVariantsAndThreadsUpToTheHardware) {
  auto backend = CreateCpuBackend();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::set<int> expected_threads;
  for (int t = 1; t < hw; t *= 2) expected_threads.insert(t);
  expected_threads.insert(hw);
  const AttentionProblem p = Problem(256, 256);
  const std::vector<KernelConfig> candidates = backend->CandidateConfigs(p);
  EXPECT_EQ(candidates.size(), 3u * 4 * 4 * expected_threads.size());
  EXPECT_TRUE(std::is_sorted(candidates.begin(), candidates.end(), ConfigOrderLess));
  EXPECT_EQ(std::adjacent_find(candidates.begin(), candidates.end()), candidates.end());
  std::set<int> threads, tiles;
  std::set<Variant> variants;
  for (const KernelConfig& c : candidates) {
    threads.insert(c.threads);
    tiles.insert(c.block_m);
    tiles.insert(c.block_s);
    variants.insert(c.variant);
    EXPECT_EQ(c.precision, Precision::kFp32) << c.Key();  // fp32 storage: exact products only
    EXPECT_EQ(c.stages, 1);
    EXPECT_EQ(c.split_kv, 1);
  }
  EXPECT_EQ(threads, expected_threads);
  EXPECT_EQ(tiles, (std::set<int>{16, 32, 64, 128}));
  EXPECT_EQ(variants.size(), 3u);

  // Too big for a score workspace: only the fused variant is offered.
  AttentionProblem big = Problem(32768, 32768);
  big.q_heads = big.kv_heads = 16;
  for (const KernelConfig& c : backend->CandidateConfigs(big)) EXPECT_EQ(c.variant, Variant::kFused) << c.Key();
  EXPECT_FALSE(backend->CandidateConfigs(big).empty());
  // An invalid problem: nothing.
  AttentionProblem bad = Problem(8, 8);
  bad.kv_heads = 3;
  EXPECT_TRUE(backend->CandidateConfigs(bad).empty());
}

TEST(CpuBackend, TimeKeepsAtLeastThreeSamples) {
  auto backend = CreateCpuBackend();
  AttentionProblem p = Problem(64, 64);
  Inputs in = RandomInputs(p, 8);
  std::vector<float> o(p.OElements());
  AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data()};
  TimingOptions options;
  options.warmup = 1;
  options.repeats = 5;
  options.max_seconds = 0.0;  // would stop at once, but three samples are kept
  options.flush_l2 = true;
  auto samples = backend->Time(p, Config(Variant::kFused), buffers, options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->micros.size(), 3u);
  for (double us : samples->micros) EXPECT_GT(us, 0.0);
  // The CPU reports no clock/power/throttle state per block.
  EXPECT_FALSE(samples->before.known);
  EXPECT_FALSE(samples->after.known);
  options.max_seconds = 100;
  samples = backend->Time(p, Config(Variant::kMaterialized), buffers, options);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(samples->micros.size(), 5u);
  KernelConfig bad = Config(Variant::kFused);
  bad.stages = 3;
  EXPECT_EQ(backend->Time(p, bad, buffers, options).status().code(), absl::StatusCode::kUnimplemented);
  options.repeats = 0;
  EXPECT_EQ(backend->Time(p, Config(Variant::kFused), buffers, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackend, AStopTokenThatAlreadyAsksStopsRunAndTimeBeforeTheLaunch) {
  auto backend = CreateCpuBackend();
  AttentionProblem p = Problem(64, 64);
  Inputs in = RandomInputs(p, 8);
  std::vector<float> o(p.OElements(), 7.0f);
  AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data()};
  std::atomic<bool> stop{true};
  backend->SetStopToken(StopToken(&stop));
  EXPECT_EQ(backend->Run(p, Config(Variant::kFused), buffers).code(), absl::StatusCode::kCancelled);
  TimingOptions options;
  EXPECT_EQ(backend->Time(p, Config(Variant::kMaterialized), buffers, options).status().code(),
            absl::StatusCode::kCancelled);
  for (float x : o) ASSERT_EQ(x, 7.0f) << "nothing was launched";
  backend->SetStopToken(StopToken(nullptr, StopToken::Clock::now()));
  EXPECT_EQ(backend->Run(p, Config(Variant::kFused), buffers).code(), absl::StatusCode::kDeadlineExceeded);
  backend->SetStopToken(StopToken());
  EXPECT_TRUE(backend->Run(p, Config(Variant::kFused), buffers).ok());
}

// One launch of ~0.3 TFLOP (seconds to minutes on a few cores) given a budget that ends
// 20 ms in: the tiles after the deadline are skipped, so the launch returns DeadlineExceeded
// instead of finishing (a launch that ignored the token would return OK).
TEST(CpuBackend, ADeadlinePassingDuringALongLaunchStopsItBetweenTiles) {
  auto backend = CreateCpuBackend();
  // Fused over 16k x 16k x 4 heads; materialized (its score workspace within the 2 GiB
  // limit) over 8k x 8k x 2 heads, ~34 GFLOP.
  for (auto [variant, length, heads] : {std::tuple{Variant::kFused, 16384, 4}, std::tuple{Variant::kMaterialized, 8192, 2}}) {
    AttentionProblem p = Problem(length, length);
    p.q_heads = p.kv_heads = heads;
    Inputs in = RandomInputs(p, 8);
    std::vector<float> o(p.OElements());
    AttentionBuffers buffers{in.q.data(), in.k.data(), in.v.data(), o.data()};
    backend->SetStopToken(StopToken(nullptr, StopToken::Clock::now() + std::chrono::milliseconds(20)));
    EXPECT_EQ(backend->Run(p, Config(variant, 64, 64, 2), buffers).code(), absl::StatusCode::kDeadlineExceeded)
        << VariantName(variant);
  }
}

TEST(CpuBackend, EveryRunnableKernelBuildIsOffered) {
  auto backends = testing_util::BackendsForEveryIsa();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.back().isa, "generic");
  for (auto& [isa, backend] : backends) {
    ASSERT_NE(backend, nullptr) << isa;
    EXPECT_THAT(backend->Describe().driver, HasSubstr("kernels " + isa));
  }
  EXPECT_EQ(cpu::CreateCpuBackendForIsa("sse9"), nullptr);
  EXPECT_THAT(CreateCpuBackend()->Describe().driver, HasSubstr("kernels " + backends.front().isa));
}

TEST(CpuBackend, DescribeReportsTheHost) {
  auto backend = CreateCpuBackend();
  DeviceInfo info = backend->Describe();
  EXPECT_EQ(info.backend, "cpu");
  EXPECT_FALSE(info.name.empty());
  EXPECT_FALSE(info.arch.empty());
  EXPECT_GE(info.sm_count, 1);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GT(info.memory_bytes, int64_t{1} << 20);
  EXPECT_THAT(info.driver, HasSubstr("kernels "));
  const std::string device_class = info.DeviceClass();
  EXPECT_EQ(device_class.rfind("cpu/", 0), 0u) << device_class;
  EXPECT_EQ(std::count(device_class.begin(), device_class.end(), '/'), 2) << device_class;
}

TEST(CpuBackend, MemoryIsAlignedAndCopiesFillsWork) {
  auto backend = CreateCpuBackend();
  auto mem = backend->Allocate(1000);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mem->data()) % 64, 0u);
  EXPECT_EQ(mem->bytes(), 1000u);
  ASSERT_TRUE(backend->Fill(mem->data(), 0xAB, 1000).ok());
  std::vector<uint8_t> host(1000);
  ASSERT_TRUE(backend->CopyToHost(host.data(), mem->data(), 1000).ok());
  EXPECT_EQ(host[999], 0xAB);
  host[0] = 1;
  ASSERT_TRUE(backend->CopyToDevice(mem->data(), host.data(), 1).ok());
  EXPECT_EQ(static_cast<uint8_t*>(mem->data())[0], 1);
  EXPECT_EQ(backend->CopyToDevice(nullptr, host.data(), 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend->Allocate(0).ok());
}

TEST(ThreadPool, RunsEveryTaskExactlyOnceAcrossRounds) {
  cpu::ThreadPool pool;
  for (int round = 0; round < 200; ++round) {
    const int workers = 1 + round % 5;
    const int64_t tasks = round % 37;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
    std::atomic<int> bad_worker{0};
    pool.ParallelFor(workers, tasks, [&](int64_t t, int w) {
      hits[t].fetch_add(1);
      if (w < 0 || w >= workers) bad_worker.fetch_add(1);
    });
    for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(hits[t].load(), 1) << round << " " << t;
    ASSERT_EQ(bad_worker.load(), 0);
  }
  EXPECT_LE(pool.size(), 4);  // threads are reused, never one per round
}

}  // namespace
}  // namespace fusetune
