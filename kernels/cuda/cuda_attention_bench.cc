// Google Benchmark for the CUDA kernel family: fused vs partial vs materialized at the seed
// shapes (fp32 exact and tf32), the fp16 seed shape at S=2048, and bf16 d128 S=4096 b4 h16
// (causal and not). Each iteration is one launch of the variant timed with CUDA events
// after an L2 flush (Backend::Time, manual time). A config the backend cannot run is
// reported as skipped. Exits 0 with a message where there is no GPU.
//
// The fixed configs here are reasonable defaults, not tuned ones: `fusetune sweep` finds
// the best config per shape.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/cuda_backend.h"
#include "fusetune/kernels/dtype.h"

namespace fusetune {
namespace {

Backend* g_backend = nullptr;

struct Shape {
  int batch, heads, seq, head_dim;
  bool causal;
  DType dtype;
};

// Fused configs tried in order; the first the backend accepts is used. The first ones are the
// sweep's best on the H200 (docs/perf.md): the Hopper kernel for fp16/bf16 (rejected on other
// GPUs), then the best exact-fp32/tf32 tiling of the seed shapes.
std::vector<KernelConfig> FusedCandidates(Precision precision, int head_dim) {
  std::vector<KernelConfig> out;
  std::vector<std::tuple<int, int, int, int>> tiles;
  if (head_dim == 64) tiles.push_back({192, 64, 512, 3});
  if (head_dim == 128) tiles.push_back({128, 128, 384, 3});
  for (auto t : std::vector<std::tuple<int, int, int, int>>{
           {64, 64, 128, 1}, {128, 64, 256, 2}, {64, 64, 128, 2}, {128, 128, 256, 2}, {64, 32, 128, 2}}) {
    tiles.push_back(t);
  }
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

void RunVariant(benchmark::State& state, Shape shape, Variant variant, Precision precision) {
  AttentionProblem p;
  p.batch = shape.batch;
  p.q_heads = p.kv_heads = shape.heads;
  p.q_len = p.kv_len = shape.seq;
  p.head_dim = shape.head_dim;
  p.causal = shape.causal;
  p.dtype = shape.dtype;
  std::vector<KernelConfig> candidates;
  if (variant == Variant::kFused) {
    candidates = FusedCandidates(precision, shape.head_dim);
  } else {
    KernelConfig c;
    c.variant = variant;
    c.block_m = 64;
    c.block_s = 64;
    c.threads = variant == Variant::kPartial ? 256 : 256;
    c.precision = precision;
    candidates.push_back(c);
  }
  const KernelConfig* chosen = nullptr;
  std::string why;
  for (const KernelConfig& c : candidates) {
    absl::Status s = g_backend->CanImplement(p, c);
    if (s.ok()) {
      chosen = &c;
      break;
    }
    why = std::string(s.message());
  }
  if (chosen == nullptr) {
    state.SkipWithError(("unsupported: " + why).c_str());
    return;
  }
  const size_t eb = static_cast<size_t>(DTypeBytes(p.dtype));
  std::vector<float> host(static_cast<size_t>(p.QElements()));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> encoded(host.size() * eb);
  std::vector<DeviceMemory> mem;
  for (int i = 0; i < 4; ++i) {
    auto m = g_backend->Allocate(encoded.size());
    if (!m.ok()) {
      state.SkipWithError(std::string(m.status().message()).c_str());
      return;
    }
    for (float& x : host) x = dist(rng);
    EncodeTensor(p.dtype, host, encoded.data());
    (void)g_backend->CopyToDevice(m->data(), encoded.data(), encoded.size());
    mem.push_back(*std::move(m));
  }
  AttentionBuffers buffers{mem[0].data(), mem[1].data(), mem[2].data(), mem[3].data()};
  TimingOptions warm{.warmup = 3, .repeats = 1, .max_seconds = 10, .flush_l2 = true};
  if (auto t = g_backend->Time(p, *chosen, buffers, warm); !t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  TimingOptions one{.warmup = 0, .repeats = 1, .max_seconds = 10, .flush_l2 = true};
  int clock = 0;
  for (auto _ : state) {
    auto t = g_backend->Time(p, *chosen, buffers, one);
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    clock = t->sm_clock_mhz;
    state.SetIterationTime(t->micros[0] * 1e-6);
  }
  state.SetLabel(chosen->Key());
  state.counters["TFLOPs"] = benchmark::Counter(p.Flops() * 1e-12 * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
  state.counters["sm_mhz"] = clock;
}

void RegisterAll() {
  std::vector<std::pair<std::string, Variant>> variants = {
      {"fused", Variant::kFused}, {"partial", Variant::kPartial}, {"materialized", Variant::kMaterialized}};
  auto add = [&](const std::string& shape_name, Shape shape, Precision precision) {
    for (const auto& [vname, v] : variants) {
      const std::string name = shape_name + "/" + std::string(PrecisionName(precision)) + "/" + vname;
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { RunVariant(st, shape, v, precision); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  };
  for (const AttentionProblem& p : SeedPresetProblems()) {
    const int s = p.q_len;
    const Shape seed{p.batch, p.q_heads, s, p.head_dim, p.causal, p.dtype};
    add("seed_S" + std::to_string(s), seed, Precision::kFp32);
    add("seed_S" + std::to_string(s), seed, Precision::kTf32);
  }
  add("seed_fp16_S2048", Shape{1, 12, 2048, 64, false, DType::kFp16}, Precision::kFp16);
  add("bf16_d128_S4096_b4_h16", Shape{4, 16, 4096, 128, false, DType::kBf16}, Precision::kBf16);
  add("bf16_d128_S4096_b4_h16_causal", Shape{4, 16, 4096, 128, true, DType::kBf16}, Precision::kBf16);
}

}  // namespace
}  // namespace fusetune

int main(int argc, char** argv) {
  if (fusetune::CudaDeviceCount() == 0) {
    std::printf("no CUDA device or driver on this host: nothing to benchmark\n");
    return 0;
  }
  auto backend = fusetune::CreateCudaBackend(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  fusetune::g_backend = backend->get();
  fusetune::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
