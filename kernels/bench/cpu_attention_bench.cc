// fused vs partial vs materialized on the CPU backend at the seed shapes (batch 1, 12 heads,
// head_dim 64, S = 128..2048, fp32, non-causal), plus causal, fp16 and bf16 storage at S = 2048.
//
//   fusetune_cpu_bench --benchmark_min_time=1
//
// Counters: GFLOP/s and TFLOP/s from AttentionProblem::Flops() (4 * b * hq * q * k * d for
// these dense shapes). Decode cases (batch 4, 32/8 heads, d128, bf16, caches of 1k and 8k
// keys, contiguous and paged with 16- and 1-token pages, split counts fixed and planned)
// report GB/s from AttentionProblem::KVBytesRead(). Each iteration is one Run() (every kernel of the variant); inputs stay
// in cache between iterations as in a serving loop (the tuner's Time() flushes instead).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {
namespace {

AttentionProblem SeedShapeOf(int s, bool causal, DType dtype) {
  AttentionProblem p = SeedShape(s);
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

// Q, K, V (or the page pool), O and the block table of a problem on the backend, filled with
// values in [-1, 1).
struct Tensors {
  DeviceMemory q, k, v, o;
  std::vector<int32_t> block_table;
  AttentionBuffers buffers() const {
    return {q.data(), k.data(), v.data(), o.data(), block_table.empty() ? nullptr : block_table.data()};
  }
};

// False (and the benchmark skipped) when the backend cannot run the config or allocate.
bool Prepare(benchmark::State& state, Backend& backend, const AttentionProblem& problem,
             const KernelConfig& config, Tensors* t) {
  if (auto s = backend.CanImplement(problem, config); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return false;
  }
  const DType dtype = problem.dtype;
  const size_t elem = static_cast<size_t>(DTypeBytes(dtype));
  std::vector<float> values(static_cast<size_t>(std::max(problem.QElements(), problem.KVElements())));
  uint32_t x = 12345;
  for (float& f : values) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  auto q = backend.Allocate(problem.QElements() * elem);
  auto k = backend.Allocate(problem.KVElements() * elem);
  auto v = backend.Allocate(problem.KVElements() * elem);
  auto o = backend.Allocate(problem.OElements() * elem);
  if (!q.ok() || !k.ok() || !v.ok() || !o.ok()) {
    state.SkipWithError("allocation failed");
    return false;
  }
  t->q = *std::move(q);
  t->k = *std::move(k);
  t->v = *std::move(v);
  t->o = *std::move(o);
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.QElements()), t->q.data());
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.KVElements()), t->k.data());
  EncodeTensor(dtype, std::span<const float>(values.data(), problem.KVElements()), t->v.data());
  if (problem.is_paged()) {
    // Every sequence's pages scattered over the pool (a stride coprime with its size), as
    // a serving engine's allocator leaves them.
    const int64_t pool = problem.PoolPages();
    t->block_table.assign(static_cast<size_t>(problem.BlockTableEntries()), 0);
    int64_t next = 0;
    for (int b = 0; b < problem.batch; ++b) {
      for (int i = 0; i < problem.PagesOfSequence(b); ++i) {
        t->block_table[static_cast<size_t>(b) * problem.BlockTableWidth() + i] =
            static_cast<int32_t>((next++ * 7919) % pool);
      }
    }
  }
  if (auto s = backend.Run(problem, config, t->buffers()); !s.ok()) {  // warm-up, grows workspace
    state.SkipWithError(s.ToString().c_str());
    return false;
  }
  return true;
}

void RunIterations(benchmark::State& state, Backend& backend, const AttentionProblem& problem,
                   const KernelConfig& config, const AttentionBuffers& buffers) {
  for (auto _ : state) {
    auto s = backend.Run(problem, config, buffers);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(config.Key());
}

void BM_Attention(benchmark::State& state, Variant variant, bool causal, DType dtype) {
  const AttentionProblem problem = SeedShapeOf(static_cast<int>(state.range(0)), causal, dtype);
  KernelConfig config = DefaultConfig(variant);
  if (state.range(1) > 0) config.threads = static_cast<int>(state.range(1));
  auto backend = CreateCpuBackend();
  Tensors tensors;
  if (!Prepare(state, *backend, problem, config, &tensors)) return;
  RunIterations(state, *backend, problem, config, tensors.buffers());
  const double flops = problem.Flops();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

// Decode: one new token per sequence, batch 4, 32 query heads on 8 KV heads, head_dim 128,
// bf16, against caches of `cache` keys; contiguous (page 0) or paged.
AttentionProblem DecodeShape(int cache, int page) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 4;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.q_len = 1;
  p.kv_len = cache;
  p.head_dim = 128;
  p.dtype = DType::kBf16;
  p.page_block_size = page;
  return p;
}

// {cache, page, split_kv (0 = planned at launch)} on every hardware thread. Counter GB/s:
// KVBytesRead (every visible key of K and V once) over the time.
void BM_Decode(benchmark::State& state, Variant variant) {
  const AttentionProblem problem =
      DecodeShape(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  KernelConfig config = DefaultConfig(variant);
  config.block_m = 16;
  config.split_kv = variant == Variant::kFused ? static_cast<int>(state.range(2)) : 1;
  auto backend = CreateCpuBackend();
  Tensors tensors;
  if (!Prepare(state, *backend, problem, config, &tensors)) return;
  RunIterations(state, *backend, problem, config, tensors.buffers());
  state.counters["GB/s"] =
      benchmark::Counter(problem.KVBytesRead() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void DecodeSizes(benchmark::internal::Benchmark* b) {
  for (int cache : {1024, 8192}) {
    for (int page : {0, 16, 1}) b->Args({cache, page, kAutoSplitKv});
    b->Args({cache, 0, 1});
    b->Args({cache, 0, 4});
  }
  b->ArgNames({"cache", "page", "split"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Decode, fused, Variant::kFused)->Apply(DecodeSizes);
BENCHMARK_CAPTURE(BM_Decode, materialized, Variant::kMaterialized)
    ->Args({8192, 0, 1})->Args({8192, 16, 1})->ArgNames({"cache", "page", "split"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// {S, threads}: threads 0 = every hardware thread; 1 = one worker, whose CPU time is the
// whole cost (robust on a shared machine).
void SeedSizes(benchmark::internal::Benchmark* b) {
  for (int threads : {0, 1}) {
    for (int s : kSeedSeqLens) b->Args({s, threads});
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
