// GPU tests of the CUDA backend: every variant against the fp64 reference on fresh random
// inputs, odd lengths, masks, GQA/MQA, varlen and key padding, decode and paged KV caches; bad
// input (a block table outside the pool included) gives a Status, and the backend keeps
// working afterwards; RunOnStream on a caller's stream and inside a CUDA graph capture; Time's
// blocks through a CUDA graph. Exits 77 (ctest: skipped) where
// there is no GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/cuda_backend.h"
#include "fusetune/kernels/default_config.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"
#include "decode/decode_dispatch.h"
#include "attention_params.h"
#include "fused/fused_configs.h"
#include "fused/persistent_tile_order.h"

namespace fusetune {
namespace {

struct Inputs {
  std::vector<float> q, k, v;  // rounded to the storage dtype
};

Inputs RandomInputs(const AttentionProblem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Inputs in;
  in.q.resize(static_cast<size_t>(p.QElements()));
  in.k.resize(static_cast<size_t>(p.KVElements()));
  in.v.resize(static_cast<size_t>(p.KVElements()));
  for (auto* t : {&in.q, &in.k, &in.v}) {
    for (float& x : *t) x = dist(rng);
    RoundToDType(p.dtype, *t);
  }
  return in;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = b->release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }

  struct Result {
    absl::Status status;
    double rel_error = 0;  // max |out - ref| / max |ref|
    bool finite = true;
  };

  // Runs one (problem, config) on fresh device buffers (O poisoned with 0xFF = NaN); the
  // decoded output goes to `out`.
  absl::Status RunToHost(const AttentionProblem& p, const KernelConfig& c, const Inputs& in,
                         std::vector<float>& out) {
    Result r = RunAndCompare(p, c, in, {}, &out);
    return r.status;
  }

  // RunAndCompare against `ref`, expecting a successful run whose every element is written and
  // finite and whose error is within the precision's tolerance.
  void ExpectMatchesReference(const AttentionProblem& p, const KernelConfig& c, Precision precision,
                              const Inputs& in, const std::vector<double>& ref) {
    Result r = RunAndCompare(p, c, in, ref);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_TRUE(r.finite) << "NaN/Inf (or an unwritten element) in the output";
    EXPECT_LE(r.rel_error, ToleranceFor(precision, p.dtype));
  }

  // Runs one (problem, config) on fresh device buffers (O poisoned with 0xFF = NaN) and
  // compares every output element with the fp64 reference (none when `ref` is empty).
  Result RunAndCompare(const AttentionProblem& p, const KernelConfig& c, const Inputs& in,
                       const std::vector<double>& ref, std::vector<float>* out_copy = nullptr) {
    Result r;
    const size_t eb = static_cast<size_t>(DTypeBytes(p.dtype));
    std::vector<uint8_t> hq(in.q.size() * eb), hk(in.k.size() * eb), hv(in.v.size() * eb);
    EncodeTensor(p.dtype, in.q, hq.data());
    EncodeTensor(p.dtype, in.k, hk.data());
    EncodeTensor(p.dtype, in.v, hv.data());
    auto dq = backend_->Allocate(hq.size());
    auto dk = backend_->Allocate(hk.size());
    auto dv = backend_->Allocate(hv.size());
    auto d_o = backend_->Allocate(hq.size());
    if (!dq.ok() || !dk.ok() || !dv.ok() || !d_o.ok()) {
      r.status = absl::InternalError("allocation failed");
      return r;
    }
    EXPECT_TRUE(backend_->CopyToDevice(dq->data(), hq.data(), hq.size()).ok());
    EXPECT_TRUE(backend_->CopyToDevice(dk->data(), hk.data(), hk.size()).ok());
    EXPECT_TRUE(backend_->CopyToDevice(dv->data(), hv.data(), hv.size()).ok());
    EXPECT_TRUE(backend_->Fill(d_o->data(), 0xFF, hq.size()).ok());
    r.status = backend_->Run(p, c, {dq->data(), dk->data(), dv->data(), d_o->data()});
    if (!r.status.ok()) return r;
    std::vector<uint8_t> ho(hq.size());
    EXPECT_TRUE(backend_->CopyToHost(ho.data(), d_o->data(), ho.size()).ok());
    std::vector<float> out(in.q.size());
    DecodeTensor(p.dtype, ho.data(), out.size(), out.data());
    if (out_copy != nullptr) *out_copy = out;
    if (ref.empty()) return r;
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) r.finite = false;
      max_ref = std::max(max_ref, std::abs(ref[i]));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(out[i]) - ref[i]));
    }
    r.rel_error = max_ref > 0 ? max_diff / max_ref : max_diff;
    return r;
  }

  // Fused configs with the given (block_m, block_s, threads, stages) tilings.
  static std::vector<KernelConfig> FusedConfigs(
      Precision precision, const std::vector<std::tuple<int, int, int, int>>& tiles) {
    std::vector<KernelConfig> out;
    for (auto [bm, bs, t, st] : tiles) {
      KernelConfig c;
      c.variant = Variant::kFused;
      c.block_m = bm;
      c.block_s = bs;
      c.threads = t;
      c.stages = st;
      c.precision = precision;
      out.push_back(c);
    }
    return out;
  }

  // Configs tried for the fused variant (whatever the fused kernel instantiates).
  static std::vector<KernelConfig> FusedCandidates(Precision precision) {
    return FusedConfigs(precision, {{64, 64, 128, 2}, {64, 64, 128, 1}, {128, 64, 256, 2}, {64, 32, 128, 2},
                                    {128, 128, 256, 2}, {64, 64, 256, 2}, {32, 32, 128, 1}, {128, 64, 128, 2}});
  }

  // The Hopper (sm_90a) fused kernel's tilings: 64 rows per consumer warpgroup + a producer
  // warpgroup, and its schedules (ping-pong warpgroups, persistent blocks, both). The backend
  // rejects them on other GPUs and for fp32 storage.
  static std::vector<KernelConfig> HopperCandidates(Precision precision) {
    std::vector<KernelConfig> out =
        FusedConfigs(precision, {{128, 128, 384, 2}, {192, 64, 512, 3}, {64, 128, 256, 2}, {128, 64, 384, 3},
                                 {128, 128, 384, 3}});
    const KernelConfig two_groups = out[0], one_group = out[2], three_stages = out[4];
    for (const KernelConfig& base : {two_groups, three_stages}) {
      for (auto [pingpong, persistent] : {std::pair{true, false}, {false, true}, {true, true}}) {
        KernelConfig c = base;
        c.pingpong = pingpong;
        c.persistent = persistent;
        out.push_back(c);
      }
    }
    KernelConfig persistent_one_group = one_group;
    persistent_one_group.persistent = true;
    out.push_back(persistent_one_group);
    return out;
  }

  // Every fused config to check for `p`: the first accepted portable candidate and each
  // accepted Hopper one.
  std::vector<KernelConfig> FusedConfigsFor(const AttentionProblem& p, Precision precision) {
    std::vector<KernelConfig> out;
    for (const KernelConfig& c : FusedCandidates(precision)) {
      if (backend_->CanImplement(p, c).ok()) {
        out.push_back(c);
        break;
      }
    }
    for (const KernelConfig& c : HopperCandidates(precision)) {
      if (backend_->CanImplement(p, c).ok()) out.push_back(c);
    }
    return out;
  }

  // The configs to check for `p`: the fused ones above (none when the fused kernel does not
  // cover this problem), two partial tilings and the materialized baseline.
  std::vector<KernelConfig> ConfigsFor(const AttentionProblem& p, Precision precision) {
    std::vector<KernelConfig> out = FusedConfigsFor(p, precision);
    KernelConfig partial;
    partial.variant = Variant::kPartial;
    partial.block_m = 32;
    partial.block_s = 64;
    partial.threads = 128;
    partial.precision = precision;
    out.push_back(partial);
    // A second partial tiling with odd tile counts: any sizes on the exact fp32 path,
    // multiples of 16 on the tensor-core path.
    KernelConfig partial_odd = partial;
    partial_odd.block_m = precision == Precision::kFp32 ? 24 : 48;
    partial_odd.block_s = precision == Precision::kFp32 ? 40 : 16;
    partial_odd.threads = 96;
    out.push_back(partial_odd);
    KernelConfig mat = partial;
    mat.variant = Variant::kMaterialized;
    mat.threads = 256;
    out.push_back(mat);
    return out;
  }

  // Checks every accepted variant for one problem; returns how many fused runs happened.
  int CheckAllVariants(const AttentionProblem& p, Precision precision, uint32_t seed) {
    const Inputs in = RandomInputs(p, seed);
    auto ref = ReferenceAttention(p, in.q, in.k, in.v);
    EXPECT_TRUE(ref.ok()) << ref.status();
    if (!ref.ok()) return 0;
    int fused_runs = 0;
    for (const KernelConfig& c : ConfigsFor(p, precision)) {
      SCOPED_TRACE(p.Key() + " " + c.Key());
      Result r = RunAndCompare(p, c, in, *ref);
      EXPECT_TRUE(r.status.ok()) << r.status;
      if (!r.status.ok()) continue;
      EXPECT_TRUE(r.finite) << "NaN/Inf (or an unwritten element) in the output";
      EXPECT_LE(r.rel_error, ToleranceFor(precision, p.dtype));
      if (c.variant == Variant::kFused) ++fused_runs;
    }
    return fused_runs;
  }

  static Backend* backend_;
};

Backend* CudaBackendTest::backend_ = nullptr;

AttentionProblem MakeProblem(int batch, int hq, int hkv, int q, int k, int d, bool causal,
                             DType dtype) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = d;
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

struct Case {
  DType dtype;
  Precision precision;
  int head_dim;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(DTypeName(info.param.dtype)) + "_" +
         std::string(PrecisionName(info.param.precision)) + "_d" +
         std::to_string(info.param.head_dim);
}

class CudaVariantsTest : public CudaBackendTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CudaVariantsTest, MatchReferenceAtOddLengthsCausalOrNotWithGqa) {
  const Case cs = GetParam();
  int fused_runs = 0;
  uint32_t seed = 1000;
  for (auto [q, k] : std::vector<std::pair<int, int>>{{1, 1}, {17, 17}, {77, 77}, {17, 77},
                                                      {77, 17}, {1000, 1000}}) {
    for (bool causal : {false, true}) {
      // Long sequences with fewer heads keep the CPU reference quick.
      const bool big = q >= 1000;
      AttentionProblem p = MakeProblem(big ? 1 : 2, big ? 2 : 4, big ? 1 : 2, q, k,
                                       cs.head_dim, causal, cs.dtype);
      fused_runs += CheckAllVariants(p, cs.precision, ++seed);
    }
  }
  std::printf("[ info ] %s: %d fused runs\n", CaseName({cs, 0}).c_str(), fused_runs);
#if defined(FUSETUNE_TEST_EXPECT_FUSED)
  if (cs.precision != Precision::kTf32) {
    EXPECT_GT(fused_runs, 0) << "the fused kernel is compiled in but accepted no candidate config";
  }
#endif
}

TEST_P(CudaVariantsTest, VarlenBatchWithEmptyAndKeylessSequences) {
  const Case cs = GetParam();
  for (bool causal : {false, true}) {
    AttentionProblem p = MakeProblem(5, 4, 1, 0, 0, cs.head_dim, causal, cs.dtype);  // MQA
    p.cu_seqlens_q = {0, 1, 18, 95, 95, 99};
    p.cu_seqlens_k = {0, 1, 78, 95, 100, 100};  // the last sequence has queries, no keys
    p.q_len = 77;
    p.kv_len = 77;
    ASSERT_TRUE(p.Validate().ok()) << p.Validate();
    CheckAllVariants(p, cs.precision, causal ? 7 : 8);
  }
}

TEST_P(CudaVariantsTest, KeyPaddingHidesPaddedKeys) {
  const Case cs = GetParam();
  for (bool causal : {false, true}) {
    AttentionProblem p = MakeProblem(3, 4, 4, 33, 77, cs.head_dim, causal, cs.dtype);
    p.kv_valid_lens = {77, 30, 0};
    CheckAllVariants(p, cs.precision, causal ? 9 : 10);
  }
}

// Padding rows may hold anything, NaN included: the fused kernels must not read them into O
// (0 * NaN = NaN through the PV product). Key lengths leave full and partial key tiles.
TEST_P(CudaVariantsTest, FusedKernelsIgnoreNaNStoredInPaddedKeys) {
  const Case cs = GetParam();
  int fused_runs = 0;
  for (bool causal : {false, true}) {
    AttentionProblem p = MakeProblem(3, 4, 2, 33, 300, cs.head_dim, causal, cs.dtype);
    p.kv_valid_lens = {300, 130, 77};
    Inputs in = RandomInputs(p, causal ? 21 : 22);
    auto ref = ReferenceAttention(p, in.q, in.k, in.v);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
    for (int b = 0; b < p.batch; ++b) {
      for (int j = p.kv_valid_lens[b]; j < p.kv_len; ++j) {
        const size_t at = (static_cast<size_t>(b) * p.kv_len + j) * row;
        std::fill(in.k.begin() + at, in.k.begin() + at + row, std::nanf(""));
        std::fill(in.v.begin() + at, in.v.begin() + at + row, std::nanf(""));
      }
    }
    for (const KernelConfig& c : FusedConfigsFor(p, cs.precision)) {
      SCOPED_TRACE(p.Key() + " " + c.Key());
      Result r = RunAndCompare(p, c, in, *ref);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_TRUE(r.finite) << "NaN from a padded key reached the output";
      EXPECT_LE(r.rel_error, ToleranceFor(cs.precision, p.dtype));
      ++fused_runs;
    }
  }
  std::printf("[ info ] %s: %d fused runs with NaN padding\n", CaseName({cs, 0}).c_str(), fused_runs);
}

// Keys grow along the sequence (key j scaled by 1 + 10 j / k), so the row max keeps rising:
// by more than 2^8 (exp2 units) every few key tiles. Exercises the online rescale of every
// kernel and the fallback of the lazily rescaling SIMT instances (kSimtLazyRescale), which
// keep the running max only while no score exceeds it by that much.
TEST_P(CudaVariantsTest, RowMaxRisingAcrossKeyTilesIsRescaled) {
  const Case cs = GetParam();
  for (bool causal : {false, true}) {
    AttentionProblem p = MakeProblem(1, 2, 2, 700, 1000, cs.head_dim, causal, cs.dtype);
    Inputs in = RandomInputs(p, causal ? 31 : 32);
    const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
    for (size_t i = 0; i < in.k.size(); ++i) {
      const auto j = static_cast<float>((i / row) % static_cast<size_t>(p.kv_len));
      in.k[i] *= 1.f + 10.f * j / static_cast<float>(p.kv_len);
    }
    RoundToDType(p.dtype, in.k);
    auto ref = ReferenceAttention(p, in.q, in.k, in.v);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (const KernelConfig& c : FusedConfigsFor(p, cs.precision)) {
      SCOPED_TRACE(p.Key() + " " + c.Key());
      Result r = RunAndCompare(p, c, in, *ref);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_TRUE(r.finite);
      EXPECT_LE(r.rel_error, ToleranceFor(cs.precision, p.dtype));
    }
  }
}

// Q and K rounded to the precision's operand format as well, so that the products are exact
// and the reference sees what the tensor cores see (no rounding-induced argmax flips at huge
// scales: there the softmax is one-hot and any logit error beyond 1/scale changes the answer).
void RoundToOperandPrecision(Precision precision, std::vector<float>& x) {
  const int drop = precision == Precision::kTf32 ? 13 : precision == Precision::kFp16 ? 13 :
                   precision == Precision::kBf16 ? 16 : 0;
  if (drop == 0) return;
  for (float& f : x) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) continue;
    const uint32_t lsb = (u >> drop) & 1u;
    u = (u + ((1u << (drop - 1)) - 1u) + lsb) & ~((1u << drop) - 1u);
    std::memcpy(&f, &u, 4);
  }
}

// Every variant at softmax scales from 1e6 to 1e30 (the softmax is one-hot there; scales near
// 1e3 are left out: fp32 products' rounding times the scale moves the output by ~1e-3, a real
// sensitivity of the problem, not a defect). The exponent's reference is exact in both modes of
// ExpShift, so the max's probability stays finite (before: NaN in most rows at 1e10 in the fused
// kernels, and a partial variant already wrong at 1e6).
TEST_P(CudaVariantsTest, HugeSoftmaxScalesMatchReference) {
  const Case cs = GetParam();
  uint32_t seed = 500;
  for (float scale : {1e6f, 1e10f, 1e30f}) {
    for (bool causal : {false, true}) {
      AttentionProblem p = MakeProblem(2, 4, 2, causal ? 17 : 77, 77, cs.head_dim, causal, cs.dtype);
      p.softmax_scale = scale;
      Inputs in = RandomInputs(p, ++seed);
      RoundToOperandPrecision(cs.precision, in.q);
      RoundToOperandPrecision(cs.precision, in.k);
      auto ref = ReferenceAttention(p, in.q, in.k, in.v);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (const KernelConfig& c : ConfigsFor(p, cs.precision)) {
        SCOPED_TRACE(p.Key() + " " + c.Key());
        Result r = RunAndCompare(p, c, in, *ref);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_TRUE(r.finite) << "NaN/Inf in the output at scale " << scale;
        EXPECT_LE(r.rel_error, ToleranceFor(cs.precision, p.dtype)) << "scale " << scale;
      }
    }
  }
}

// +-Inf in K: a -inf score gives its key weight 0, a +inf (or NaN) score a NaN row, and a row
// whose visible scores are all -inf is zeros (the reference defines it). Key 5 holds +Inf in
// one component (its score is -inf or +inf by the sign of the query's component); in the
// second pattern every key does (rows with a negative q component: all scores -inf).
TEST_P(CudaVariantsTest, InfinityInKeysFollowsTheReference) {
  const Case cs = GetParam();
  for (bool all_keys : {false, true}) {
    for (bool causal : {false, true}) {
      AttentionProblem p = MakeProblem(2, 4, 2, 33, 77, cs.head_dim, causal, cs.dtype);
      Inputs in = RandomInputs(p, all_keys ? 41 : 42);
      const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
      for (size_t key = 0; key < static_cast<size_t>(p.batch * p.kv_len); ++key) {
        if (all_keys || key % static_cast<size_t>(p.kv_len) == 5) {
          in.k[key * row] = std::numeric_limits<float>::infinity();              // kv head 0
          in.k[key * row + p.head_dim + 3] = -std::numeric_limits<float>::infinity();  // kv head 1
        }
      }
      auto ref = ReferenceAttention(p, in.q, in.k, in.v);
      ASSERT_TRUE(ref.ok()) << ref.status();
      int nan_rows = 0, zero_rows = 0;
      for (size_t i = 0; i < ref->size(); i += static_cast<size_t>(p.head_dim)) {
        nan_rows += std::isnan((*ref)[i]) ? 1 : 0;
        zero_rows += (*ref)[i] == 0.0 ? 1 : 0;
      }
      ASSERT_GT(nan_rows, 0);
      if (all_keys) ASSERT_GT(zero_rows, 0);
      for (const KernelConfig& c : ConfigsFor(p, cs.precision)) {
        SCOPED_TRACE(p.Key() + " " + c.Key() + (all_keys ? " inf in every key" : " inf in key 5"));
        std::vector<float> out;
        ASSERT_TRUE(RunToHost(p, c, in, out).ok());
        double max_ref = 0, max_diff = 0;
        int mismatched = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          if (std::isnan((*ref)[i])) {
            mismatched += std::isfinite(out[i]) ? 1 : 0;
            continue;
          }
          if (!std::isfinite(out[i])) {
            ++mismatched;
            continue;
          }
          max_ref = std::max(max_ref, std::abs((*ref)[i]));
          max_diff = std::max(max_diff, std::abs(out[i] - (*ref)[i]));
        }
        EXPECT_EQ(mismatched, 0) << "elements finite where the reference is NaN or the reverse";
        EXPECT_LE(max_diff / std::max(max_ref, 1e-30), ToleranceFor(cs.precision, p.dtype));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllPrecisions, CudaVariantsTest,
    ::testing::Values(Case{DType::kFp32, Precision::kFp32, 64}, Case{DType::kFp32, Precision::kFp32, 128},
                      Case{DType::kFp32, Precision::kTf32, 64}, Case{DType::kFp32, Precision::kTf32, 128},
                      Case{DType::kFp16, Precision::kFp16, 64}, Case{DType::kFp16, Precision::kFp16, 128},
                      Case{DType::kBf16, Precision::kBf16, 64}, Case{DType::kBf16, Precision::kBf16, 128}),
    CaseName);

TEST_F(CudaBackendTest, DescribeReportsTheDevice) {
  const DeviceInfo info = backend_->Describe();
  EXPECT_EQ(info.backend, "cuda");
  EXPECT_FALSE(info.name.empty());
  EXPECT_EQ(info.arch.rfind("sm", 0), 0u) << info.arch;
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GE(info.shared_mem_per_block, 48 * 1024);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_GT(info.max_clock_mhz, 0);
  EXPECT_NE(info.driver.find("runtime"), std::string::npos);
  std::printf("[ info ] %s | %s | %d SMs | smem/block %lld | L2 %lld | mem %lld | %s | %d MHz\n",
              info.name.c_str(), info.arch.c_str(), info.sm_count,
              static_cast<long long>(info.shared_mem_per_block), static_cast<long long>(info.l2_bytes),
              static_cast<long long>(info.memory_bytes), info.driver.c_str(), info.max_clock_mhz);
}

TEST_F(CudaBackendTest, UnsupportedHeadDimIsUnimplementedAndLeavesOutputAlone) {
  AttentionProblem p = MakeProblem(1, 2, 2, 16, 16, 96, false, DType::kFp32);
  const Inputs in = RandomInputs(p, 3);
  for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
    KernelConfig c;
    c.variant = v;
    c.threads = 128;
    EXPECT_EQ(backend_->CanImplement(p, c).code(), absl::StatusCode::kUnimplemented);
    std::vector<double> dummy(in.q.size(), 0.0);
    Result r = RunAndCompare(p, c, in, dummy);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnimplemented) << r.status;
  }
}

TEST_F(CudaBackendTest, BadConfigsAreErrorsAndTheNextRunStillWorks) {
  AttentionProblem p = MakeProblem(1, 2, 2, 65, 65, 128, true, DType::kFp32);
  KernelConfig bad_threads;
  bad_threads.variant = Variant::kMaterialized;
  bad_threads.threads = 33;
  EXPECT_EQ(backend_->CanImplement(p, bad_threads).code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig too_much_smem;
  too_much_smem.variant = Variant::kPartial;
  too_much_smem.threads = 256;
  too_much_smem.block_m = 256;
  too_much_smem.block_s = 256;
  EXPECT_EQ(backend_->CanImplement(p, too_much_smem).code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig tensor_core_tail = too_much_smem;
  tensor_core_tail.block_m = 24;  // the tensor-core path tiles by 16
  tensor_core_tail.block_s = 32;
  tensor_core_tail.precision = Precision::kTf32;
  EXPECT_EQ(backend_->CanImplement(p, tensor_core_tail).code(), absl::StatusCode::kFailedPrecondition);
  KernelConfig wrong_precision = bad_threads;
  wrong_precision.threads = 128;
  wrong_precision.precision = Precision::kBf16;  // fp32 storage: PV cannot run in bf16
  EXPECT_EQ(backend_->CanImplement(p, wrong_precision).code(), absl::StatusCode::kUnimplemented);
  KernelConfig pipelined = wrong_precision;
  pipelined.precision = Precision::kFp32;
  pipelined.stages = 3;
  EXPECT_EQ(backend_->CanImplement(p, pipelined).code(), absl::StatusCode::kUnimplemented);

  const Inputs in = RandomInputs(p, 5);
  auto ref = ReferenceAttention(p, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok());
  for (const KernelConfig& c : {bad_threads, too_much_smem, tensor_core_tail, wrong_precision, pipelined}) {
    EXPECT_FALSE(RunAndCompare(p, c, in, *ref).status.ok()) << c.Key();
  }
  for (const KernelConfig& c : ConfigsFor(p, Precision::kFp32)) {
    Result r = RunAndCompare(p, c, in, *ref);
    ASSERT_TRUE(r.status.ok()) << c.Key() << ": " << r.status;
    EXPECT_LE(r.rel_error, 1e-4) << c.Key();
  }
}

TEST_F(CudaBackendTest, WorkspaceTooLargeIsFailedPreconditionBeforeAnyAllocation) {
  AttentionProblem p = MakeProblem(16, 64, 64, 65536, 65536, 64, false, DType::kFp32);
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  KernelConfig c;
  c.variant = Variant::kMaterialized;
  c.threads = 256;
  EXPECT_EQ(backend_->CanImplement(p, c).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaBackendTest, TimeKeepsOneSampleperLaunchAndReadsTheClock) {
  AttentionProblem p = MakeProblem(1, 12, 12, 512, 512, 64, false, DType::kFp32);
  const Inputs in = RandomInputs(p, 11);
  std::vector<uint8_t> bytes(in.q.size() * 4);
  auto dq = backend_->Allocate(bytes.size());
  auto dk = backend_->Allocate(bytes.size());
  auto dv = backend_->Allocate(bytes.size());
  auto d_o = backend_->Allocate(bytes.size());
  ASSERT_TRUE(dq.ok() && dk.ok() && dv.ok() && d_o.ok());
  ASSERT_TRUE(backend_->CopyToDevice(dq->data(), in.q.data(), bytes.size()).ok());
  ASSERT_TRUE(backend_->CopyToDevice(dk->data(), in.k.data(), bytes.size()).ok());
  ASSERT_TRUE(backend_->CopyToDevice(dv->data(), in.v.data(), bytes.size()).ok());
  KernelConfig c;
  c.variant = Variant::kMaterialized;
  c.threads = 256;
  TimingOptions opt;
  opt.warmup = 2;
  opt.repeats = 7;
  opt.max_seconds = 10;
  auto t = backend_->Time(p, c, {dq->data(), dk->data(), dv->data(), d_o->data()}, opt);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->micros.size(), 7u);
  for (double us : t->micros) EXPECT_GT(us, 0.5);
  EXPECT_GE(t->sm_clock_mhz, 0);
  std::printf("[ info ] materialized S=512 median-ish sample %.1f us, SM clock %d MHz\n",
              t->micros[3], t->sm_clock_mhz);
  opt.repeats = 1000;
  opt.max_seconds = 0.0;  // stops after the minimum of three samples
  auto early = backend_->Time(p, c, {dq->data(), dk->data(), dv->data(), d_o->data()}, opt);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->micros.size(), 3u);
}

// --- Candidate configs: what the tuner's space is built from. ---

bool Contains(const std::vector<KernelConfig>& v, const KernelConfig& c) {
  return std::find(v.begin(), v.end(), c) != v.end();
}

std::vector<KernelConfig> OfVariant(const std::vector<KernelConfig>& v, Variant variant) {
  std::vector<KernelConfig> out;
  for (const KernelConfig& c : v) {
    if (c.variant == variant) out.push_back(c);
  }
  return out;
}

std::vector<AttentionProblem> CandidateProblems() {
  std::vector<AttentionProblem> out;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      out.push_back(MakeProblem(1, 12, 12, 128, 128, d, false, dtype));
      out.push_back(MakeProblem(2, 8, 2, 1000, 1000, d, true, dtype));
    }
  }
  return out;
}

TEST_F(CudaBackendTest, EveryCandidatePassesCanImplementSortedWithoutDuplicates) {
  for (const AttentionProblem& p : CandidateProblems()) {
    SCOPED_TRACE(p.Key());
    const std::vector<KernelConfig> candidates = backend_->CandidateConfigs(p);
    ASSERT_FALSE(candidates.empty());
    EXPECT_TRUE(std::is_sorted(candidates.begin(), candidates.end(), ConfigOrderLess));
    EXPECT_EQ(std::adjacent_find(candidates.begin(), candidates.end()), candidates.end());
    for (const KernelConfig& c : candidates) {
      const absl::Status s = backend_->CanImplement(p, c);
      EXPECT_TRUE(s.ok()) << c.Key() << ": " << s;
    }
    for (Variant v : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
      EXPECT_FALSE(OfVariant(candidates, v).empty()) << VariantName(v);
    }
    // Materialized: cuBLAS owns the GEMM tiles, so only the softmax block size varies.
    std::set<std::pair<int, int>> blocks;
    std::set<int> threads;
    for (const KernelConfig& c : OfVariant(candidates, Variant::kMaterialized)) {
      blocks.insert({c.block_m, c.block_s});
      threads.insert(c.threads);
    }
    EXPECT_EQ(blocks.size(), 1u);
    EXPECT_GT(threads.size(), 1u);
    std::printf("[ info ] %s: %zu fused, %zu partial, %zu materialized candidates\n", p.Key().c_str(),
                OfVariant(candidates, Variant::kFused).size(), OfVariant(candidates, Variant::kPartial).size(),
                OfVariant(candidates, Variant::kMaterialized).size());
  }
  // Nothing for a head_dim the backend does not run, or an invalid problem.
  EXPECT_TRUE(backend_->CandidateConfigs(MakeProblem(1, 2, 2, 16, 16, 96, false, DType::kFp16)).empty());
  EXPECT_TRUE(backend_->CandidateConfigs(MakeProblem(1, 12, 5, 16, 16, 64, false, DType::kFp16)).empty());
}

TEST_F(CudaBackendTest, EveryCandidateRunsAndMatchesTheReference) {
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      const AttentionProblem p = MakeProblem(1, 2, 1, 77, 93, d, true, dtype);
      const Inputs in = RandomInputs(p, 21);
      auto ref = ReferenceAttention(p, in.q, in.k, in.v);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (const KernelConfig& c : backend_->CandidateConfigs(p)) {
        SCOPED_TRACE(p.Key() + " " + c.Key());
        Result r = RunAndCompare(p, c, in, *ref);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_TRUE(r.finite);
        EXPECT_LE(r.rel_error, ToleranceFor(c.precision, p.dtype));
      }
    }
  }
}

TEST_F(CudaBackendTest, TheDefaultConfigIsACandidateForEveryProblemClass) {
  for (const AttentionProblem& base : CandidateProblems()) {
    for (ProblemKind kind : {ProblemKind::kPrefill, ProblemKind::kDecode}) {
      AttentionProblem p = base;
      p.kind = kind;
      if (kind == ProblemKind::kDecode) p.q_len = 1;  // decode: at most 16 new queries
      for (int page : {0, 16}) {
        p.page_block_size = page;  // both kinds over a paged cache too (the decode family)
        ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
        absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
        ASSERT_TRUE(c.ok()) << c.status();
        EXPECT_TRUE(Contains(backend_->CandidateConfigs(p), *c)) << p.Key() << " " << c->Key();
      }
    }
  }
}

// The fused candidates are exactly the compiled instances this GPU can run: nothing of the
// table that CanImplement accepts is missing, nothing outside it is offered.
TEST_F(CudaBackendTest, FusedCandidatesAreTheCompiledInstancesThisGpuAccepts) {
  for (const AttentionProblem& p : CandidateProblems()) {
    SCOPED_TRACE(p.Key());
    const std::vector<KernelConfig> fused = OfVariant(backend_->CandidateConfigs(p), Variant::kFused);
    const std::vector<KernelConfig> compiled = cuda::FusedCompiledConfigs(p.head_dim, p.dtype);
    size_t accepted = 0;
    for (const KernelConfig& c : compiled) {
      if (!backend_->CanImplement(p, c).ok()) continue;
      ++accepted;
      EXPECT_TRUE(Contains(fused, c)) << c.Key() << " is compiled and accepted but not a candidate";
    }
    for (const KernelConfig& c : fused) EXPECT_TRUE(Contains(compiled, c)) << c.Key() << " is not compiled";
    EXPECT_EQ(fused.size(), accepted);
  }
}

// The exact-fp32 32-row instances (64 and 128 threads) were outside the tuner's old fixed
// grid although they are the fastest at short fp32 sequences.
TEST_F(CudaBackendTest, Fp32ShortSequenceInstancesAreCandidates) {
  const AttentionProblem p = MakeProblem(1, 12, 12, 128, 128, 64, false, DType::kFp32);
  const std::vector<KernelConfig> candidates = backend_->CandidateConfigs(p);
  for (int threads : {64, 128}) {
    KernelConfig c;
    c.variant = Variant::kFused;
    c.block_m = 32;
    c.block_s = 64;
    c.threads = threads;
    c.precision = Precision::kFp32;
    c.stages = 1;
    ASSERT_GE(cuda::FusedSharedMemoryBytes(64, DType::kFp32, c), 0) << c.Key() << " is no longer compiled";
    EXPECT_TRUE(Contains(candidates, c)) << c.Key();
  }
}

// Candidates follow the instance table per (head_dim, dtype) and the PV precision rule of the
// cuBLAS variants.
TEST_F(CudaBackendTest, CandidatesDifferByHeadDimAndDtypeAsTheInstanceTableSays) {
  auto fused_of = [&](int d, DType dtype) {
    return OfVariant(backend_->CandidateConfigs(MakeProblem(1, 12, 12, 2048, 2048, d, false, dtype)),
                     Variant::kFused);
  };
  EXPECT_NE(fused_of(64, DType::kFp16), fused_of(128, DType::kFp16));
  EXPECT_NE(fused_of(128, DType::kBf16), fused_of(128, DType::kFp32));
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      const AttentionProblem p = MakeProblem(1, 12, 12, 2048, 2048, d, false, dtype);
      std::set<Precision> fused, baseline;
      for (const KernelConfig& c : backend_->CandidateConfigs(p)) {
        (c.variant == Variant::kFused ? fused : baseline).insert(c.precision);
      }
      std::set<Precision> table;
      for (const KernelConfig& c : cuda::FusedCompiledConfigs(d, dtype)) {
        if (backend_->CanImplement(p, c).ok()) table.insert(c.precision);
      }
      EXPECT_EQ(fused, table) << p.Key();
      const std::set<Precision> expected_baseline =
          dtype == DType::kFp32   ? std::set<Precision>{Precision::kFp32, Precision::kTf32}
          : dtype == DType::kFp16 ? std::set<Precision>{Precision::kFp16}
                                  : std::set<Precision>{Precision::kBf16};
      EXPECT_EQ(baseline, expected_baseline) << p.Key();
    }
  }
}

// Each timing block carries the device state read before its first and after its last
// launch (NVML: SM clock, board power, clocks-event reasons without the idle bit).
TEST_F(CudaBackendTest, TimeReadsTheDeviceStateBeforeAndAfterTheBlock) {
  AttentionProblem p = MakeProblem(1, 12, 12, 1024, 1024, 64, false, DType::kFp16);
  const Inputs in = RandomInputs(p, 13);
  std::vector<uint8_t> bytes(in.q.size() * 2);
  auto dq = backend_->Allocate(bytes.size());
  auto dk = backend_->Allocate(bytes.size());
  auto dv = backend_->Allocate(bytes.size());
  auto d_o = backend_->Allocate(bytes.size());
  ASSERT_TRUE(dq.ok() && dk.ok() && dv.ok() && d_o.ok());
  for (auto* t : {&in.q, &in.k, &in.v}) {
    EncodeTensor(p.dtype, *t, bytes.data());
    void* dst = t == &in.q ? dq->data() : t == &in.k ? dk->data() : dv->data();
    ASSERT_TRUE(backend_->CopyToDevice(dst, bytes.data(), bytes.size()).ok());
  }
  absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
  ASSERT_TRUE(c.ok());
  TimingOptions opt;
  opt.warmup = 3;
  opt.repeats = 20;
  opt.max_seconds = 10;
  auto t = backend_->Time(p, *c, {dq->data(), dk->data(), dv->data(), d_o->data()}, opt);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const DeviceState* s : {&t->before, &t->after}) {
    ASSERT_TRUE(s->known) << "NVML did not report the device state";
    EXPECT_GT(s->sm_clock_mhz, 100);
    EXPECT_LE(s->sm_clock_mhz, backend_->Describe().max_clock_mhz + 50);
    EXPECT_GT(s->power_mw, 1000);      // a powered board draws more than 1 W
    EXPECT_LT(s->power_mw, 2000000);   // and less than 2 kW
    EXPECT_EQ(s->throttle_reasons & 0x1, 0u) << "the GPU-idle reason must be cleared";
  }
  EXPECT_EQ(t->sm_clock_mhz, t->after.sm_clock_mhz);
  std::printf("[ info ] before: %d MHz %.1f W reasons 0x%llx | after: %d MHz %.1f W reasons 0x%llx | moved %d\n",
              t->before.sm_clock_mhz, t->before.power_mw / 1000.0,
              static_cast<unsigned long long>(t->before.throttle_reasons), t->after.sm_clock_mhz,
              t->after.power_mw / 1000.0, static_cast<unsigned long long>(t->after.throttle_reasons),
              DeviceStateMoved(t->before, t->after) ? 1 : 0);
}


// --- KV caches: the decode family (fused), and the baselines over a gathered paged cache. ---

// A problem against a KV cache with its host inputs: Q, K and V (the contiguous tensors, or the
// paged pool), the block table of a paged cache, and the fp64 reference.
struct CacheCase {
  AttentionProblem problem;
  Inputs in;  // K/V stored as e4m3: in.k and in.v are the e4m3 values (before the scales)
  std::vector<int32_t> table;  // paged only
  std::vector<double> ref;
  // K/V stored as e4m3: the bytes and the per-head scales.
  std::vector<uint8_t> k8, v8;
  std::vector<float> k_scale, v_scale;
};

// A shuffled block table for `p` (whose kv_pool_pages leaves spare pages): the first
// `shared_pages` logical pages of every sequence that has them are the same physical pages (a
// shared prompt prefix, shared by hand), every other page is its own, all at random places in
// the pool. Entries past a sequence's pages hold -1: they are never read.
std::vector<int32_t> ShuffledTable(const AttentionProblem& p, int shared_pages, uint32_t seed) {
  std::vector<int32_t> physical(static_cast<size_t>(p.PoolPages()));
  for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int32_t>(i);
  std::mt19937 rng(seed);
  std::shuffle(physical.begin(), physical.end(), rng);
  size_t next = static_cast<size_t>(shared_pages);
  std::vector<int32_t> table(static_cast<size_t>(p.BlockTableEntries()), -1);
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.PagesOfSequence(b); ++i) {
      table[static_cast<size_t>(b) * p.BlockTableWidth() + i] =
          i < shared_pages ? physical[static_cast<size_t>(i)] : physical[next++];
    }
  }
  EXPECT_LE(next, physical.size()) << "the pool is too small for the table";
  return table;
}

// Random inputs for `p`, NaN in every K/V row no sequence reads (spare pool pages, rows past a
// cache length), so a kernel that reads one shows it; the reference is computed on the
// contiguous K/V (a paged cache gathered through `table`, as GatherPagedKV defines it).
CacheCase MakeCacheCase(const AttentionProblem& p, std::vector<int32_t> table, uint32_t seed) {
  CacheCase out;
  out.problem = p;
  out.in = RandomInputs(p, seed);
  out.table = std::move(table);
  const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
  std::vector<bool> read(static_cast<size_t>(p.TotalKeys()), false);
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < p.VisibleKeyLen(b); ++j) {
      if (p.is_paged()) {
        const int64_t page = out.table[static_cast<size_t>(b) * p.BlockTableWidth() + j / p.page_block_size];
        read[static_cast<size_t>(page * p.page_block_size + j % p.page_block_size)] = true;
      } else {
        read[static_cast<size_t>(p.KeyStart(b) + j)] = true;
      }
    }
  }
  for (size_t r = 0; r < read.size(); ++r) {
    if (read[r]) continue;
    std::fill(out.in.k.begin() + r * row, out.in.k.begin() + (r + 1) * row, std::nanf(""));
    std::fill(out.in.v.begin() + r * row, out.in.v.begin() + (r + 1) * row, std::nanf(""));
  }
  KvScales scales;
  if (p.is_kv_quantized()) {  // quantised per head as a serving engine does; NaN rows stay NaN bytes
    out.k8.resize(out.in.k.size());
    out.v8.resize(out.in.v.size());
    out.k_scale.resize(static_cast<size_t>(p.kv_heads));
    out.v_scale.resize(static_cast<size_t>(p.kv_heads));
    QuantizeE4m3PerHead(out.in.k, p.kv_heads, p.head_dim, out.k8, out.k_scale);
    QuantizeE4m3PerHead(out.in.v, p.kv_heads, p.head_dim, out.v8, out.v_scale);
    for (size_t i = 0; i < out.k8.size(); ++i) {
      out.in.k[i] = E4m3ToFloat(out.k8[i]);
      out.in.v[i] = E4m3ToFloat(out.v8[i]);
    }
    scales = KvScales{out.k_scale, out.v_scale};
  }
  absl::StatusOr<std::vector<double>> ref;
  if (p.is_paged()) {
    auto k = GatherPagedKV(p, out.in.k, out.table);
    auto v = GatherPagedKV(p, out.in.v, out.table);
    EXPECT_TRUE(k.ok() && v.ok()) << k.status() << " " << v.status();
    if (!k.ok() || !v.ok()) return out;
    ref = ReferenceAttention(p.Unpaged(), out.in.q, *k, *v, scales);
  } else {
    ref = ReferenceAttention(p, out.in.q, out.in.k, out.in.v, scales);
  }
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (ref.ok()) out.ref = *std::move(ref);
  return out;
}

// Device copies of one CacheCase, allocated once and reused by every config of the problem.
class DeviceCase {
 public:
  DeviceCase(Backend& backend, const CacheCase& c) : backend_(backend), case_(c) {
    const AttentionProblem& p = c.problem;
    const size_t eb = static_cast<size_t>(DTypeBytes(p.dtype));
    q_bytes_ = c.in.q.size() * eb;
    const size_t kv_bytes = c.in.k.size() * static_cast<size_t>(p.KVElementBytes());
    auto q = backend.Allocate(q_bytes_);
    auto k = backend.Allocate(kv_bytes);
    auto v = backend.Allocate(kv_bytes);
    auto o = backend.Allocate(q_bytes_);
    EXPECT_TRUE(q.ok() && k.ok() && v.ok() && o.ok());
    if (!q.ok() || !k.ok() || !v.ok() || !o.ok()) return;
    q_ = *std::move(q);
    k_ = *std::move(k);
    v_ = *std::move(v);
    o_ = *std::move(o);
    std::vector<uint8_t> bytes(std::max(q_bytes_, kv_bytes));
    EncodeTensor(p.dtype, c.in.q, bytes.data());
    EXPECT_TRUE(backend.CopyToDevice(q_.data(), bytes.data(), q_bytes_).ok());
    if (p.is_kv_quantized()) {
      EXPECT_TRUE(backend.CopyToDevice(k_.data(), c.k8.data(), kv_bytes).ok());
      EXPECT_TRUE(backend.CopyToDevice(v_.data(), c.v8.data(), kv_bytes).ok());
      SetScales(c.k_scale, c.v_scale);
    } else {
      EncodeTensor(p.dtype, c.in.k, bytes.data());
      EXPECT_TRUE(backend.CopyToDevice(k_.data(), bytes.data(), kv_bytes).ok());
      EncodeTensor(p.dtype, c.in.v, bytes.data());
      EXPECT_TRUE(backend.CopyToDevice(v_.data(), bytes.data(), kv_bytes).ok());
    }
    if (p.is_paged()) SetTable(c.table);
    ok_ = true;
  }

  bool ok() const { return ok_; }

  // Replaces the device table (a bad one, for the tests of the check).
  void SetTable(const std::vector<int32_t>& table) {
    auto t = backend_.Allocate(std::max<size_t>(table.size(), 1) * sizeof(int32_t));
    ASSERT_TRUE(t.ok()) << t.status();
    table_ = *std::move(t);
    ASSERT_TRUE(backend_.CopyToDevice(table_.data(), table.data(), table.size() * sizeof(int32_t)).ok());
  }

  // Replaces the device K/V scales of an e4m3 case (bad ones, for the tests of the check).
  void SetScales(const std::vector<float>& k, const std::vector<float>& v) {
    for (auto [memory, host] : {std::pair<DeviceMemory*, const std::vector<float>*>{&k_scale_, &k},
                                std::pair<DeviceMemory*, const std::vector<float>*>{&v_scale_, &v}}) {
      auto m = backend_.Allocate(host->size() * sizeof(float));
      ASSERT_TRUE(m.ok()) << m.status();
      *memory = *std::move(m);
      ASSERT_TRUE(backend_.CopyToDevice(memory->data(), host->data(), host->size() * sizeof(float)).ok());
    }
  }

  AttentionBuffers Buffers() const {
    AttentionBuffers b{q_.data(), k_.data(), v_.data(), o_.data(),
                       case_.problem.is_paged() ? static_cast<const int32_t*>(table_.data()) : nullptr};
    if (case_.problem.is_kv_quantized()) {
      b.k_scale = static_cast<const float*>(k_scale_.data());
      b.v_scale = static_cast<const float*>(v_scale_.data());
    }
    return b;
  }

  // Fills O with `pattern`, runs `config`, and returns O's bytes.
  absl::StatusOr<std::vector<uint8_t>> Run(const KernelConfig& config, uint8_t pattern = 0xFF) {
    if (auto s = backend_.Fill(o_.data(), pattern, q_bytes_); !s.ok()) return s;
    if (auto s = backend_.Run(case_.problem, config, Buffers()); !s.ok()) return s;
    return Output();
  }

  std::vector<uint8_t> Output() const {
    std::vector<uint8_t> out(q_bytes_);
    EXPECT_TRUE(backend_.CopyToHost(out.data(), o_.data(), out.size()).ok());
    return out;
  }

  // Runs `config` and checks every output element against the reference: finite, within the
  // config's tolerance.
  void ExpectMatchesReference(const KernelConfig& config) {
    SCOPED_TRACE(case_.problem.Key() + " " + config.Key());
    absl::StatusOr<std::vector<uint8_t>> bytes = Run(config);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ExpectOutputMatches(*bytes, case_.ref, config);
  }

  // O as it is now (after a launch the caller made and waited for) against `ref`.
  void ExpectOutputMatches(const std::vector<double>& ref, const KernelConfig& config) const {
    ExpectOutputMatches(Output(), ref, config);
  }

  void ExpectOutputMatches(const std::vector<uint8_t>& bytes, const std::vector<double>& ref,
                           const KernelConfig& config) const {
    std::vector<float> out(case_.in.q.size());
    DecodeTensor(case_.problem.dtype, bytes.data(), out.size(), out.data());
    ASSERT_EQ(out.size(), ref.size());
    double max_ref = 0, max_diff = 0;
    int non_finite = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!std::isfinite(out[i])) ++non_finite;
      max_ref = std::max(max_ref, std::abs(ref[i]));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(out[i]) - ref[i]));
    }
    EXPECT_EQ(non_finite, 0) << "NaN/Inf in the output: an unread row, an unwritten element or a NaN pool row";
    EXPECT_LE(max_ref > 0 ? max_diff / max_ref : max_diff, ToleranceFor(config.precision, case_.problem.dtype));
  }

  // Fills O with `pattern` (and waits for it).
  void FillOutput(uint8_t pattern) { EXPECT_TRUE(backend_.Fill(o_.data(), pattern, q_bytes_).ok()); }

 private:
  Backend& backend_;
  const CacheCase& case_;
  DeviceMemory q_, k_, v_, o_, table_, k_scale_, v_scale_;
  size_t q_bytes_ = 0;
  bool ok_ = false;
};

// A decode problem: batch 4 with cache lengths 300, 200, 1 and 0 (the new tokens included), so
// some sequences' queries see no key; contiguous, or paged with `page` tokens per page in a
// pool of 5 spare pages beyond what the table uses.
AttentionProblem DecodeCacheProblem(DType dtype, int head_dim, int q_heads, int kv_heads, int new_tokens, int page) {
  AttentionProblem p = MakeProblem(4, q_heads, kv_heads, new_tokens, 300, head_dim, /*causal=*/true, dtype);
  p.kind = ProblemKind::kDecode;
  p.kv_valid_lens = {300, 200, 1, 0};
  p.page_block_size = page;
  if (page > 0) {
    // Pages of the 96-key shared prefix count once.
    const int shared = 96 / page;
    int64_t needed = shared;
    for (int len : p.kv_valid_lens) needed += std::max(0, (len + page - 1) / page - shared);
    p.kv_pool_pages = static_cast<int>(needed) + 5;
  }
  return p;
}

// The table for DecodeCacheProblem: its first 96 keys' pages shared by the sequences that
// have them (only the 300- and 200-key ones fill them; the 1-key one shares its single page).
std::vector<int32_t> DecodeCacheTable(const AttentionProblem& p, uint32_t seed) {
  return p.is_paged() ? ShuffledTable(p, 96 / p.page_block_size, seed) : std::vector<int32_t>{};
}

std::vector<KernelConfig> FusedOf(const std::vector<KernelConfig>& v) {
  std::vector<KernelConfig> out;
  for (const KernelConfig& c : v) {
    if (c.variant == Variant::kFused) out.push_back(c);
  }
  return out;
}

// The fused candidates of a decode problem are the decode family's, filtered by CanImplement.
TEST_F(CudaBackendTest, DecodeFusedCandidatesAreTheDecodeFamilysThisGpuAccepts) {
  for (int page : {0, 16}) {
    const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, page);
    SCOPED_TRACE(p.Key());
    ASSERT_TRUE(p.Validate().ok()) << p.Validate();
    const std::vector<KernelConfig> candidates = backend_->CandidateConfigs(p);
    std::vector<KernelConfig> expected;
    for (const KernelConfig& c : cuda::DecodeCandidateConfigs(p)) {
      if (backend_->CanImplement(p, c).ok()) expected.push_back(c);
    }
    std::sort(expected.begin(), expected.end(), ConfigOrderLess);
    EXPECT_EQ(FusedOf(candidates), expected);
    EXPECT_FALSE(expected.empty());
    // The baselines too: over a paged cache they run on the gathered K/V.
    EXPECT_FALSE(OfVariant(candidates, Variant::kPartial).empty());
    EXPECT_FALSE(OfVariant(candidates, Variant::kMaterialized).empty());
  }
}

// Every fused candidate of `p` (inputs from `seed`, NaN in the rows no sequence reads) against the
// reference; returns how many ran.
int ExpectEveryFusedCandidateMatches(Backend& backend, const AttentionProblem& p, uint32_t seed) {
  EXPECT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
  const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, seed), seed);
  DeviceCase dev(backend, cc);
  EXPECT_TRUE(dev.ok());
  if (!dev.ok()) return 0;
  const std::vector<KernelConfig> fused = FusedOf(backend.CandidateConfigs(p));
  EXPECT_FALSE(fused.empty()) << p.Key();
  for (const KernelConfig& c : fused) dev.ExpectMatchesReference(c);
  return static_cast<int>(fused.size());
}

// Every fused candidate of decode problems of each storage type and head_dim, GQA 32/8 and MQA
// 8/1, 1 and 4 new tokens (causal), contiguous and paged by 1, 3 and 16 tokens (shuffled tables,
// a shared prefix, spare pool pages of NaN), cache lengths 300, 200, 1 and 0.
TEST_F(CudaBackendTest, DecodeEveryFusedCandidateMatchesTheReference) {
  uint32_t seed = 7000;
  int runs = 0;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (auto [hq, hkv] : std::vector<std::pair<int, int>>{{32, 8}, {8, 1}}) {
        for (int new_tokens : {1, 4}) {
          for (int page : {0, 1, 3, 16}) {
            runs += ExpectEveryFusedCandidateMatches(
                *backend_, DecodeCacheProblem(dtype, d, hq, hkv, new_tokens, page), ++seed);
          }
        }
      }
    }
  }
  std::printf("[ info ] %d decode runs\n", runs);
}

// K/V stored as e4m3 (per-head scales, quantised from uniform inputs; NaN bytes in the rows no
// sequence reads): every fused candidate of fp16/bf16 Q, d64/d128, GQA 32/8 and MQA 8/1, 1 and 4
// new tokens, contiguous and paged by 1 and 16, against the fp64 reference of the scaled e4m3
// values; the products run in fp16.
TEST_F(CudaBackendTest, DecodeE4m3EveryFusedCandidateMatchesTheReference) {
  uint32_t seed = 9000;
  int runs = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (auto [hq, hkv] : std::vector<std::pair<int, int>>{{32, 8}, {8, 1}}) {
        for (int new_tokens : {1, 4}) {
          for (int page : {0, 1, 16}) {
            AttentionProblem p = DecodeCacheProblem(dtype, d, hq, hkv, new_tokens, page);
            p.kv_storage = KvStorage::kE4m3;
            runs += ExpectEveryFusedCandidateMatches(*backend_, p, ++seed);
            for (const KernelConfig& c : FusedOf(backend_->CandidateConfigs(p))) {
              EXPECT_EQ(c.precision, Precision::kFp16) << c.Key();
            }
            // The baselines read 16-bit K/V: not offered.
            EXPECT_TRUE(OfVariant(backend_->CandidateConfigs(p), Variant::kMaterialized).empty());
          }
        }
      }
    }
  }
  std::printf("[ info ] %d e4m3 decode runs\n", runs);
}

// Scales the kernel cannot use (NaN, negative) are InvalidArgument before the launch: O untouched.
TEST_F(CudaBackendTest, DecodeE4m3BadScalesAreInvalidArgumentAndLeaveOutputUntouched) {
  AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, 16);
  p.kv_storage = KvStorage::kE4m3;
  const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, 31), 31);
  DeviceCase dev(*backend_, cc);
  ASSERT_TRUE(dev.ok());
  const KernelConfig c = FusedOf(backend_->CandidateConfigs(p)).front();
  std::vector<float> bad = cc.k_scale;
  bad[3] = std::nanf("");
  dev.SetScales(bad, cc.v_scale);
  dev.FillOutput(0x5A);
  const absl::Status s = backend_->Run(p, c, dev.Buffers());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("k_scale[3]"), std::string::npos) << s;
  for (uint8_t b : dev.Output()) ASSERT_EQ(b, 0x5A);
  dev.SetScales(cc.k_scale, cc.v_scale);
  dev.ExpectMatchesReference(c);
}

// The default config of a decode problem (planned split) runs and matches, paged or not.
TEST_F(CudaBackendTest, DecodeDefaultConfigMatchesTheReference) {
  for (int page : {0, 16}) {
    const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, page);
    const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, 17), 17);
    DeviceCase dev(*backend_, cc);
    ASSERT_TRUE(dev.ok());
    absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->split_kv, kAutoSplitKv);
    dev.ExpectMatchesReference(*c);
  }
}

// A prefill of 40 new tokens over a paged cache (a 96-key shared prompt prefix, pages of 3 and
// 16 tokens, the second sequence's cache 30 keys shorter): every fused candidate (the decode
// family's prefill tiles) and the two baselines over the gathered K/V.
TEST_F(CudaBackendTest, PagedPrefillMatchesTheReference) {
  uint32_t seed = 8000;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (int page : {3, 16}) {
        AttentionProblem p = MakeProblem(2, 8, 2, 40, 136, d, /*causal=*/true, dtype);
        p.kv_valid_lens = {136, 106};
        p.page_block_size = page;
        p.shared_prefix_pages = 96 / page;
        p.kv_pool_pages = static_cast<int>(p.PagesNeeded()) + 3;
        ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
        ++seed;
        const CacheCase cc = MakeCacheCase(p, ShuffledTable(p, p.shared_prefix_pages, seed), seed);
        DeviceCase dev(*backend_, cc);
        ASSERT_TRUE(dev.ok());
        const std::vector<KernelConfig> candidates = backend_->CandidateConfigs(p);
        EXPECT_FALSE(FusedOf(candidates).empty()) << p.Key();
        for (const KernelConfig& c : FusedOf(candidates)) dev.ExpectMatchesReference(c);
        const Precision precision = dtype == DType::kFp32   ? Precision::kFp32
                                    : dtype == DType::kFp16 ? Precision::kFp16
                                                            : Precision::kBf16;
        for (const KernelConfig& c : ConfigsFor(p, precision)) {
          if (c.variant != Variant::kFused) dev.ExpectMatchesReference(c);
        }
      }
    }
  }
}

// A prefill over a paged cache on the Hopper prefill kernel (sm_90): pages of 16, 32, 64 and
// 256 tokens (one TMA box per page, or block_s rows of a larger page), a shared prefix, cache
// lengths that end inside a page, NaN in every row no sequence reads, GQA, causal and not, a
// varlen batch; every Hopper config (256 threads or more) against the reference.
// Persistent blocks walk several tiles each (more tiles than multiprocessors): tiles past a
// short sequence's queries, sequences without keys (zeros, never NaN), causal and not, GQA; the
// barrier phases carry over from tile to tile. Tiles of 1, 7, 100 and 128 rows: O staged and
// stored by TMA for both warpgroups, for the first only (the second copies its 36 rows out),
// or copied out by the first. Ping-pong alongside.
TEST_F(CudaBackendTest, PersistentBlocksWalkingManyTilesMatchTheReference) {
  if (backend_->Describe().arch != "sm90") GTEST_SKIP() << "the Hopper prefill kernel needs sm_90";
  uint32_t seed = 9100;
  int runs = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    const Precision precision = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
    for (int d : {64, 128}) {
      for (bool causal : {false, true}) {
        // 4 sequences x 64 query heads x 3 query blocks of 128: 768 tiles.
        AttentionProblem p = MakeProblem(4, 64, 8, 356, 301, d, causal, dtype);
        p.cu_seqlens_q = {0, 129, 129, 136, 492};
        p.cu_seqlens_k = {0, 200, 250, 250, 551};
        ASSERT_TRUE(p.Validate().ok()) << p.Validate();
        const Inputs in = RandomInputs(p, ++seed);
        auto ref = ReferenceAttention(p, in.q, in.k, in.v);
        ASSERT_TRUE(ref.ok()) << ref.status();
        for (const KernelConfig& c : HopperCandidates(precision)) {
          if (!c.persistent && !c.pingpong) continue;
          if (!backend_->CanImplement(p, c).ok()) continue;
          SCOPED_TRACE(p.Key() + " " + c.Key());
          ExpectMatchesReference(p, c, precision, in, *ref);
          ++runs;
        }
      }
    }
  }
  EXPECT_GE(runs, 16);
  std::printf("[ info ] %d persistent / ping-pong runs over 768 tiles\n", runs);
}

TEST_F(CudaBackendTest, PersistentBlocksInFullRoundsMatchTheReference) {
  if (backend_->Describe().arch != "sm90") GTEST_SKIP() << "the Hopper prefill kernel needs sm_90";
  const int sms = backend_->Describe().sm_count;
  ASSERT_GE(sms, 32);
  // 3 query blocks (the last of 44 rows) x (sms - 4) heads: 3 full rounds on sms - 4 blocks
  // (PersistentTileOrder::Blocks), 4 multiprocessors without one; uniform lengths, no mask.
  const int heads = (sms - 4) / 4 * 4, tiles = 3 * heads;
  ASSERT_LT(cuda::fused::PersistentTileOrder::Of(300, 128, heads, 1, false).Blocks(sms, true), sms);
  uint32_t seed = 9700;
  int runs = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    const Precision precision = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
    for (int d : {64, 128}) {
      AttentionProblem p = MakeProblem(1, heads, heads / 4, 300, 333, d, /*causal=*/false, dtype);
      ASSERT_TRUE(p.Validate().ok()) << p.Validate();
      const Inputs in = RandomInputs(p, ++seed);
      auto ref = ReferenceAttention(p, in.q, in.k, in.v);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (const KernelConfig& c : HopperCandidates(precision)) {
        if (!c.persistent || !backend_->CanImplement(p, c).ok()) continue;
        SCOPED_TRACE(p.Key() + " " + c.Key());
        for (int repeat = 0; repeat < 2; ++repeat) ExpectMatchesReference(p, c, precision, in, *ref);
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 4);
  std::printf("[ info ] %d persistent configs over %d tiles in full rounds\n", runs, tiles);
}

// Causal persistent launches in both tile orders (PersistentTileOrder), each asked for through
// the launch arguments, and in the launcher's own choice through the backend: pairs of query
// blocks (k, m_blocks - 1 - k) of one (sequence, head), the middle blocks of an odd count last
// with an empty partner; longest first. Even and odd counts, more pairs than multiprocessors,
// GQA, keys before the queries (bottom-right mask), and more queries than keys (rows that see
// none: zeros). Pairs asked for on a varlen batch are refused.
TEST_F(CudaBackendTest, PersistentCausalTileOrdersMatchTheReference) {
  if (backend_->Describe().arch != "sm90") GTEST_SKIP() << "the Hopper prefill kernel needs sm_90";
  const int sms = backend_->Describe().sm_count;
  uint32_t seed = 9900;
  int runs = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    const Precision precision = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
    for (int d : {64, 128}) {
      // 2 query blocks (one pair) in 144 (sequence, head)s, more pairs than multiprocessors; 5
      // (2 pairs and a middle block) with keys before the queries; 3 with fewer keys than queries.
      struct Shape {
        int batch, q_heads, kv_heads, q_len, kv_len;
      };
      for (const Shape& s : {Shape{3, 48, 12, 256, 256}, Shape{1, 8, 2, 613, 700}, Shape{1, 8, 2, 300, 200}}) {
        const AttentionProblem p = MakeProblem(s.batch, s.q_heads, s.kv_heads, s.q_len, s.kv_len, d, true, dtype);
        ASSERT_TRUE(p.Validate().ok()) << p.Validate();
        if (s.q_len == 256) {
          ASSERT_GT(cuda::fused::PersistentTileOrder::Of(s.q_len, 128, s.q_heads, s.batch, true, true).Units(), sms)
              << "blocks walk several pairs";
        }
        const CacheCase c = MakeCacheCase(p, {}, ++seed);
        DeviceCase dev(*backend_, c);
        ASSERT_TRUE(dev.ok());
        for (const KernelConfig& config : HopperCandidates(precision)) {
          if (!config.persistent || !backend_->CanImplement(p, config).ok()) continue;
          SCOPED_TRACE(p.Key() + " " + config.Key());
          for (auto order : {cuda::fused::CausalTileOrder::kPairs, cuda::fused::CausalTileOrder::kLongestFirst}) {
            SCOPED_TRACE(order == cuda::fused::CausalTileOrder::kPairs ? "pairs" : "longest first");
            dev.FillOutput(0xFF);
            const AttentionBuffers b = dev.Buffers();
            cuda::AttentionParams params = cuda::AttentionParamsFor(p, b.q, b.k, b.v, b.o);
            params.causal_order = order;
            ASSERT_EQ(cuda::LaunchFused(params, config, nullptr), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            dev.ExpectOutputMatches(c.ref, config);
            ++runs;
          }
          dev.ExpectMatchesReference(config);  // the launcher's choice, through the backend
        }
      }
    }
  }
  EXPECT_GE(runs, 24);
  std::printf("[ info ] %d causal persistent runs in a given tile order\n", runs);

  // Pairs of a varlen batch would not cost the same: refused, not run in another order.
  AttentionProblem varlen = MakeProblem(2, 8, 8, 300, 300, 128, /*causal=*/true, DType::kBf16);
  varlen.cu_seqlens_q = {0, 300, 429};
  varlen.cu_seqlens_k = {0, 300, 429};
  ASSERT_TRUE(varlen.Validate().ok()) << varlen.Validate();
  const CacheCase c = MakeCacheCase(varlen, {}, ++seed);
  DeviceCase dev(*backend_, c);
  ASSERT_TRUE(dev.ok());
  auto cu_seqlens = backend_->Allocate(varlen.cu_seqlens_q.size() * sizeof(int32_t));
  ASSERT_TRUE(cu_seqlens.ok()) << cu_seqlens.status();
  ASSERT_TRUE(backend_->CopyToDevice(cu_seqlens->data(), varlen.cu_seqlens_q.data(),
                                     varlen.cu_seqlens_q.size() * sizeof(int32_t)).ok());
  for (const KernelConfig& config : HopperCandidates(Precision::kBf16)) {
    if (!config.persistent || !backend_->CanImplement(varlen, config).ok()) continue;
    const AttentionBuffers b = dev.Buffers();
    cuda::AttentionParams params = cuda::AttentionParamsFor(varlen, b.q, b.k, b.v, b.o);
    params.cu_seqlens_q = params.cu_seqlens_k = static_cast<const int32_t*>(cu_seqlens->data());
    params.causal_order = cuda::fused::CausalTileOrder::kPairs;
    EXPECT_EQ(cuda::LaunchFused(params, config, nullptr), cudaErrorInvalidValue) << config.Key();
  }
}

TEST_F(CudaBackendTest, PagedPrefillOnTheHopperKernelMatchesTheReference) {
  if (backend_->Describe().arch != "sm90") GTEST_SKIP() << "the Hopper prefill kernel needs sm_90";
  uint32_t seed = 8500;
  int runs = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (int d : {64, 128}) {
      for (int page : {16, 32, 64, 256}) {
        for (bool causal : {true, false}) {
          AttentionProblem p = MakeProblem(2, 8, 2, 200, 700, d, causal, dtype);
          p.kv_valid_lens = {700, 555};
          p.page_block_size = page;
          p.shared_prefix_pages = 320 / page;
          if (page == 32 && causal) {  // varlen: queries and cache lengths per sequence
            p.kv_valid_lens.clear();
            p.cu_seqlens_q = {0, 200, 333};
            p.cu_seqlens_k = {0, 700, 1255};
            p.kv_len = 700;
          }
          p.kv_pool_pages = static_cast<int>(p.PagesNeeded()) + 3;
          ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
          ++seed;
          const CacheCase cc = MakeCacheCase(p, ShuffledTable(p, p.shared_prefix_pages, seed), seed);
          DeviceCase dev(*backend_, cc);
          ASSERT_TRUE(dev.ok());
          int hopper = 0;
          for (const KernelConfig& c : FusedOf(backend_->CandidateConfigs(p))) {
            if (c.threads < 256) continue;  // the decode family's
            dev.ExpectMatchesReference(c);
            ++hopper;
            ++runs;
          }
          EXPECT_GT(hopper, 0) << p.Key();
        }
      }
    }
  }
  std::printf("[ info ] %d Hopper paged prefill runs\n", runs);
}

// Partial and materialized over paged decode caches (uniform with cache lengths 300..0, and a
// varlen batch with an empty cache) gather K/V through the table first; they match the
// reference and never read a NaN pool row.
TEST_F(CudaBackendTest, BaselinesOverAPagedCacheMatchTheReference) {
  uint32_t seed = 9000;
  for (DType dtype : {DType::kFp32, DType::kBf16}) {
    const Precision precision = dtype == DType::kFp32 ? Precision::kFp32 : Precision::kBf16;
    for (int page : {1, 16}) {
      AttentionProblem uniform = DecodeCacheProblem(dtype, 128, 32, 8, 4, page);
      AttentionProblem varlen = MakeProblem(3, 8, 1, 4, 250, 64, /*causal=*/true, dtype);
      varlen.kind = ProblemKind::kDecode;
      varlen.cu_seqlens_q = {0, 4, 5, 8};
      varlen.cu_seqlens_k = {0, 250, 250, 327};  // the second sequence's cache is empty
      varlen.page_block_size = page;
      varlen.kv_pool_pages = static_cast<int>(varlen.PagesNeeded()) + 2;
      for (const AttentionProblem& p : {uniform, varlen}) {
        ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
        ++seed;
        const CacheCase cc =
            MakeCacheCase(p, p.kv_valid_lens.empty() ? ShuffledTable(p, 0, seed) : DecodeCacheTable(p, seed), seed);
        DeviceCase dev(*backend_, cc);
        ASSERT_TRUE(dev.ok());
        for (const KernelConfig& c : ConfigsFor(p, precision)) {
          if (c.variant != Variant::kFused) dev.ExpectMatchesReference(c);
        }
        // The same tables for the fused variant (varlen included).
        absl::StatusOr<KernelConfig> def = DefaultConfig("cuda", p);
        ASSERT_TRUE(def.ok());
        dev.ExpectMatchesReference(*def);
      }
    }
  }
}

// The workspace in a caller's arena: split decode partials and the baselines' S/P and gathered
// K/V, the arena NaN to begin with, give what a backend with its own workspace (no arena) gives.
TEST_F(CudaBackendTest, AScratchArenaGivesTheOwnWorkspacesResults) {
  ASSERT_TRUE(backend_->UseScratchArena(nullptr, 0).ok());  // no arena: the backend's own workspace
  auto made = CreateCudaBackend(0);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Backend> in_arena = *std::move(made);
  ASSERT_TRUE(in_arena->UseScratchArena(nullptr, 0).ok());
  uint32_t seed = 9400;
  for (int page : {0, 16}) {
    const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 2, page);
    const CacheCase cc = MakeCacheCase(p, page > 0 ? DecodeCacheTable(p, ++seed) : std::vector<int32_t>{}, ++seed);
    DeviceCase own(*backend_, cc);
    DeviceCase arena_case(*in_arena, cc);
    ASSERT_TRUE(own.ok() && arena_case.ok());
    std::vector<KernelConfig> configs;
    for (const KernelConfig& c : ConfigsFor(p, Precision::kBf16)) {
      if (c.variant != Variant::kFused || c.split_kv > 1 || c.split_kv == kAutoSplitKv) configs.push_back(c);
    }
    for (const KernelConfig& c : configs) {
      SCOPED_TRACE(p.Key() + " " + c.Key());
      absl::StatusOr<size_t> bytes = in_arena->ScratchBytes(p, c);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      absl::StatusOr<DeviceMemory> arena = in_arena->Allocate(std::max<size_t>(*bytes, 256));
      ASSERT_TRUE(arena.ok()) << arena.status();
      ASSERT_TRUE(in_arena->Fill(arena->data(), 0xFF, arena->bytes()).ok());
      ASSERT_TRUE(in_arena->UseScratchArena(arena->data(), arena->bytes()).ok());
      arena_case.ExpectMatchesReference(c);
      if (c.variant == Variant::kFused) {
        // The split partials are combined in a fixed order: the same bits as the own workspace.
        absl::StatusOr<std::vector<uint8_t>> expected = own.Run(c);
        absl::StatusOr<std::vector<uint8_t>> got = arena_case.Run(c);
        ASSERT_TRUE(expected.ok() && got.ok());
        EXPECT_EQ(*got, *expected);
      }
      if (*bytes > 256) {
        ASSERT_TRUE(in_arena->UseScratchArena(arena->data(), *bytes - 256).ok());
        EXPECT_TRUE(absl::IsFailedPrecondition(arena_case.Run(c).status()));
      }
      ASSERT_TRUE(in_arena->UseScratchArena(nullptr, 0).ok());
    }
  }
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Graph-timed blocks: a fused prefill, a split decode (workspace and counters) and a
// materialized baseline over a paged cache (the gather, zeroed rows of a sequence without keys,
// cuBLAS) each time through one CUDA graph as many samples as launch by launch, all positive and
// of about the same median (a host-bound launch sequence less: its waits for the host are what
// the graph removes), and leave O as Run writes it.
TEST_F(CudaBackendTest, AGraphTimedBlockTimesWhatTheQueuedOneTimes) {
  Backend* graphs = backend_;
  EXPECT_TRUE(graphs->TakesGraphTiming());

  struct Timed {
    CacheCase c;
    KernelConfig config;
  };
  std::vector<Timed> cases;
  {
    const AttentionProblem p = MakeProblem(1, 12, 12, 512, 512, 64, false, DType::kFp16);
    absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
    ASSERT_TRUE(c.ok()) << c.status();
    cases.push_back({MakeCacheCase(p, {}, 9501), *c});
  }
  {
    const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, 0);
    absl::StatusOr<KernelConfig> c = DefaultConfig("cuda", p);
    ASSERT_TRUE(c.ok()) << c.status();
    KernelConfig split = *c;
    split.split_kv = 4;
    cases.push_back({MakeCacheCase(p, {}, 9502), split});
  }
  {
    const AttentionProblem p = DecodeCacheProblem(DType::kFp16, 128, 32, 8, 1, 16);
    KernelConfig materialized;
    materialized.variant = Variant::kMaterialized;
    materialized.block_m = materialized.block_s = 64;
    materialized.threads = 256;
    materialized.precision = Precision::kFp16;
    cases.push_back({MakeCacheCase(p, DecodeCacheTable(p, 9503), 9503), materialized});
  }
  for (const Timed& t : cases) {
    const AttentionProblem& p = t.c.problem;
    SCOPED_TRACE(p.Key() + " " + t.config.Key());
    ASSERT_TRUE(graphs->CanImplement(p, t.config).ok()) << graphs->CanImplement(p, t.config);
    DeviceCase dev(*graphs, t.c);
    ASSERT_TRUE(dev.ok());
    TimingOptions opt;
    opt.warmup = 3;
    opt.repeats = 20;
    opt.max_seconds = 10;
    absl::StatusOr<TimingSamples> queued = graphs->Time(p, t.config, dev.Buffers(), opt);
    ASSERT_TRUE(queued.ok()) << queued.status();
    opt.graph = true;
    absl::StatusOr<TimingSamples> graphed = graphs->Time(p, t.config, dev.Buffers(), opt);
    ASSERT_TRUE(graphed.ok()) << graphed.status();
    EXPECT_FALSE(queued->graphed);
    EXPECT_TRUE(graphed->graphed);
    EXPECT_EQ(graphed->micros.size(), queued->micros.size());
    for (double us : graphed->micros) EXPECT_GT(us, 0.0);
    const double ratio = MedianOf(graphed->micros) / MedianOf(queued->micros);
    EXPECT_GT(ratio, 0.5);
    EXPECT_LT(ratio, 2.0);
    std::printf("[ info ] %s %s: median %.2f us launch by launch, %.2f us through a graph\n", p.Key().c_str(),
                t.config.Key().c_str(), MedianOf(queued->micros), MedianOf(graphed->micros));
    // The graph's last launch left O as Run writes it.
    const std::vector<uint8_t> after_graph = dev.Output();
    absl::StatusOr<std::vector<uint8_t>> run = dev.Run(t.config);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(after_graph, *run) << "O after the graph-timed block differs from Run's";
    dev.ExpectMatchesReference(t.config);
    // The backend's own stream and cuBLAS's are as before: a queued block still runs.
    opt.graph = false;
    absl::StatusOr<TimingSamples> again = graphs->Time(p, t.config, dev.Buffers(), opt);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_FALSE(again->graphed);
  }
}

// A table naming a page outside the pool, or a negative page, is InvalidArgument for every
// variant, in Run and in Time, before anything is launched: O keeps its byte pattern.
TEST_F(CudaBackendTest, InvalidBlockTableIsInvalidArgumentAndLeavesOutputUntouched) {
  const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, 16);
  const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, 31), 31);
  DeviceCase dev(*backend_, cc);
  ASSERT_TRUE(dev.ok());
  absl::StatusOr<KernelConfig> fused = DefaultConfig("cuda", p);
  ASSERT_TRUE(fused.ok());
  std::vector<KernelConfig> configs = {*fused};
  for (const KernelConfig& c : ConfigsFor(p, Precision::kBf16)) {
    if (c.variant != Variant::kFused) configs.push_back(c);
  }
  const size_t second_page_of_sequence_1 = static_cast<size_t>(p.BlockTableWidth()) + 1;
  for (int32_t bad : {static_cast<int32_t>(p.PoolPages()), int32_t{1} << 30, int32_t{-1}}) {
    std::vector<int32_t> table = cc.table;
    table[second_page_of_sequence_1] = bad;
    dev.SetTable(table);
    for (const KernelConfig& c : configs) {
      SCOPED_TRACE(c.Key() + " with page " + std::to_string(bad));
      const absl::StatusOr<std::vector<uint8_t>> out = dev.Run(c, 0xA5);
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
      EXPECT_NE(out.status().message().find("block_table"), std::string::npos) << out.status();
      const std::vector<uint8_t> o = dev.Output();
      EXPECT_EQ(std::count(o.begin(), o.end(), uint8_t{0xA5}), static_cast<std::ptrdiff_t>(o.size()))
          << "the output was written";
      TimingOptions opt;
      opt.warmup = 1;
      opt.repeats = 3;
      EXPECT_EQ(backend_->Time(p, c, dev.Buffers(), opt).status().code(), absl::StatusCode::kInvalidArgument);
      const std::vector<uint8_t> after_time = dev.Output();
      EXPECT_EQ(after_time, o) << "Time wrote the output";
    }
  }
  // A table in plain host memory: the kernels read the table on the device.
  AttentionBuffers host_table = dev.Buffers();
  host_table.block_table = cc.table.data();
  EXPECT_EQ(backend_->Run(p, *fused, host_table).code(), absl::StatusCode::kInvalidArgument);
  // The backend still works, with the good table back.
  dev.SetTable(cc.table);
  for (const KernelConfig& c : configs) dev.ExpectMatchesReference(c);
}

// Time on a paged cache: the table is checked once, the timed launches (decode; gather and
// passes for a baseline) give one sample each.
TEST_F(CudaBackendTest, TimeRunsThePagedVariants) {
  const AttentionProblem p = DecodeCacheProblem(DType::kFp16, 128, 32, 8, 1, 16);
  const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, 41), 41);
  DeviceCase dev(*backend_, cc);
  ASSERT_TRUE(dev.ok());
  absl::StatusOr<KernelConfig> fused = DefaultConfig("cuda", p);
  ASSERT_TRUE(fused.ok());
  std::vector<KernelConfig> configs = {*fused};
  for (const KernelConfig& c : ConfigsFor(p, Precision::kFp16)) {
    if (c.variant != Variant::kFused) configs.push_back(c);
  }
  for (const KernelConfig& c : configs) {
    TimingOptions opt;
    opt.warmup = 2;
    opt.repeats = 5;
    opt.max_seconds = 5;
    auto t = backend_->Time(p, c, dev.Buffers(), opt);
    ASSERT_TRUE(t.ok()) << c.Key() << ": " << t.status();
    EXPECT_EQ(t->micros.size(), 5u) << c.Key();
    for (double us : t->micros) EXPECT_GT(us, 0.0) << c.Key();
    dev.ExpectMatchesReference(c);  // and Time left a correct output behind
  }
}

// A stream of the test's own, destroyed with it.
class TestStream {
 public:
  TestStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess); }
  ~TestStream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }
  void Sync() const { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }

 private:
  cudaStream_t stream_ = nullptr;
};

// RunOnStream: decode caches (contiguous and paged) at their capacity with the cache lengths in
// device memory, on a non-blocking stream of the caller's: each split count matches the
// reference; then one launch captured into a CUDA graph matches it when replayed, and again
// after the lengths were rewritten in place (the graph reads them when it runs).
TEST_F(CudaBackendTest, RunOnStreamMatchesOnACallersStreamAndReplayedFromAGraph) {
  for (int page : {0, 16}) {
    const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, page);
    const uint32_t seed = 61 + page;
    const CacheCase cc = MakeCacheCase(p, DecodeCacheTable(p, seed), seed);
    DeviceCase dev(*backend_, cc);
    ASSERT_TRUE(dev.ok());
    AttentionProblem at_capacity = p;
    at_capacity.kv_valid_lens.clear();
    auto lengths = backend_->Allocate(p.kv_valid_lens.size() * sizeof(int32_t));
    ASSERT_TRUE(lengths.ok()) << lengths.status();
    ASSERT_TRUE(backend_->CopyToDevice(lengths->data(), p.kv_valid_lens.data(),
                                       p.kv_valid_lens.size() * sizeof(int32_t)).ok());
    TestStream stream;
    StreamLaunch launch;
    launch.stream = stream.get();
    launch.kv_valid_lens = static_cast<const int32_t*>(lengths->data());
    absl::StatusOr<KernelConfig> config = DefaultConfig("cuda", p);
    ASSERT_TRUE(config.ok()) << config.status();
    for (int split : {1, 4, kAutoSplitKv}) {
      KernelConfig c = *config;
      c.split_kv = split;
      SCOPED_TRACE(p.Key() + " " + c.Key());
      dev.FillOutput(0xFF);
      ASSERT_TRUE(backend_->RunOnStream(at_capacity, c, dev.Buffers(), launch).ok());
      stream.Sync();
      dev.ExpectOutputMatches(cc.ref, c);
    }

    KernelConfig c = *config;
    c.split_kv = 4;  // the workspace and counters exist from the launches above
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    const absl::Status captured = backend_->RunOnStream(at_capacity, c, dev.Buffers(), launch);
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    ASSERT_TRUE(captured.ok()) << captured;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    dev.FillOutput(0xFF);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    stream.Sync();
    dev.ExpectOutputMatches(cc.ref, c);

    // Shorter caches, within the pages the table maps: the same graph, new lengths.
    AttentionProblem shorter = p;
    shorter.kv_valid_lens = {150, 17, 1, 0};
    const CacheCase shorter_case = MakeCacheCase(shorter, cc.table, seed);
    ASSERT_TRUE(backend_->CopyToDevice(lengths->data(), shorter.kv_valid_lens.data(),
                                       shorter.kv_valid_lens.size() * sizeof(int32_t)).ok());
    dev.FillOutput(0xFF);
    ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    stream.Sync();
    dev.ExpectOutputMatches(shorter_case.ref, c);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

// Persistent blocks with two Q buffers (head_dim 64) split a partly filled last round along the
// keys (SplitTail): a tile's pieces run in different blocks, each writes its partial state, and the
// last to finish merges them. Shapes where the split is planned on this GPU: fewer tiles than
// multiprocessors (a piece per block, 8 pieces a tile) and a whole round before the split one;
// odd query and key lengths, GQA, a paged cache, and keys that score far higher than the rest
// (their piece's maxima are far above the others', so the merge must rescale); through Run and
// on a caller's stream, twice each (a launch leaves the counters zero for the next).
TEST_F(CudaBackendTest, SplitLastRoundMatchesTheReference) {
  if (backend_->Describe().arch != "sm90") GTEST_SKIP() << "the Hopper prefill kernel needs sm_90";
  const int sms = backend_->Describe().sm_count;
  uint32_t seed = 9300;
  int split_runs = 0;
  struct Shape {
    int batch, q_heads, kv_heads, q_len, kv_len, page;
  };
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    const Precision precision = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
    for (int d : {64, 128}) {
      // The last: 1070 one-row-block tiles, 8 whole rounds on 132 blocks and 14 tiles split, which
      // head_dim 128 runs as a tail launch (SplitTail::TailLaunchPays).
      for (const Shape& s : {Shape{1, 6, 2, 200, 1000, 0}, Shape{2, 70, 10, 128, 520, 0}, Shape{1, 6, 2, 200, 1000, 64},
                             Shape{2, 535, 107, 7, 400, 0}}) {
        AttentionProblem p = MakeProblem(s.batch, s.q_heads, s.kv_heads, s.q_len, s.kv_len, d, /*causal=*/false, dtype);
        if (s.page > 0) {
          p.page_block_size = s.page;
          p.kv_pool_pages = static_cast<int>(p.PagesNeeded()) + 3;
        }
        ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
        ++seed;
        CacheCase cc = MakeCacheCase(p, s.page > 0 ? ShuffledTable(p, 0, seed) : std::vector<int32_t>{}, seed);
        if (s.page == 0 && s.kv_len >= 480) {
          // Keys 400-479 of every sequence 8x larger: their scores dominate their piece's maxima.
          const size_t row = static_cast<size_t>(p.kv_heads) * d;
          for (int b = 0; b < p.batch; ++b) {
            for (int64_t r = p.KeyStart(b) + 400; r < p.KeyStart(b) + 480; ++r) {
              for (size_t i = 0; i < row; ++i) cc.in.k[static_cast<size_t>(r) * row + i] *= 8.0f;
            }
          }
          auto ref = ReferenceAttention(p, cc.in.q, cc.in.k, cc.in.v);
          ASSERT_TRUE(ref.ok()) << ref.status();
          cc.ref = *std::move(ref);
        }
        DeviceCase dev(*backend_, cc);
        ASSERT_TRUE(dev.ok());
        for (const KernelConfig& c : HopperCandidates(precision)) {
          if (!c.persistent || !backend_->CanImplement(p, c).ok()) continue;
          if (cuda::FusedSplitWorkspaceFor(p, c, sms).partial_floats == 0) continue;
          SCOPED_TRACE(p.Key() + " " + c.Key());
          for (int launch = 0; launch < 2; ++launch) dev.ExpectMatchesReference(c);
          TestStream stream;
          StreamLaunch on;
          on.stream = stream.get();
          for (int launch = 0; launch < 2; ++launch) {
            dev.FillOutput(0xFF);
            ASSERT_TRUE(backend_->RunOnStream(p, c, dev.Buffers(), on).ok());
            stream.Sync();
            dev.ExpectOutputMatches(cc.ref, c);
          }
          ++split_runs;
        }
      }
    }
  }
  // The d64 st2/persistent instance on each shape, the d128 one on the last, each dtype.
  if (sms == 132) EXPECT_EQ(split_runs, 10);
  EXPECT_GE(split_runs, 1);
  std::printf("[ info ] %d split-round configs on %d multiprocessors\n", split_runs, sms);
}

// A launch that needs more workspace than the backend has allocated refuses to allocate while
// the stream is captured (FailedPrecondition, the capture intact); the same launch outside a
// capture allocates, and the capture then succeeds.
TEST_F(CudaBackendTest, RunOnStreamDoesNotAllocateWhileCapturing) {
  auto fresh = CreateCudaBackend(0);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  Backend& backend = **fresh;
  const AttentionProblem p = DecodeCacheProblem(DType::kFp16, 128, 32, 8, 1, 0);
  const CacheCase cc = MakeCacheCase(p, {}, 71);
  DeviceCase dev(backend, cc);
  ASSERT_TRUE(dev.ok());
  AttentionProblem at_capacity = p;
  at_capacity.kv_valid_lens.clear();
  auto lengths = backend.Allocate(p.kv_valid_lens.size() * sizeof(int32_t));
  ASSERT_TRUE(lengths.ok());
  ASSERT_TRUE(backend.CopyToDevice(lengths->data(), p.kv_valid_lens.data(), p.kv_valid_lens.size() * 4).ok());
  TestStream stream;
  StreamLaunch launch;
  launch.stream = stream.get();
  launch.kv_valid_lens = static_cast<const int32_t*>(lengths->data());
  KernelConfig c = *DefaultConfig("cuda", p);
  c.split_kv = 8;

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status refused = backend.RunOnStream(at_capacity, c, dev.Buffers(), launch);
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess) << "the capture was broken";
  cudaGraphDestroy(graph);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("before capturing"), std::string::npos) << refused;

  ASSERT_TRUE(backend.RunOnStream(at_capacity, c, dev.Buffers(), launch).ok());
  stream.Sync();
  dev.ExpectOutputMatches(cc.ref, c);
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status captured = backend.RunOnStream(at_capacity, c, dev.Buffers(), launch);
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
  EXPECT_TRUE(captured.ok()) << captured;
  cudaGraphDestroy(graph);
}

// What the stream path refuses, before launching anything: the baselines, the lengths as host
// memory, a varlen problem without device prefix sums.
TEST_F(CudaBackendTest, RunOnStreamRefusesWhatItCannotRunWithoutCopies) {
  const AttentionProblem p = DecodeCacheProblem(DType::kBf16, 128, 32, 8, 1, 0);
  const CacheCase cc = MakeCacheCase(p, {}, 81);
  DeviceCase dev(*backend_, cc);
  ASSERT_TRUE(dev.ok());
  TestStream stream;
  StreamLaunch launch;
  launch.stream = stream.get();
  dev.FillOutput(0xA5);
  // The problem's own (host) lengths.
  absl::Status s = backend_->RunOnStream(p, *DefaultConfig("cuda", p), dev.Buffers(), launch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("device"), std::string::npos) << s;
  AttentionProblem at_capacity = p;
  at_capacity.kv_valid_lens.clear();
  int baselines = 0;
  for (const KernelConfig& c : ConfigsFor(at_capacity, Precision::kBf16)) {
    if (c.variant == Variant::kFused || !backend_->CanImplement(at_capacity, c).ok()) continue;
    s = backend_->RunOnStream(at_capacity, c, dev.Buffers(), launch);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << c.Key() << ": " << s;
    ++baselines;
  }
  EXPECT_GT(baselines, 0);
  AttentionProblem varlen = MakeProblem(2, 8, 2, 8, 16, 64, false, DType::kFp16);
  varlen.cu_seqlens_q = {0, 3, 8};
  varlen.cu_seqlens_k = {0, 16, 20};
  varlen.q_len = 5;
  ASSERT_TRUE(varlen.Validate().ok()) << varlen.Validate();
  s = backend_->RunOnStream(varlen, *DefaultConfig("cuda", varlen), dev.Buffers(), launch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("cu_seqlens"), std::string::npos) << s;
  stream.Sync();
  const std::vector<uint8_t> o = dev.Output();
  EXPECT_EQ(std::count(o.begin(), o.end(), uint8_t{0xA5}), static_cast<std::ptrdiff_t>(o.size()));
}

}  // namespace
}  // namespace fusetune

int main(int argc, char** argv) {
  const int devices = fusetune::CudaDeviceCount();
  if (devices == 0) {
    std::printf("SKIPPED: no CUDA device or driver on this host (CudaDeviceCount() == 0)\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
