// The CPU backend: API checks (the block table of a paged cache included) -> a plain params
// block -> tasks over (sequence, head or KV group, query block, key split) on a persistent
// thread pool -> the kernel bodies of the best instruction set (and the split combine).
#include "fusetune/kernels/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention_cpu_params.h"
#include "cpu_backend_internal.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"
#include "fusetune/kernels/split_kv.h"
#include "host_info.h"
#include "thread_pool.h"

namespace fusetune {
namespace {

using cpu::CpuAttentionParams;
using cpu::CpuKernelTable;
using cpu::CpuScratch;
using cpu::CpuTask;
using cpu::kLanes;

constexpr int64_t kMaxWorkspaceBytes = int64_t{2} << 30;  // partial/materialized S or P
constexpr size_t kAlignment = 64;

int HardwareThreads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

void FreeAligned(void* p) { std::free(p); }

// 64-byte aligned host memory; nullptr when out of memory.
void* AllocateAligned(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

struct AlignedFloats {
  std::unique_ptr<float, void (*)(void*)> data{nullptr, &FreeAligned};
  size_t count = 0;

  // Grows (never shrinks) to at least `n` floats; false when out of memory.
  bool Reserve(size_t n) {
    if (n <= count) return true;
    float* p = static_cast<float*>(AllocateAligned(n * sizeof(float)));
    if (p == nullptr) return false;
    data.reset(p);
    count = n;
    return true;
  }
};

// Output conversions used by the kernels (function pointers in the params block).
void EncodeFp32(const float* src, size_t n, void* dst) { std::memcpy(dst, src, n * sizeof(float)); }
void EncodeFp16(const float* src, size_t n, void* dst) {
  EncodeTensor(DType::kFp16, std::span<const float>(src, n), dst);
}
void EncodeBf16(const float* src, size_t n, void* dst) {
  EncodeTensor(DType::kBf16, std::span<const float>(src, n), dst);
}

// The value of every e4m3 byte (KvStorage::kE4m3), the table the kernels widen K/V through.
const float* E4m3Table() {
  static const auto* table = [] {
    auto* t = new float[256];
    for (int x = 0; x < 256; ++x) t[x] = E4m3ToFloat(static_cast<uint8_t>(x));
    return t;
  }();
  return table;
}

cpu::OperandRounding RoundingFor(Precision p) {
  switch (p) {
    case Precision::kFp32: return cpu::OperandRounding::kNone;
    case Precision::kTf32: return cpu::OperandRounding::kTf32;
    case Precision::kFp16: return cpu::OperandRounding::kFp16;
    case Precision::kBf16: return cpu::OperandRounding::kBf16;
  }
  return cpu::OperandRounding::kNone;
}

const CpuKernelTable& KernelsForIsa(const std::string& isa) {
  if (isa == "avx512") return cpu::Avx512Kernels();
  if (isa == "avx2") return cpu::Avx2Kernels();
  return cpu::GenericKernels();
}

// fp32 elements of the S/P workspace the partial and materialized variants need.
int64_t WorkspaceFloats(const AttentionProblem& p) {
  int64_t total = 0;
  for (int b = 0; b < p.batch; ++b) {
    total += static_cast<int64_t>(p.QueryLen(b)) * p.q_heads * p.VisibleKeyLen(b);
  }
  return total;
}

// The split counts the tuner tries for decode problems (kAutoSplitKv: the launch's plan).
constexpr int kDecodeSplits[] = {1, 2, 4, 8, kAutoSplitKv};

// The number of parts the fused variant splits each sequence's keys into: the config's
// count, or ChooseSplitKv's plan for the config's worker threads. Always 1 for the others.
int ResolvedSplits(const AttentionProblem& p, const KernelConfig& config) {
  if (config.variant != Variant::kFused) return 1;
  return config.split_kv == kAutoSplitKv ? ChooseSplitKv(p, config.threads) : config.split_kv;
}

// The fused variant on a decode problem processes the query heads of a KV group together
// (one K/V tile serves all of them): its task rows are (token, head) pairs of the group.
int HeadsPerTask(const AttentionProblem& p, Variant variant) {
  return variant == Variant::kFused && p.kind == ProblemKind::kDecode ? p.heads_per_kv() : 1;
}
int TaskRowsOfSequence(const AttentionProblem& p, Variant variant, int query_len) {
  return query_len * HeadsPerTask(p, variant);
}

// Bytes of K and V (in their storage, e4m3 included) the materialized variant gathers a paged
// cache into: every visible key of every sequence, contiguous.
int64_t GatherBytes(const AttentionProblem& p) {
  int64_t keys = 0;
  for (int b = 0; b < p.batch; ++b) keys += p.VisibleKeyLen(b);
  return 2 * keys * p.kv_heads * p.head_dim * p.KVElementBytes();
}

// Floats per split-KV partial entry: the accumulator row (head_dim padded) and its m and l.
int64_t SplitEntryFloats(const AttentionProblem& p) { return RoundUp(p.head_dim, kLanes) + 2; }

// Floats of the split-KV partials of a fused launch that splits its keys (0 when it does not):
// an entry per split, query token and head.
int64_t SplitPartialFloats(const AttentionProblem& p, const KernelConfig& config) {
  const int splits = ResolvedSplits(p, config);
  return splits > 1 ? splits * p.TotalQueries() * p.q_heads * SplitEntryFloats(p) : 0;
}

// Bytes of workspace a launch needs beyond the per-worker tiles: the S/P workspace (partial
// and materialized), the gathered K/V (materialized on a paged cache), the split partials
// (fused with splits).
int64_t WorkspaceBytes(const AttentionProblem& p, const KernelConfig& config) {
  const int64_t f = static_cast<int64_t>(sizeof(float));
  switch (config.variant) {
    case Variant::kFused:
      return SplitPartialFloats(p, config) * f;
    case Variant::kPartial:
      return WorkspaceFloats(p) * f;
    case Variant::kMaterialized:
      return WorkspaceFloats(p) * f + (p.is_paged() ? GatherBytes(p) : 0);
  }
  return 0;
}

// One worker's scratch tiles (CpuScratch), in floats; every part is a multiple of 16 floats, so
// each starts on a 64-byte boundary.
struct TileParts {
  size_t qt, kv, st, acc, ml, row, visible, key_rows;
  size_t Total() const { return qt + 2 * kv + st + acc + 2 * ml + 2 * row + visible + key_rows; }
};
TileParts TilePartsOf(const KernelConfig& config, int head_dim) {
  const size_t dp = static_cast<size_t>(RoundUp(head_dim, kLanes));
  const size_t bm = static_cast<size_t>(config.block_m);
  const size_t bs = static_cast<size_t>(config.block_s);
  return {dp * bm, bs * dp, bs * bm, bm * dp, bm, dp, bm * sizeof(int32_t) / sizeof(float),
          bs * sizeof(int64_t) / sizeof(float)};
}

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The tasks of a launch (BuildTasks): per sequence, its task rows in blocks of block_m for each
// group of query heads, each block once per key split; a split launch also has one combine task
// per block.
struct TaskCounts {
  int64_t tasks = 0;
  int64_t combine = 0;
};
TaskCounts TaskCountsOf(const AttentionProblem& p, const KernelConfig& config, int splits) {
  const int group = HeadsPerTask(p, config.variant);
  const int64_t head_groups = (p.q_heads + group - 1) / group;
  TaskCounts counts;
  for (int b = 0; b < p.batch; ++b) {
    const int rows = TaskRowsOfSequence(p, config.variant, p.QueryLen(b));
    const int64_t blocks = head_groups * ((rows + config.block_m - 1) / config.block_m);
    counts.tasks += splits == 1 ? blocks : blocks * splits;
    if (splits > 1) counts.combine += blocks;
  }
  return counts;
}

// Everything else a launch reads besides its tensors and its tiles: the per-sequence and
// per-query geometry, the per-KV-head factors, the task lists and the workers' tile pointers.
// Carved from one block of memory (the backend's own, or the arena's, so that two backends
// sharing an arena also read these from the same addresses: their placement moved single-thread
// cells as the tiles' did, docs/perf.md).
struct LaunchTables {
  int64_t* q_start = nullptr;    // batch
  int64_t* k_start = nullptr;    // batch
  int64_t* ws_offset = nullptr;  // batch
  int32_t* q_len = nullptr;      // batch
  int32_t* ws_keys = nullptr;    // batch
  int32_t* visible = nullptr;    // total queries
  float* scale_log2 = nullptr;   // kv_heads
  float* v_scale = nullptr;      // kv_heads
  CpuTask* tasks = nullptr;      // counts.tasks
  CpuTask* combine = nullptr;    // counts.combine
  CpuScratch* scratch = nullptr; // config.threads
  TaskCounts counts;
};

// Lays out LaunchTables from `base` (kAlignment-aligned, each part aligned); with base null it
// only counts. Returns the bytes used.
size_t CarveLaunchTables(const AttentionProblem& p, const KernelConfig& config, char* base, LaunchTables* tables) {
  LaunchTables t;
  t.counts = TaskCountsOf(p, config, ResolvedSplits(p, config));
  size_t at = 0;
  auto carve = [&](auto*& ptr, int64_t n) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = base == nullptr ? nullptr : reinterpret_cast<T*>(base + at);
    at += AlignUp(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T));
  };
  carve(t.q_start, p.batch);
  carve(t.k_start, p.batch);
  carve(t.ws_offset, p.batch);
  carve(t.q_len, p.batch);
  carve(t.ws_keys, p.batch);
  carve(t.visible, p.TotalQueries());
  carve(t.scale_log2, p.kv_heads);
  carve(t.v_scale, p.kv_heads);
  carve(t.tasks, t.counts.tasks);
  carve(t.combine, t.counts.combine);
  carve(t.scratch, std::max(config.threads, 1));
  if (tables != nullptr) *tables = t;
  return at;
}

// A launch's scratch in an arena (Backend::UseScratchArena), as byte offsets from its base, each
// part kAlignment-aligned: config.threads workers' tiles (every worker a launch may use, so the
// offsets depend on the problem's shape and the config only), then the S/P workspace, the split
// partials and the gathered K/V, each present only where the launch has one (WorkspaceBytes),
// then the launch's tables (CarveLaunchTables).
struct ArenaLayout {
  size_t tile_bytes = 0;  // one worker's tiles; worker w's start at w * tile_bytes
  size_t workspace_offset = 0;
  size_t split_offset = 0;
  size_t gathered_offset = 0;
  size_t tables_offset = 0;
  size_t total = 0;
};
ArenaLayout ArenaLayoutOf(const AttentionProblem& p, const KernelConfig& config) {
  ArenaLayout layout;
  layout.tile_bytes = TilePartsOf(config, p.head_dim).Total() * sizeof(float);
  size_t at = layout.tile_bytes * static_cast<size_t>(std::max(config.threads, 1));
  const size_t f = sizeof(float);
  layout.workspace_offset = at;
  if (config.variant != Variant::kFused) at += AlignUp(static_cast<size_t>(std::max<int64_t>(WorkspaceFloats(p), 1)) * f);
  layout.split_offset = at;
  at += AlignUp(static_cast<size_t>(SplitPartialFloats(p, config)) * f);
  layout.gathered_offset = at;
  if (config.variant == Variant::kMaterialized && p.is_paged()) {
    at += AlignUp(static_cast<size_t>(std::max<int64_t>(GatherBytes(p), 1)));
  }
  layout.tables_offset = at;
  at += CarveLaunchTables(p, config, nullptr, nullptr);
  layout.total = at;
  return layout;
}

// WorkerPool::parallel_for over a ThreadPool (CpuBackend::LendWorkers).
void PoolParallelFor(void* pool, int workers, int64_t tasks, void (*body)(void*, int64_t, int), void* body_context) {
  static_cast<cpu::ThreadPool*>(pool)->ParallelFor(
      workers, tasks, [body, body_context](int64_t task, int worker) { body(body_context, task, worker); });
}

// A WorkerPool body calling a std::function<void(int64_t, int)> (a launch's task loop).
void CallTaskFunction(void* function, int64_t task, int worker) {
  (*static_cast<const std::function<void(int64_t, int)>*>(function))(task, worker);
}

// The tile sizes the kernel bodies are written for (block_m and block_s alike).
constexpr int kSupportedTiles[] = {16, 32, 64, 128};

bool IsSupportedTile(int v) {
  return std::find(std::begin(kSupportedTiles), std::end(kSupportedTiles), v) != std::end(kSupportedTiles);
}

// The product precisions worth running for a storage dtype. The kernels emulate narrower
// products by rounding the operands, which is extra work and never faster: fp32 storage
// runs exact fp32 only (tf32 or 16-bit products would give up precision the caller kept,
// and tf32 is a tensor-core mode with no CPU counterpart); 16-bit storage runs exact fp32
// and its own type.
std::vector<Precision> CandidatePrecisions(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return {Precision::kFp32};
    case DType::kFp16: return {Precision::kFp32, Precision::kFp16};
    case DType::kBf16: return {Precision::kFp32, Precision::kBf16};
  }
  return {Precision::kFp32};
}

// The whole kernel family on host threads. Owns a thread pool (threads created on first
// use and kept), per-worker scratch tiles and the partial/materialized score workspace; all
// grow on demand and live as long as the backend, unless a caller's arena holds the scratch
// (UseScratchArena) or another backend's threads run the tasks (UseWorkers). Not thread-safe
// (Backend's contract).
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::string isa) : isa_(std::move(isa)), kernels_(&KernelsForIsa(isa_)) {}

  DeviceInfo Describe() const override { return cpu::DescribeHost(kernels_->isa); }

  absl::Status CanImplement(const AttentionProblem& problem,
                            const KernelConfig& config) const override {
    if (auto s = problem.Validate(); !s.ok()) return s;
    if (auto s = config.Validate(); !s.ok()) return s;
    if (!IsSupportedTile(config.block_s)) {
      return absl::UnimplementedError(
          absl::StrCat("cpu: block_s must be 16, 32, 64 or 128, got ", config.block_s));
    }
    if (!IsSupportedTile(config.block_m)) {
      return absl::UnimplementedError(
          absl::StrCat("cpu: block_m must be 16, 32, 64 or 128, got ", config.block_m));
    }
    const int max_threads = 4 * HardwareThreads();
    if (config.threads > max_threads) {
      return absl::UnimplementedError(absl::StrCat("cpu: threads must be in [1, ", max_threads,
                                                   "] (4x the hardware threads), got ",
                                                   config.threads));
    }
    if (config.stages != 1) {
      return absl::UnimplementedError(
          "cpu: stages must be 1 (the CPU has no asynchronous copies to pipeline)");
    }
    if (config.pingpong || config.persistent) {
      return absl::UnimplementedError(
          "cpu: no pingpong or persistent schedule (GPU only: the Hopper fused kernel's warpgroup and "
          "tile scheduling)");
    }
    if (problem.kind == ProblemKind::kPrefill && config.split_kv != 1 && config.split_kv != kAutoSplitKv) {
      // Prefill has many queries per sequence to spread over the workers already;
      // ChooseSplitKv plans 1 for it too.
      return absl::UnimplementedError(
          absl::StrCat("cpu: split_kv must be 1 for prefill problems (only decode splits its keys), got ",
                       config.split_kv));
    }
    if (config.variant != Variant::kFused && config.split_kv != 1) {
      return absl::UnimplementedError(absl::StrCat("cpu: split_kv must be 1 for the ", std::string(VariantName(config.variant)),
                                                   " variant (only the fused variant splits the keys)"));
    }
    const int64_t bytes = WorkspaceBytes(problem, config);
    if (bytes > kMaxWorkspaceBytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu: the ", std::string(VariantName(config.variant)), " variant needs a ", bytes >> 20,
          " MiB workspace, over the 2048 MiB limit"));
    }
    return absl::OkStatus();
  }

  // Prefill: every supported tile pair x worker counts of powers of two below the hardware
  // threads plus that count itself (CanImplement accepts up to 4x, but workers beyond the
  // hardware only add contention) x the precisions of CandidatePrecisions, for all three
  // variants, unsplit. Decode: the same, but block_m only up to the first tile that holds a
  // task's rows (larger ones compute the same tasks) and the fused variant also with the
  // split counts of kDecodeSplits.
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const override {
    std::vector<KernelConfig> out;
    if (!problem.Validate().ok()) return out;
    const int hw = HardwareThreads();
    std::vector<int> threads;
    for (int t = 1; t < hw; t *= 2) threads.push_back(t);
    threads.push_back(hw);
    const bool decode = problem.kind == ProblemKind::kDecode;
    for (Variant variant : {Variant::kFused, Variant::kPartial, Variant::kMaterialized}) {
      const int task_rows = TaskRowsOfSequence(problem, variant, problem.q_len);
      std::vector<int> splits = {1};
      if (decode && variant == Variant::kFused) splits.assign(std::begin(kDecodeSplits), std::end(kDecodeSplits));
      for (Precision precision : CandidatePrecisions(problem.dtype)) {
        for (int bm : kSupportedTiles) {
          if (decode && bm > kSupportedTiles[0] && bm / 2 >= task_rows) continue;
          for (int bs : kSupportedTiles) {
            for (int t : threads) {
              for (int split : splits) {
                KernelConfig c;
                c.variant = variant;
                c.precision = precision;
                c.block_m = bm;
                c.block_s = bs;
                c.threads = t;
                c.stages = 1;
                c.split_kv = split;
                if (CanImplement(problem, c).ok()) out.push_back(c);
              }
            }
          }
        }
      }
    }
    std::sort(out.begin(), out.end(), ConfigOrderLess);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (auto s = ValidateBuffers(problem, buffers); !s.ok()) return s;
    // The K/V scales are host memory too: their values are checked like the table.
    if (problem.is_kv_quantized()) {
      if (auto s = ValidateKvScales(problem, buffers.k_scale, buffers.v_scale); !s.ok()) return s;
    }
    // The table is host memory here: check every entry a launch reads before any K/V read.
    if (problem.is_paged()) {
      if (auto s = ValidateBlockTable(problem, buffers.block_table, problem.BlockTableEntries()); !s.ok()) return s;
    }
    if (auto s = stop_token().Check(); !s.ok()) return s;
    return Launch(problem, config, buffers);
  }

  // No streams here: the work is done before returning, on the problem's own length arrays,
  // with the launch's visible-key counts (host memory) checked like the problem's.
  absl::Status RunOnStream(const AttentionProblem& problem, const KernelConfig& config,
                           const AttentionBuffers& buffers, const StreamLaunch& launch) override {
    if (launch.stream != nullptr) {
      return absl::InvalidArgumentError("the cpu backend has no streams: the stream must be null");
    }
    if (launch.kv_valid_lens == nullptr) return Run(problem, config, buffers);
    if (!problem.kv_valid_lens.empty()) {
      return absl::InvalidArgumentError(
          "kv_valid_lens is given twice: on the problem and on the launch (give the launch's only)");
    }
    // Validated first: the counts are read with `batch` entries.
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    AttentionProblem with_lengths = problem;
    with_lengths.kv_valid_lens.assign(launch.kv_valid_lens, launch.kv_valid_lens + problem.batch);
    return Run(with_lengths, config, buffers);
  }

  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers,
                                     const TimingOptions& options) override {
    if (options.warmup < 0 || options.repeats < 1 || !(options.max_seconds >= 0)) {
      return absl::InvalidArgumentError(
          "timing options: warmup must be >= 0, repeats >= 1, max_seconds >= 0");
    }
    for (int i = 0; i < options.warmup; ++i) {
      if (auto s = Run(problem, config, buffers); !s.ok()) return s;
    }
    if (options.warmup == 0) {  // still check before the timed loop
      if (auto s = CanImplement(problem, config); !s.ok()) return s;
    }
    TimingSamples samples;
    double timed_seconds = 0;
    for (int i = 0; i < options.repeats; ++i) {
      if (options.flush_l2) FlushCaches(problem, buffers);
      const auto start = std::chrono::steady_clock::now();
      if (auto s = Run(problem, config, buffers); !s.ok()) return s;
      const auto stop = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(stop - start).count();
      samples.micros.push_back(seconds * 1e6);
      timed_seconds += seconds;
      if (timed_seconds > options.max_seconds && samples.micros.size() >= 3) break;
    }
    samples.sm_clock_mhz = CurrentClockMhz();
    return samples;
  }

  absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& problem, const KernelConfig& config) const override {
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    return ArenaLayoutOf(problem, config).total;
  }

  absl::Status UseScratchArena(void* base, size_t bytes) override {
    if (base != nullptr && reinterpret_cast<uintptr_t>(base) % kScratchArenaAlignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu: a scratch arena must be ", kScratchArenaAlignment, "-byte aligned"));
    }
    arena_ = static_cast<char*>(base);
    arena_bytes_ = base == nullptr ? 0 : bytes;
    return absl::OkStatus();
  }

  absl::StatusOr<WorkerPool> LendWorkers() override {
    WorkerPool pool;
    pool.context = &pool_;
    pool.parallel_for = &PoolParallelFor;
    return pool;
  }

  absl::Status UseWorkers(const WorkerPool* pool) override {
    if (pool != nullptr && pool->parallel_for == nullptr) {
      return absl::InvalidArgumentError("cpu: a lent worker pool needs a parallel_for");
    }
    lent_workers_ = pool == nullptr ? WorkerPool{} : *pool;
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    void* p = AllocateAligned(bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    return DeviceMemory(p, bytes, &FreeAligned);
  }

  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) return absl::InvalidArgumentError("cpu: Fill of a null pointer");
    std::memset(dst, value, bytes);
    return absl::OkStatus();
  }

 private:
  static absl::Status Copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("cpu: copy with a null pointer");
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status Launch(const AttentionProblem& problem, const KernelConfig& config,
                      const AttentionBuffers& buffers);
  // Per-sequence and per-query geometry of the problem into `tables`; returns the S/P
  // workspace's floats.
  static int64_t PrepareGeometry(const AttentionProblem& problem, const LaunchTables& tables);
  // The tasks of a launch (see CpuTask), most expensive first, and the combine tasks of a
  // split launch (one per row block), into `tables` (exactly its counts: Internal otherwise).
  static absl::Status BuildTasks(const AttentionProblem& problem, const KernelConfig& config, int splits,
                                 const LaunchTables& tables);
  // The kernels' parameter block over `tables` and the caller's tensors (the per-KV-head logit
  // factors and V scales into the tables).
  static CpuAttentionParams MakeParams(const AttentionProblem& problem, const KernelConfig& config,
                                       const AttentionBuffers& buffers, int splits, const LaunchTables& tables);
  // Per-worker scratch tiles for `workers` workers into tables.scratch, at arena_tiles (worker
  // w's at w times `tile_bytes` on) or, when that is null, in scratch_; false when out of memory.
  bool PrepareScratch(const KernelConfig& config, int head_dim, int workers, char* arena_tiles, size_t tile_bytes,
                      const LaunchTables& tables);
  // The visible keys of every sequence of a paged problem copied through its block table into
  // `into` (GatherBytes of room) or, when that is null, gathered_ (K, then V, storage dtype,
  // contiguous per sequence); tables.k_start then indexes it.
  absl::Status GatherPagedKV(const AttentionProblem& problem, const AttentionBuffers& buffers, unsigned char* into,
                             const LaunchTables& tables, const void** k, const void** v);
  // Evicts what a launch reads and writes (Q, K, V, O and the score workspace) from every
  // cache level, so each timed launch starts cold, as on a GPU after its L2 flush.
  void FlushCaches(const AttentionProblem& problem, const AttentionBuffers& buffers);
  static int CurrentClockMhz();

  std::string isa_;
  const CpuKernelTable* kernels_;
  cpu::ThreadPool pool_;
  std::vector<AlignedFloats> scratch_;  // one per worker
  AlignedFloats workspace_;
  AlignedFloats split_workspace_;
  AlignedFloats gathered_;
  AlignedFloats flush_buffer_;
  // Threads lent by another backend (UseWorkers); parallel_for null: pool_.
  WorkerPool lent_workers_;
  // The caller's scratch arena (UseScratchArena), or null: scratch in the buffers above.
  char* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  // The S/P workspace the last launch used (own or in the arena), which FlushCaches evicts.
  const float* launch_workspace_ = nullptr;
  size_t launch_workspace_bytes_ = 0;
  // The launch tables without an arena (grown, never shrunk).
  AlignedFloats tables_;
};

int64_t CpuBackend::PrepareGeometry(const AttentionProblem& problem, const LaunchTables& t) {
  int64_t ws_total = 0;
  for (int b = 0; b < problem.batch; ++b) {
    t.q_start[b] = problem.QueryStart(b);
    t.k_start[b] = problem.is_paged() ? 0 : problem.KeyStart(b);
    t.q_len[b] = problem.QueryLen(b);
    t.ws_offset[b] = ws_total;
    t.ws_keys[b] = problem.VisibleKeyLen(b);
    ws_total += static_cast<int64_t>(t.q_len[b]) * problem.q_heads * t.ws_keys[b];
    for (int i = 0; i < t.q_len[b]; ++i) {
      t.visible[t.q_start[b] + i] = problem.VisibleKeysForQuery(b, i);
    }
  }
  return ws_total;
}

absl::Status CpuBackend::BuildTasks(const AttentionProblem& problem, const KernelConfig& config, int splits,
                                    const LaunchTables& t) {
  const int group = HeadsPerTask(problem, config.variant);
  const int bm = config.block_m;
  int64_t tasks = 0, combine = 0;
  for (int b = 0; b < problem.batch; ++b) {
    const int rows = TaskRowsOfSequence(problem, config.variant, t.q_len[b]);
    const int keys = t.ws_keys[b];
    // Split ranges of whole key tiles; trailing splits of a short cache may be empty (they
    // still leave an empty partial for the combine).
    const int per_split = RoundUp((keys + splits - 1) / splits, config.block_s);
    for (int h = 0; h < problem.q_heads; h += group) {
      for (int row0 = 0; row0 < rows; row0 += bm) {
        CpuTask task{b, h, row0, std::min(bm, rows - row0), group};
        if (splits == 1) {
          if (tasks < t.counts.tasks) t.tasks[tasks] = task;
          ++tasks;
          continue;
        }
        if (combine < t.counts.combine) t.combine[combine] = task;
        ++combine;
        for (int split = 0; split < splits; ++split) {
          task.split = split;
          task.key_begin = std::min(keys, split * per_split);
          task.key_end = std::min(keys, task.key_begin + per_split);
          if (tasks < t.counts.tasks) t.tasks[tasks] = task;
          ++tasks;
        }
      }
    }
  }
  // Most expensive first, so that uneven causal blocks and split ranges do not leave one
  // worker finishing alone.
  if (tasks != t.counts.tasks || combine != t.counts.combine) {
    return absl::InternalError(absl::StrCat("cpu: a launch built ", tasks, " tasks and ", combine,
                                            " combine tasks where its tables hold ", t.counts.tasks, " and ",
                                            t.counts.combine));
  }
  auto cost = [&](const CpuTask& task) {
    const int last_token = (task.row0 + task.rows - 1) / task.group;
    const int keys = std::min(t.visible[t.q_start[task.b] + last_token], task.key_end) - task.key_begin;
    return static_cast<int64_t>(task.rows) * std::max(keys, 0);
  };
  std::stable_sort(t.tasks, t.tasks + tasks, [&](const CpuTask& a, const CpuTask& b) { return cost(a) > cost(b); });
  return absl::OkStatus();
}

bool CpuBackend::PrepareScratch(const KernelConfig& config, int head_dim, int workers, char* arena_tiles,
                                size_t tile_bytes, const LaunchTables& tables) {
  const TileParts part = TilePartsOf(config, head_dim);
  if (arena_tiles == nullptr && scratch_.size() < static_cast<size_t>(workers)) scratch_.resize(workers);
  for (int w = 0; w < workers; ++w) {
    float* p;
    if (arena_tiles != nullptr) {
      p = reinterpret_cast<float*>(arena_tiles + static_cast<size_t>(w) * tile_bytes);
    } else {
      if (!scratch_[w].Reserve(part.Total())) return false;
      p = scratch_[w].data.get();
    }
    CpuScratch& s = tables.scratch[w];
    s = CpuScratch{};
    s.qt = p;
    s.k = s.qt + part.qt;
    s.v = s.k + part.kv;
    s.st = s.v + part.kv;
    s.acc = s.st + part.st;
    s.m = s.acc + part.acc;
    s.l = s.m + part.ml;
    s.row = s.l + part.ml;
    s.zero = s.row + part.row;
    s.visible = reinterpret_cast<int32_t*>(s.zero + part.row);
    s.key_rows = reinterpret_cast<int64_t*>(s.zero + part.row + part.visible);
    // Set on every launch: an arena's contents are undefined between launches.
    std::memset(s.zero, 0, part.row * sizeof(float));
  }
  return true;
}

absl::Status CpuBackend::GatherPagedKV(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                       unsigned char* into, const LaunchTables& tables, const void** k,
                                       const void** v) {
  const int64_t half = GatherBytes(problem) / 2;
  if (into == nullptr) {
    if (!gathered_.Reserve(static_cast<size_t>(std::max<int64_t>(2 * half, 1) + 3) / sizeof(float))) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", 2 * half, " bytes for the gathered K/V"));
    }
    into = reinterpret_cast<unsigned char*>(gathered_.data.get());
  }
  unsigned char* k_out = into;
  unsigned char* v_out = k_out + half;
  const int64_t row_bytes = static_cast<int64_t>(problem.kv_heads) * problem.head_dim * problem.KVElementBytes();
  const int page = problem.page_block_size;
  const auto* k_pool = static_cast<const unsigned char*>(buffers.k);
  const auto* v_pool = static_cast<const unsigned char*>(buffers.v);
  int64_t key = 0;
  for (int b = 0; b < problem.batch; ++b) {
    tables.k_start[b] = key;
    const int32_t* table = buffers.block_table + static_cast<int64_t>(b) * problem.BlockTableWidth();
    const int len = problem.VisibleKeyLen(b);
    for (int i = 0; i < problem.PagesOfSequence(b); ++i) {
      const int64_t rows = std::min(page, len - i * page);
      const int64_t src = static_cast<int64_t>(table[i]) * page * row_bytes;
      std::memcpy(k_out + key * row_bytes, k_pool + src, rows * row_bytes);
      std::memcpy(v_out + key * row_bytes, v_pool + src, rows * row_bytes);
      key += rows;
    }
  }
  *k = k_out;
  *v = v_out;
  return absl::OkStatus();
}

CpuAttentionParams CpuBackend::MakeParams(const AttentionProblem& problem, const KernelConfig& config,
                                          const AttentionBuffers& buffers, int splits, const LaunchTables& t) {
  CpuAttentionParams params;
  params.q = buffers.q;
  params.k = buffers.k;
  params.v = buffers.v;
  params.o = buffers.o;
  params.storage_bytes = DTypeBytes(problem.dtype);
  params.kv_bytes = problem.KVElementBytes();
  if (problem.is_kv_quantized()) params.kv_e4m3 = E4m3Table();
  switch (problem.dtype) {
    case DType::kFp32:
      params.storage = cpu::StorageFormat::kFp32;
      params.encode = &EncodeFp32;
      break;
    case DType::kFp16:
      params.storage = cpu::StorageFormat::kFp16;
      params.encode = &EncodeFp16;
      break;
    case DType::kBf16:
      params.storage = cpu::StorageFormat::kBf16;
      params.encode = &EncodeBf16;
      break;
  }
  params.rounding = RoundingFor(config.precision);
  params.q_heads = problem.q_heads;
  params.kv_heads = problem.kv_heads;
  params.heads_per_kv = problem.heads_per_kv();
  params.head_dim = problem.head_dim;
  params.head_dim_padded = RoundUp(problem.head_dim, kLanes);
  params.block_m = config.block_m;
  params.block_s = config.block_s;
  // The K scale of an e4m3 head multiplies its logits: folded into the head's factor (in
  // double, one rounding), as the reference multiplies the softmax scale by it. The V scale
  // multiplies the head's normalized output.
  for (int h = 0; h < problem.kv_heads; ++h) {
    if (problem.is_kv_quantized()) {
      t.scale_log2[h] = static_cast<float>(static_cast<double>(problem.EffectiveScale()) * buffers.k_scale[h] *
                                           1.4426950408889634);
      t.v_scale[h] = buffers.v_scale[h];
    } else {
      t.scale_log2[h] = problem.EffectiveScale() * 1.4426950408889634f;
    }
  }
  if (problem.is_kv_quantized()) params.v_scale = t.v_scale;
  params.scale_log2 = t.scale_log2;
  params.q_start = t.q_start;
  params.k_start = t.k_start;
  params.q_len = t.q_len;
  params.visible_keys = t.visible;
  params.ws_offset = t.ws_offset;
  params.ws_keys = t.ws_keys;
  params.total_q = problem.TotalQueries();
  params.splits = splits;
  // The materialized variant reads a paged cache gathered into contiguous rows instead.
  if (problem.is_paged() && config.variant != Variant::kMaterialized) {
    params.block_table = buffers.block_table;
    params.block_table_width = problem.BlockTableWidth();
    params.page_block_size = problem.page_block_size;
  }
  return params;
}

absl::Status CpuBackend::Launch(const AttentionProblem& problem, const KernelConfig& config,
                                const AttentionBuffers& buffers) {
  const int splits = ResolvedSplits(problem, config);
  ArenaLayout layout;
  LaunchTables tables;
  if (arena_ != nullptr) {
    layout = ArenaLayoutOf(problem, config);
    if (layout.total > arena_bytes_) {
      return absl::FailedPreconditionError(absl::StrCat("cpu: the scratch arena has ", arena_bytes_,
                                                        " bytes; this launch needs ", layout.total,
                                                        " (Backend::ScratchBytes)"));
    }
    CarveLaunchTables(problem, config, arena_ + layout.tables_offset, &tables);
  } else {
    const size_t bytes = CarveLaunchTables(problem, config, nullptr, nullptr);
    if (!tables_.Reserve((bytes + sizeof(float) - 1) / sizeof(float))) {
      return absl::ResourceExhaustedError("cpu: out of memory for a launch's tables");
    }
    CarveLaunchTables(problem, config, reinterpret_cast<char*>(tables_.data.get()), &tables);
  }
  const int64_t ws_total = PrepareGeometry(problem, tables);
  if (auto s = BuildTasks(problem, config, splits, tables); !s.ok()) return s;
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(config.threads, tables.counts.tasks)));
  if (!PrepareScratch(config, problem.head_dim, workers, arena_, layout.tile_bytes, tables)) {
    return absl::ResourceExhaustedError("cpu: out of memory for scratch");
  }

  CpuAttentionParams params = MakeParams(problem, config, buffers, splits, tables);
  if (problem.is_paged() && config.variant == Variant::kMaterialized) {
    // The baseline: gather the cache, then run the contiguous passes on it.
    unsigned char* into = arena_ == nullptr ? nullptr : reinterpret_cast<unsigned char*>(arena_ + layout.gathered_offset);
    if (auto s = GatherPagedKV(problem, buffers, into, tables, &params.k, &params.v); !s.ok()) return s;
  }
  launch_workspace_ = nullptr;
  launch_workspace_bytes_ = 0;

  const CpuKernelTable& k = *kernels_;
  // A launch of a long problem takes seconds to minutes on a few cores: the stop token is
  // read before every tile, and once it asks, the remaining tiles are skipped (O is then
  // incomplete, and the launch returns the token's status).
  const StopToken& stop = stop_token();
  std::atomic<bool> stopped{false};
  const CpuScratch* scratch = tables.scratch;
  auto for_each = [&](const CpuTask* tasks, int64_t count, auto&& body) {
    if (stopped.load(std::memory_order_relaxed)) return;
    const std::function<void(int64_t, int)> task_loop = [&](int64_t task, int worker) {
      if (stopped.load(std::memory_order_relaxed)) return;
      if (stop.Requested()) {
        stopped.store(true, std::memory_order_relaxed);
        return;
      }
      body(tasks[task], scratch[worker]);
    };
    if (lent_workers_.parallel_for != nullptr) {
      lent_workers_.parallel_for(lent_workers_.context, workers, count, &CallTaskFunction,
                                 const_cast<std::function<void(int64_t, int)>*>(&task_loop));
    } else {
      pool_.ParallelFor(workers, count, task_loop);
    }
  };
  switch (config.variant) {
    case Variant::kFused:
      if (splits > 1) {
        const size_t entries = static_cast<size_t>(splits * params.total_q * problem.q_heads);
        if (arena_ != nullptr) {
          params.split_acc = reinterpret_cast<float*>(arena_ + layout.split_offset);
        } else {
          if (!split_workspace_.Reserve(static_cast<size_t>(SplitPartialFloats(problem, config)))) {
            return absl::ResourceExhaustedError("cpu: out of memory for the split-KV partial outputs");
          }
          params.split_acc = split_workspace_.data.get();
        }
        params.split_m = params.split_acc + entries * params.head_dim_padded;
        params.split_l = params.split_m + entries;
      }
      for_each(tables.tasks, tables.counts.tasks, [&](const CpuTask& t, const CpuScratch& s) { k.fused(params, t, s); });
      for_each(tables.combine, tables.counts.combine, [&](const CpuTask& t, const CpuScratch& s) { k.combine(params, t, s); });
      break;
    case Variant::kPartial:
    case Variant::kMaterialized: {
      if (arena_ != nullptr) {
        params.workspace = reinterpret_cast<float*>(arena_ + layout.workspace_offset);
      } else {
        if (!workspace_.Reserve(static_cast<size_t>(std::max<int64_t>(ws_total, 1)))) {
          return absl::ResourceExhaustedError(
              absl::StrCat("cpu: cannot allocate a ", ws_total * 4, "-byte score workspace"));
        }
        params.workspace = workspace_.data.get();
      }
      launch_workspace_ = params.workspace;
      launch_workspace_bytes_ = static_cast<size_t>(ws_total) * sizeof(float);
      if (config.variant == Variant::kPartial) {
        for_each(tables.tasks, tables.counts.tasks, [&](const CpuTask& t, const CpuScratch& s) { k.scores(params, t, s, true); });
      } else {
        for_each(tables.tasks, tables.counts.tasks, [&](const CpuTask& t, const CpuScratch& s) { k.scores(params, t, s, false); });
        for_each(tables.tasks, tables.counts.tasks, [&](const CpuTask& t, const CpuScratch& s) { k.softmax(params, t, s); });
      }
      for_each(tables.tasks, tables.counts.tasks, [&](const CpuTask& t, const CpuScratch& s) { k.pv(params, t, s); });
      break;
    }
  }
  if (stopped.load(std::memory_order_relaxed)) {
    absl::Status why = stop.Check();
    return why.ok() ? absl::CancelledError("stopped") : why;
  }
  return absl::OkStatus();
}

// Streams over a buffer twice the last-level cache so that the next sample starts cold,
// like an L2 flush before a GPU launch.
void CpuBackend::FlushCaches(const AttentionProblem& problem, const AttentionBuffers& buffers) {
  const size_t esize = static_cast<size_t>(DTypeBytes(problem.dtype));
  const size_t kv_esize = static_cast<size_t>(problem.KVElementBytes());
  const std::pair<const void*, size_t> regions[] = {
      {buffers.q, static_cast<size_t>(problem.QElements()) * esize},
      {buffers.k, static_cast<size_t>(problem.KVElements()) * kv_esize},
      {buffers.v, static_cast<size_t>(problem.KVElements()) * kv_esize},
      {buffers.o, static_cast<size_t>(problem.OElements()) * esize},
      {launch_workspace_, launch_workspace_bytes_}};
#if defined(__x86_64__) || defined(__i386__)
  // clflush evicts a line from every level of this core's and the other cores' caches:
  // the cost is the tensors' size, not the last-level cache's (which a VM may report as
  // hundreds of MiB).
  for (const auto& [ptr, bytes] : regions) {
    if (ptr == nullptr) continue;
    const char* base = static_cast<const char*>(ptr);
    for (size_t off = 0; off < bytes; off += 64) __builtin_ia32_clflush(base + off);
  }
  __builtin_ia32_mfence();
#else
  (void)regions;
  // No portable line eviction: write a buffer twice the last-level cache's size.
  static const size_t floats =
      static_cast<size_t>(std::clamp<int64_t>(2 * cpu::LastLevelCacheBytes(), 8ll << 20, 512ll << 20)) /
      sizeof(float);
  if (!flush_buffer_.Reserve(floats)) return;  // best effort: timing still valid, just warmer
  float* p = flush_buffer_.data.get();
  for (size_t i = 0; i < floats; i += 16) p[i] += 1.0f;
#endif
}

int CpuBackend::CurrentClockMhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) break;
      return static_cast<int>(std::atof(line.c_str() + colon + 1));
    }
  }
  return 0;
}

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(cpu::BestKernelIsa()); }

namespace cpu {

std::vector<std::string> RunnableKernelIsas() {
  const std::string best = BestKernelIsa();
  if (best == "avx512") return {"avx512", "avx2", "generic"};
  if (best == "avx2") return {"avx2", "generic"};
  return {"generic"};
}

std::unique_ptr<Backend> CreateCpuBackendForIsa(std::string_view isa) {
  for (const std::string& runnable : RunnableKernelIsas()) {
    if (runnable == isa) return std::make_unique<CpuBackend>(runnable);
  }
  return nullptr;
}

}  // namespace cpu

}  // namespace fusetune
