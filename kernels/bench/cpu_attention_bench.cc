// fused vs partial vs materialized on the CPU backend at the seed shapes (batch 1, 12 heads,
// head_dim 64, S = 128..2048, fp32, non-causal), plus causal, fp16 and bf16 storage at S = 2048.
//
//   fusetune_cpu_bench --benchmark_min_time=1
//
// Counters: GFLOP/s and TFLOP/s from AttentionProblem::Flops() (4 * b * hq * q * k * d for
// these dense shapes). Each iteration is one Run() (every kernel of the variant); inputs stay
// in cache between iterations as in a serving loop (the tuner's Time() flushes instead).
#include <benchmark/benchmark.h>

#include <thread>

#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/dtype.h"

namespace fusetune {
namespace {

AttentionProblem SeedShape(int s, bool causal, DType dtype) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 12;
  p.kv_heads = 12;
  p.q_len = s;
  p.kv_len = s;
  p.head_dim = 64;
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

// One sensible config per variant: 64x64 tiles, every hardware thread.
KernelConfig DefaultConfig(Variant variant) {
  KernelConfig c;
  c.variant = variant;
  c.block_m = 64;
  c.block_s = 64;
  c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return c;
}

void BM_Attention(benchmark::State& state, Variant variant, bool causal, DType dtype) {
  const AttentionProblem problem = SeedShape(static_cast<int>(state.range(0)), causal, dtype);
  KernelConfig config = DefaultConfig(variant);
  if (state.range(1) > 0) config.threads = static_cast<int>(state.range(1));
  auto backend = CreateCpuBackend();
  if (auto s = backend->CanImplement(problem, config); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  const size_t elem = static_cast<size_t>(DTypeBytes(dtype));
  std::vector<float> values(static_cast<size_t>(std::max(problem.QElements(), problem.KVElements())));
  uint32_t x = 12345;
  for (float& f : values) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  auto q = backend->Allocate(problem.QElements() * elem);
  auto k = backend->Allocate(problem.KVElements() * elem);
  auto v = backend->Allocate(problem.KVElements() * elem);
  auto o = backend->Allocate(problem.OElements() * elem);
  if (!q.ok() || !k.ok() || !v.ok() || !o.ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.QElements()), q->data());
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.KVElements()), k->data());
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.KVElements()), v->data());
  const AttentionBuffers buffers{q->data(), k->data(), v->data(), o->data()};
  if (auto s = backend->Run(problem, config, buffers); !s.ok()) {  // warm-up, grows workspace
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto s = backend->Run(problem, config, buffers);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  const double flops = problem.Flops();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(config.Key());
}

// {S, threads}: threads 0 = every hardware thread; 1 = one worker, whose CPU time is the
// whole cost (robust on a shared machine).
void SeedSizes(benchmark::internal::Benchmark* b) {
  for (int threads : {0, 1}) {
    for (int s : {128, 256, 512, 1024, 2048}) b->Args({s, threads});
  }
  b->ArgNames({"S", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Attention, fused, Variant::kFused, false, DType::kFp32)->Apply(SeedSizes);
BENCHMARK_CAPTURE(BM_Attention, partial, Variant::kPartial, false, DType::kFp32)->Apply(SeedSizes);
BENCHMARK_CAPTURE(BM_Attention, materialized, Variant::kMaterialized, false, DType::kFp32)->Apply(SeedSizes);

BENCHMARK_CAPTURE(BM_Attention, fused_causal, Variant::kFused, true, DType::kFp32)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, materialized_causal, Variant::kMaterialized, true, DType::kFp32)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, fused_fp16, Variant::kFused, false, DType::kFp16)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, materialized_fp16, Variant::kMaterialized, false, DType::kFp16)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, fused_bf16, Variant::kFused, false, DType::kBf16)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, materialized_bf16, Variant::kMaterialized, false, DType::kBf16)
    ->Args({2048, 0})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace fusetune

BENCHMARK_MAIN();
