// Standalone dev driver for the fused CUDA kernel (llm.c dev/cuda style): builds problems,
// checks every compiled instantiation against the fp64 CPU reference, and times configs with
// CUDA events (warm-up, L2 flushed before each timed launch, median of many samples).
//
//   fused_dev check [fp32]          correctness of every instance on odd-length problems
//                                   (fp32: only the exact-fp32 SIMT instances)
//   fused_dev bench [csv] [samples] timing of the seed shapes (fp32, tf32, fp16) and the
//                                   flagship shapes (b4 h16 d128 S=4096, bf16 and fp16,
//                                   causal and not); per-config table (+ csv)
//   fused_dev seed-fp32 [csv] [samples]  timing of the exact-fp32 instances on the seed shapes
//   fused_dev launch-cost <problem> <config> [launches]  host and GPU time per back-to-back launch
//
// Exit code: 0 when every check passed, 1 on a failed check or CUDA error, 77 without a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "attention_params.h"
#include "fused/fused_configs.h"
#include "fusetune/base/median.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/kernels/reference.h"

namespace {

using fusetune::AttentionProblem;
using fusetune::DType;
using fusetune::KernelConfig;
using fusetune::Precision;

#define CUDA_OK(call)                                                                    \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_),       \
                   __FILE__, __LINE__, cudaGetErrorString(err_));                        \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0) CUDA_OK(cudaMalloc(&ptr, n));
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Host inputs (rounded to the storage type) and their device copies.
struct ProblemData {
  AttentionProblem problem;
  std::vector<float> q, k, v;
  DeviceBuffer dq, dk, dv, dout;
  DeviceBuffer d_cu_q, d_cu_k, d_valid;

  // key_growth > 0 scales key j of each sequence by 1 + key_growth * j / kv_len (uniform
  // batches only), so that later tiles raise the row max many times over (online-softmax
  // rescales, the lazy-rescale fallback).
  explicit ProblemData(const AttentionProblem& p, uint64_t seed, float key_growth = 0.f)
      : problem(p),
        dq(p.QElements() * fusetune::DTypeBytes(p.dtype)),
        dk(p.KVElements() * fusetune::DTypeBytes(p.dtype)),
        dv(p.KVElements() * fusetune::DTypeBytes(p.dtype)),
        dout(p.OElements() * fusetune::DTypeBytes(p.dtype)),
        d_cu_q(p.cu_seqlens_q.size() * 4),
        d_cu_k(p.cu_seqlens_k.size() * 4),
        d_valid(p.kv_valid_lens.size() * 4) {
    std::mt19937_64 rng(seed);
    // Q spread wider than K/V so that scores have a real range (tests the online max).
    std::uniform_real_distribution<float> qdist(-2.0f, 2.0f), dist(-1.0f, 1.0f);
    q.resize(p.QElements());
    k.resize(p.KVElements());
    v.resize(p.KVElements());
    for (float& x : q) x = qdist(rng);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    if (key_growth > 0.f && p.cu_seqlens_k.empty()) {
      const size_t row = static_cast<size_t>(p.kv_heads) * p.head_dim;
      for (size_t i = 0; i < k.size(); ++i) {
        const int j = static_cast<int>((i / row) % p.kv_len);
        k[i] *= 1.f + key_growth * static_cast<float>(j) / static_cast<float>(p.kv_len);
      }
    }
    fusetune::RoundToDType(p.dtype, q);
    fusetune::RoundToDType(p.dtype, k);
    fusetune::RoundToDType(p.dtype, v);
    Upload(q, dq);
    Upload(k, dk);
    Upload(v, dv);
    if (!p.cu_seqlens_q.empty()) {
      CUDA_OK(cudaMemcpy(d_cu_q.ptr, p.cu_seqlens_q.data(), d_cu_q.bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_cu_k.ptr, p.cu_seqlens_k.data(), d_cu_k.bytes, cudaMemcpyHostToDevice));
    }
    if (!p.kv_valid_lens.empty()) {
      CUDA_OK(cudaMemcpy(d_valid.ptr, p.kv_valid_lens.data(), d_valid.bytes, cudaMemcpyHostToDevice));
    }
  }

  void Upload(const std::vector<float>& host, DeviceBuffer& dev) {
    std::vector<unsigned char> bytes(host.size() * fusetune::DTypeBytes(problem.dtype));
    fusetune::EncodeTensor(problem.dtype, host, bytes.data());
    if (!bytes.empty()) CUDA_OK(cudaMemcpy(dev.ptr, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }

  fusetune::cuda::AttentionParams Params() const {
    const AttentionProblem& p = problem;
    fusetune::cuda::AttentionParams a;
    a.q = dq.ptr;
    a.k = dk.ptr;
    a.v = dv.ptr;
    a.o = dout.ptr;
    a.q_row_stride = a.o_row_stride = static_cast<int64_t>(p.q_heads) * p.head_dim;
    a.k_row_stride = a.v_row_stride = static_cast<int64_t>(p.kv_heads) * p.head_dim;
    a.q_head_stride = a.k_head_stride = a.v_head_stride = a.o_head_stride = p.head_dim;
    a.batch = p.batch;
    a.q_heads = p.q_heads;
    a.kv_heads = p.kv_heads;
    a.head_dim = p.head_dim;
    a.q_len = p.q_len;
    a.kv_len = p.kv_len;
    if (p.is_varlen()) {
      a.cu_seqlens_q = static_cast<const int32_t*>(d_cu_q.ptr);
      a.cu_seqlens_k = static_cast<const int32_t*>(d_cu_k.ptr);
      int mq = 0, mk = 0;
      for (int b = 0; b < p.batch; ++b) {
        mq = std::max(mq, p.QueryLen(b));
        mk = std::max(mk, p.KeyLen(b));
      }
      a.q_len = mq;
      a.kv_len = mk;
    }
    if (!p.kv_valid_lens.empty()) a.kv_valid_lens = static_cast<const int32_t*>(d_valid.ptr);
    a.causal = p.causal;
    a.dtype = p.dtype;
    a.scale = p.EffectiveScale();
    a.scale_log2 = a.scale * 1.4426950408889634f;
    a.q_total_rows = p.TotalQueries();
    a.kv_total_rows = p.TotalKeys();
    return a;
  }
};

// Rows compared against the reference: all of them for small problems, else a spread sample
// (first, last, random) per query head.
struct Reference {
  std::vector<int64_t> tokens;
  std::vector<double> rows;  // [tokens.size()][q_heads][head_dim]
};

Reference ComputeReference(const ProblemData& data, int64_t max_full_rows, uint64_t seed) {
  const AttentionProblem& p = data.problem;
  Reference ref;
  const int64_t total = p.TotalQueries();
  if (total <= max_full_rows) {
    for (int64_t t = 0; t < total; ++t) ref.tokens.push_back(t);
  } else {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> pick(0, total - 1);
    ref.tokens = {0, total - 1};
    for (int b = 0; b < p.batch; ++b) {
      if (p.QueryLen(b) > 0) ref.tokens.push_back(p.QueryStart(b) + p.QueryLen(b) - 1);
    }
    while (static_cast<int64_t>(ref.tokens.size()) < max_full_rows) ref.tokens.push_back(pick(rng));
  }
  const int d = p.head_dim;
  ref.rows.resize(ref.tokens.size() * p.q_heads * d);
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    for (int h = 0; h < p.q_heads; ++h) {
      auto s = fusetune::ReferenceAttentionRow(
          p, data.q, data.k, data.v, ref.tokens[i], h,
          std::span<double>(ref.rows.data() + (i * p.q_heads + h) * d, d));
      if (!s.ok()) {
        std::fprintf(stderr, "reference failed: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
    }
  }
  return ref;
}

struct CheckResult {
  double max_abs = 0, rel_l2 = 0;
  double max_rel = 0;  // max_abs / max|ref|: what the library's verification bounds
  int64_t nan_count = 0;
  bool pass = false;
};

CheckResult Compare(const ProblemData& data, const Reference& ref, const KernelConfig& c) {
  const AttentionProblem& p = data.problem;
  const size_t n = p.OElements();
  std::vector<unsigned char> raw(n * fusetune::DTypeBytes(p.dtype));
  CUDA_OK(cudaMemcpy(raw.data(), data.dout.ptr, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  fusetune::DecodeTensor(p.dtype, raw.data(), n, out.data());
  CheckResult r;
  // Every element must have been written (the output was poisoned with NaN).
  for (float x : out) r.nan_count += std::isfinite(x) ? 0 : 1;
  double num = 0, den = 0, ref_max = 0;
  const int d = p.head_dim;
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    for (int h = 0; h < p.q_heads; ++h) {
      for (int e = 0; e < d; ++e) {
        const double want = ref.rows[(i * p.q_heads + h) * d + e];
        ref_max = std::max(ref_max, std::fabs(want));
        const double got = out[(ref.tokens[i] * p.q_heads + h) * d + e];
        const double diff = std::fabs(got - want);
        if (!(diff <= r.max_abs)) r.max_abs = std::isnan(diff) ? INFINITY : std::max(r.max_abs, diff);
        num += (got - want) * (got - want);
        den += want * want;
      }
    }
  }
  r.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  r.max_rel = ref_max > 0 ? r.max_abs / ref_max : r.max_abs;
  // The library's verification tolerance (kernels/reference.h), widened by the logit bound:
  // these inputs (Q in [-2, 2], growing keys) have larger logits than the runner's.
  const double tolerance =
      fusetune::ToleranceFor(c.precision, p.dtype, fusetune::LogitBound(p, data.q, data.k), p.head_dim);
  r.pass = r.nan_count == 0 && r.max_rel <= tolerance;
  return r;
}

int64_t SmemLimit() {
  int dev = 0, v = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return v;
}

int SmVersion() {
  int dev = 0, major = 0, minor = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

// Runs config `c` once on poisoned output; returns false on a launch/kernel error.
bool RunOnce(const ProblemData& data, const KernelConfig& c, std::string* err) {
  CUDA_OK(cudaMemset(data.dout.ptr, 0xFF, data.dout.bytes));  // NaN in every dtype
  cudaError_t e = fusetune::cuda::LaunchFused(data.Params(), c, nullptr);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    *err = cudaGetErrorString(e);
    return false;
  }
  return true;
}

std::string ProblemLabel(const AttentionProblem& p) {
  std::string s = p.Key();
  return s;
}

// ---------------------------------------------------------------------------------------
int RunChecks(uint64_t seed, bool only_fp32) {
  std::vector<AttentionProblem> cases;
  auto make = [](int b, int hq, int hkv, int q, int k, bool causal) {
    AttentionProblem p;
    p.batch = b;
    p.q_heads = hq;
    p.kv_heads = hkv;
    p.q_len = q;
    p.kv_len = k;
    p.causal = causal;
    return p;
  };
  cases.push_back(make(1, 2, 2, 1, 1, false));
  cases.push_back(make(2, 4, 2, 17, 17, true));       // GQA
  cases.push_back(make(1, 3, 1, 77, 1000, false));    // MQA, q < k
  cases.push_back(make(1, 3, 1, 77, 1000, true));     // causal q < k (bottom-right)
  cases.push_back(make(1, 2, 2, 1000, 77, true));     // q > k: leading rows see no key -> 0
  cases.push_back(make(1, 2, 1, 2049, 2049, true));   // long, odd, sampled rows
  cases.push_back(make(1, 2, 2, 2049, 2049, false));
  {
    AttentionProblem p = make(3, 4, 2, 300, 300, true);  // varlen incl. an empty key list
    p.cu_seqlens_q = {0, 1, 78, 378};
    p.cu_seqlens_k = {0, 17, 17, 317};
    cases.push_back(p);
    p.causal = false;
    cases.push_back(p);
  }
  {
    AttentionProblem p = make(2, 2, 2, 200, 200, false);  // key padding
    p.kv_valid_lens = {133, 0};
    cases.push_back(p);
    p.causal = true;
    cases.push_back(p);
  }
  // Keys that grow along the sequence (11x larger at the end): the row max keeps rising, by
  // more than 2^8 every few tiles (the online rescale and the lazy-rescale fallback). Larger
  // growth makes fp32 scores so large that their rounding alone exceeds the tolerance.
  const size_t first_growing = cases.size();
  cases.push_back(make(1, 2, 2, 1000, 1000, false));
  cases.push_back(make(1, 2, 2, 1000, 1000, true));
  const int64_t smem_limit = SmemLimit();
  const int sm_version = SmVersion();
  int failures = 0, passes = 0, skipped = 0;
  std::printf("%-64s %-28s %10s %10s %6s\n", "problem", "config", "max_abs", "rel_l2", "result");
  for (int d : {64, 128}) {
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        AttentionProblem p = cases[ci];
        p.head_dim = d;
        p.dtype = dtype;
        if (auto s = p.Validate(); !s.ok()) {
          std::printf("invalid case: %s\n", std::string(s.message()).c_str());
          return 1;
        }
        ProblemData data(p, seed + ci * 7919 + d * 31 + static_cast<int>(dtype), ci >= first_growing ? 10.f : 0.f);
        const Reference ref = ComputeReference(data, 600, seed + ci);
        for (const KernelConfig& c : fusetune::cuda::FusedCompiledConfigs(d, dtype)) {
          if (only_fp32 && c.precision != Precision::kFp32) continue;
          if (auto s = fusetune::cuda::FusedCanImplement(p, c, smem_limit, sm_version); !s.ok()) {
            ++skipped;
            continue;
          }
          std::string err;
          if (!RunOnce(data, c, &err)) {
            std::printf("%-64s %-28s launch/kernel error: %s\n", ProblemLabel(p).c_str(),
                        c.Key().c_str(), err.c_str());
            return 1;  // the context may be unusable after a kernel fault
          }
          const CheckResult r = Compare(data, ref, c);
          if (r.pass) {
            ++passes;
          } else {
            ++failures;
          }
          if (!r.pass || ci == 5) {
            std::printf("%-64s %-28s %10.2e %10.2e %6s%s\n", ProblemLabel(p).c_str(),
                        c.Key().c_str(), r.max_abs, r.rel_l2, r.pass ? "ok" : "FAIL",
                        r.nan_count ? " (non-finite outputs)" : "");
          }
        }
      }
    }
  }
  // Unsupported inputs must be rejected with a reason, not crash.
  {
    AttentionProblem p = make(1, 2, 2, 64, 64, false);
    p.head_dim = 96;
    KernelConfig c;
    c.block_m = 64;
    c.block_s = 64;
    c.threads = 128;
    auto s = fusetune::cuda::FusedCanImplement(p, c, smem_limit, sm_version);
    std::printf("head_dim 96 -> %s\n", s.ToString().c_str());
    if (s.code() != absl::StatusCode::kUnimplemented) ++failures;
    p.head_dim = 128;
    c.block_m = 48;
    s = fusetune::cuda::FusedCanImplement(p, c, smem_limit, sm_version);
    std::printf("block_m 48 -> %s\n", s.ToString().c_str());
    if (s.code() != absl::StatusCode::kUnimplemented) ++failures;
    c.block_m = 64;
    s = fusetune::cuda::FusedCanImplement(p, c, 1024, sm_version);
    std::printf("smem limit 1 KiB -> %s\n", s.ToString().c_str());
    if (s.code() != absl::StatusCode::kFailedPrecondition) ++failures;
  }
  std::printf("CHECK SUMMARY: %d passed, %d failed, %d (problem, config) pairs not implementable\n",
              passes, failures, skipped);
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------
struct Timing {
  double median_us = 0, p10_us = 0, p90_us = 0;
};

Timing TimeConfig(const ProblemData& data, const KernelConfig& c, DeviceBuffer& flush,
                  int samples) {
  const auto params = data.Params();
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) CUDA_OK(fusetune::cuda::LaunchFused(params, c, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    CUDA_OK(cudaMemsetAsync(flush.ptr, i & 0xff, flush.bytes, nullptr));  // evict L2
    CUDA_OK(cudaEventRecord(start, nullptr));
    CUDA_OK(fusetune::cuda::LaunchFused(params, c, nullptr));
    CUDA_OK(cudaEventRecord(stop, nullptr));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  Timing t;
  t.median_us = fusetune::Median(us);
  t.p10_us = us[us.size() / 10];
  t.p90_us = us[(us.size() * 9) / 10];
  return t;
}

int RunBench(const char* csv_path, int samples, uint64_t seed, bool quick, bool seed_fp32) {
  struct Shape {
    AttentionProblem p;
    std::vector<Precision> precisions;
  };
  std::vector<Shape> shapes;
  for (AttentionProblem p : fusetune::SeedPresetProblems()) {
    if (seed_fp32) {
      shapes.push_back({p, {Precision::kFp32}});
      continue;
    }
    if (quick && p.q_len != 2048) continue;
    shapes.push_back({p, {Precision::kFp32, Precision::kTf32}});
    p.dtype = DType::kFp16;
    shapes.push_back({p, {Precision::kFp16}});
  }
  for (bool causal : {false, true}) {
    if (seed_fp32) break;
    AttentionProblem p;
    p.batch = 4;
    p.q_heads = p.kv_heads = 16;
    p.q_len = p.kv_len = 4096;
    p.head_dim = 128;
    p.causal = causal;
    p.dtype = DType::kBf16;
    shapes.push_back({p, {Precision::kBf16}});
    if (!quick) {
      p.dtype = DType::kFp16;
      shapes.push_back({p, {Precision::kFp16}});
    }
  }
  DeviceBuffer flush(size_t{256} << 20);
  const int64_t smem_limit = SmemLimit();
  const int sm_version = SmVersion();
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "problem,config,median_us,p10_us,p90_us,tflops,max_abs,verified\n");
  std::printf("%-52s %-28s %10s %10s %10s %8s %9s %s\n", "problem", "config", "median_us",
              "p10_us", "p90_us", "TFLOP/s", "max_abs", "ok");
  int failures = 0;
  std::vector<std::string> best_lines;
  for (size_t si = 0; si < shapes.size(); ++si) {
    const AttentionProblem& p = shapes[si].p;
    ProblemData data(p, seed + si);
    const Reference ref = ComputeReference(data, 48, seed + 101 * si);
    double best = 1e30, worst = 0;
    std::string best_key, worst_key;
    for (const KernelConfig& c : fusetune::cuda::FusedCompiledConfigs(p.head_dim, p.dtype)) {
      if (std::find(shapes[si].precisions.begin(), shapes[si].precisions.end(), c.precision) ==
          shapes[si].precisions.end()) {
        continue;
      }
      if (!fusetune::cuda::FusedCanImplement(p, c, smem_limit, sm_version).ok()) continue;
      std::string err;
      if (!RunOnce(data, c, &err)) {
        std::printf("%s %s: error %s\n", p.Key().c_str(), c.Key().c_str(), err.c_str());
        return 1;
      }
      const CheckResult r = Compare(data, ref, c);
      if (!r.pass) ++failures;
      const Timing t = TimeConfig(data, c, flush, samples);
      const double tflops = p.Flops() / (t.median_us * 1e-6) / 1e12;
      std::printf("%-52s %-28s %10.1f %10.1f %10.1f %8.1f %9.1e %s\n", p.Key().c_str(),
                  c.Key().c_str(), t.median_us, t.p10_us, t.p90_us, tflops, r.max_abs,
                  r.pass ? "ok" : "FAIL");
      if (csv) {
        std::fprintf(csv, "%s,%s,%.2f,%.2f,%.2f,%.2f,%.3e,%d\n", p.Key().c_str(), c.Key().c_str(),
                     t.median_us, t.p10_us, t.p90_us, tflops, r.max_abs, r.pass ? 1 : 0);
      }
      if (r.pass && t.median_us < best) {
        best = t.median_us;
        best_key = c.Key();
      }
      if (r.pass && t.median_us > worst) {
        worst = t.median_us;
        worst_key = c.Key();
      }
    }
    char line[512];
    std::snprintf(line, sizeof(line), "%-52s best %-26s %9.1f us %7.1f TFLOP/s | worst %-26s %9.1f us (x%.2f)",
                  p.Key().c_str(), best_key.c_str(), best, p.Flops() / (best * 1e-6) / 1e12,
                  worst_key.c_str(), worst, worst / best);
    best_lines.push_back(line);
  }
  if (csv) std::fclose(csv);
  std::printf("\nBEST PER SHAPE (median of %d, L2 flushed)\n", samples);
  for (const auto& l : best_lines) std::printf("%s\n", l.c_str());
  std::printf("BENCH verification failures: %d\n", failures);
  return failures == 0 ? 0 : 1;
}

// One config on one problem, a few plain launches (for ncu), then the time of each.
int RunOne(const AttentionProblem& p, const KernelConfig& c, int launches, uint64_t seed) {
  if (auto s = fusetune::cuda::FusedCanImplement(p, c, SmemLimit(), SmVersion()); !s.ok()) {
    std::printf("cannot run: %s\n", s.ToString().c_str());
    return 1;
  }
  ProblemData data(p, seed);
  DeviceBuffer flush(size_t{256} << 20);
  const Timing t = TimeConfig(data, c, flush, std::max(launches, 3));
  std::printf("%s %s median %.1f us, %.1f TFLOP/s\n", p.Key().c_str(), c.Key().c_str(),
              t.median_us, p.Flops() / (t.median_us * 1e-6) / 1e12);
  return 0;
}

// Host cost of a launch: `launches` back-to-back LaunchFused calls on one stream with no
// flush or sync between them; prints the host time per call (what an engine calling the
// kernel in a loop pays on the CPU: argument set-up, TMA descriptor encoding for the Hopper
// kernel, the launch itself) and the GPU time per launch of the whole queue.
int RunLaunchCost(const AttentionProblem& p, const KernelConfig& c, int launches, uint64_t seed) {
  if (auto s = fusetune::cuda::FusedCanImplement(p, c, SmemLimit(), SmVersion()); !s.ok()) {
    std::printf("cannot run: %s\n", s.ToString().c_str());
    return 1;
  }
  ProblemData data(p, seed);
  const auto params = data.Params();
  for (int i = 0; i < 10; ++i) CUDA_OK(fusetune::cuda::LaunchFused(params, c, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  CUDA_OK(cudaEventRecord(start, nullptr));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) CUDA_OK(fusetune::cuda::LaunchFused(params, c, nullptr));
  const auto t1 = std::chrono::steady_clock::now();
  CUDA_OK(cudaEventRecord(stop, nullptr));
  CUDA_OK(cudaEventSynchronize(stop));
  float gpu_ms = 0.f;
  CUDA_OK(cudaEventElapsedTime(&gpu_ms, start, stop));
  const double host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / launches;
  std::printf("%s %s launches %d host %.2f us/launch gpu %.2f us/launch\n", p.Key().c_str(),
              c.Key().c_str(), launches, host_us, 1000.0 * gpu_ms / launches);
  CUDA_OK(cudaEventDestroy(start));
  CUDA_OK(cudaEventDestroy(stop));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, smem opt-in %zu bytes\n", prop.name, prop.multiProcessorCount,
              prop.sharedMemPerBlockOptin);
  const uint64_t seed = std::random_device{}() ^
                        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed: %llu\n", static_cast<unsigned long long>(seed));
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") return RunChecks(seed, argc > 2 && std::string(argv[2]) == "fp32");
  if ((mode == "one" || mode == "launch-cost") && argc >= 4) {
    // fused_dev one|launch-cost <problem key> <config key> [launches]
    auto problem = AttentionProblem::FromKey(argv[2]);
    auto config = KernelConfig::FromKey(argv[3]);
    if (!problem.ok() || !config.ok()) {
      std::fprintf(stderr, "bad key: %s %s\n", std::string(problem.status().message()).c_str(),
                   std::string(config.status().message()).c_str());
      return 2;
    }
    const int launches = argc > 4 ? std::atoi(argv[4]) : 5;
    if (mode == "launch-cost") return RunLaunchCost(*problem, *config, std::max(launches, 1), seed);
    return RunOne(*problem, *config, launches, seed);
  }
  if (mode == "bench" || mode == "quick" || mode == "seed-fp32") {
    const char* csv = argc > 2 ? argv[2] : nullptr;
    const int samples = argc > 3 ? std::atoi(argv[3]) : 30;
    return RunBench(csv, std::max(samples, 3), seed, mode == "quick", mode == "seed-fp32");
  }
  std::fprintf(stderr,
               "usage: %s check [fp32] | bench [csv] [samples] | quick [csv] [samples] | "
               "seed-fp32 [csv] [samples] | one <problem> <config> [launches]\n",
               argv[0]);
  return 2;
}
