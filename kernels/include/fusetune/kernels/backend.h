// Backend: a device that runs the attention kernel family (CPU, CUDA, HIP).
//
// A Backend owns its device context and any workspace the partial/materialized variants
// need (allocated lazily, grown on demand, freed with the backend). Tensors are passed as
// device pointers in the layout documented in problem.h, in the problem's storage dtype.
//
// Thread-safety: a Backend instance is NOT thread-safe; use one instance per thread (one
// per device for GPU backends). Describe() may be called concurrently with nothing else.
#ifndef FUSETUNE_KERNELS_BACKEND_H_
#define FUSETUNE_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/kernels/stop_token.h"

namespace fusetune {

struct DeviceInfo {
  std::string backend;       // "cpu", "cuda", "hip"
  std::string name;          // e.g. "NVIDIA H200" or the CPU model name
  std::string arch;          // e.g. "sm90", "gfx90a", "x86_64-avx2"
  int device_index = 0;      // ordinal on the host
  int sm_count = 0;          // multiprocessors (GPU) or hardware threads (CPU)
  int64_t shared_mem_per_block = 0;  // bytes usable by one block (opt-in max on CUDA)
  int64_t l2_bytes = 0;      // last-level cache, bytes
  int64_t memory_bytes = 0;  // device memory (GPU) or RAM (CPU), bytes
  std::string driver;        // driver / runtime versions, free text
  int max_clock_mhz = 0;     // SM (or CPU) max clock

  // What a config's validity and speed depend on: backend/name/arch with spaces replaced by
  // '-', e.g. "cuda/NVIDIA-H200/sm90" or "cpu/AMD-EPYC-7B13/x86_64-avx2". Driver and toolkit
  // versions are deliberately left out (they go with each run).
  std::string DeviceClass() const;
};

// Owned device memory; move-only. Freed by the deleter the backend installed.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(void* data, size_t bytes, std::function<void(void*)> deleter)
      : data_(data), bytes_(bytes), deleter_(std::move(deleter)) {}
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = other.data_;
      bytes_ = other.bytes_;
      deleter_ = std::move(other.deleter_);
      other.data_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { Reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void Reset() {
    if (data_ != nullptr && deleter_) deleter_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::function<void(void*)> deleter_;
};

// Device pointers to the four tensors (Q and O in the problem's dtype, K and V in its
// kv_storage; layout of problem.h), for a paged problem to its block table (int32
// [batch][BlockTableWidth()]) and for K/V stored as e4m3 to their scales, all in device memory
// like the tensors (the CPU backend's device memory is host memory).
struct AttentionBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  const int32_t* block_table = nullptr;  // paged problems only
  // KvStorage::kE4m3 only: kv_heads fp32 scales each (K/V of head h = e4m3 value * scale[h]).
  // Finite and >= 0; the CPU backend and the GPU backends' Run and Time check them (a GPU's
  // RunOnStream cannot without synchronizing: there another value is the caller's error).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
};

// Every backend requires each of the four tensors to start on a kBufferAlignment-byte boundary
// (the kernels' 16-byte vector loads and cp.async copies; Backend::Allocate, cudaMalloc and
// PyTorch's allocator all give at least that).
inline constexpr size_t kBufferAlignment = 16;

// Worker threads one backend lends another (Backend::LendWorkers, UseWorkers), as plain C so
// that it passes through the C ABI unchanged: parallel_for(context, workers, tasks, body,
// body_context) calls body(body_context, task, worker) once for every task in [0, tasks), on
// `workers` threads of which the calling one is worker 0, and returns when every call has.
struct WorkerPool {
  void* context = nullptr;
  void (*parallel_for)(void* context, int workers, int64_t tasks,
                       void (*body)(void* body_context, int64_t task, int worker), void* body_context) = nullptr;
};

// The alignment Backend::UseScratchArena requires of an arena (a cache line; Backend::Allocate
// gives at least that on every backend).
inline constexpr size_t kScratchArenaAlignment = 64;

// OK when all four tensor pointers are non-null and kBufferAlignment-aligned, for a paged
// problem block_table is non-null and int32-aligned (and null otherwise), and for K/V stored
// as e4m3 k_scale and v_scale are non-null and float-aligned (and null otherwise);
// InvalidArgument naming the pointer otherwise. The table's entries are checked by ValidateBlockTable
// (problem.h), by the backend where it can read them. Every backend's Run and Time call it
// first.
absl::Status ValidateBuffers(const AttentionProblem& problem, const AttentionBuffers& buffers);

// OK when the kv_heads K and V scales of an e4m3 problem (host copies) are finite and >= 0 and
// every K scale times the softmax scale stays at most kMaxSoftmaxScale (kernels fold the two
// into one fp32 factor); InvalidArgument naming the first bad scale otherwise.
absl::Status ValidateKvScales(const AttentionProblem& problem, const float* k_scale, const float* v_scale);

// Where Backend::RunOnStream puts its work, and the per-sequence lengths a GPU kernel reads
// there (device memory; the CPU backend's device memory is host memory).
struct StreamLaunch {
  // The device's stream (a cudaStream_t) as an opaque pointer; nullptr = the legacy default
  // stream. The CPU backend has no streams and takes nullptr only.
  void* stream = nullptr;
  // Device copies of problem.cu_seqlens_q / cu_seqlens_k (the same values): a GPU backend
  // requires them for a varlen problem, because this path never copies host memory to the
  // device. The CPU backend reads the problem's own arrays and ignores these.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  // Visible keys of each sequence of a uniform batch (batch entries), read when the work runs.
  // The problem then describes the batch at its capacity (kv_len keys per sequence, no
  // kv_valid_lens of its own) and the launch is planned for any counts in [0, kv_len], so the
  // array may change between launches: a CUDA graph captured once is replayed as the caches
  // grow. nullptr = every sequence sees kv_len keys. The CPU backend checks the values; a GPU
  // backend cannot without synchronizing, so there a value outside [0, kv_len] is the
  // caller's error, as with FlashAttention's kernels.
  const int32_t* kv_valid_lens = nullptr;
};

struct TimingOptions {
  int warmup = 3;            // untimed launches first
  int repeats = 20;          // timed launches (samples); the backend may take fewer when
  double max_seconds = 2.0;  //   they would take longer than max_seconds in all (>= 3 kept;
                             //   CUDA estimates that from the warm-up, as it queues the
                             //   timed launches together)
  bool flush_l2 = true;      // GPU: evict L2 (or rotate inputs) before each timed launch
  // GPU: capture the whole block of timed launches (each with its flush and its pair of
  // events) into one CUDA graph and launch that once, so the device runs them back to back
  // however far the host falls behind in queueing them; TimingSamples::graphed says whether
  // the backend did. Only the CUDA backend can; every other backend ignores it (the CPU has no
  // launch queue to fall behind), as Backend::TakesGraphTiming says.
  bool graph = false;
};

// The device's clock and power state, read just before and just after a block of timed
// launches: a block during which the clock moved or a throttle reason appeared is not a
// steady measurement. All zero (known = false) where the backend cannot read it (the CPU,
// a GPU without NVML).
struct DeviceState {
  bool known = false;
  int sm_clock_mhz = 0;           // current SM clock, MHz
  int power_mw = 0;               // board power draw, milliwatts
  uint64_t throttle_reasons = 0;  // NVML clocks-event reasons bitmask, idle bit cleared
};

// True when the state moved between `before` and `after` enough to distrust the block:
// the SM clock changed by more than 2 % or the set of throttle reasons changed. False when
// either side is unknown.
bool DeviceStateMoved(const DeviceState& before, const DeviceState& after);

struct TimingSamples {
  std::vector<double> micros;  // one per timed launch, in launch order
  int sm_clock_mhz = 0;        // SM clock read during timing (0 if unknown)
  DeviceState before;          // read before the first timed launch (after warm-up)
  DeviceState after;           // read after the last timed launch
  bool graphed = false;        // the block ran as one CUDA graph (TimingOptions::graph honoured)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceInfo Describe() const = 0;

  // OK if Run() can execute this problem with this config on this device. Otherwise:
  // InvalidArgument for an invalid problem/config, Unimplemented/FailedPrecondition (with a
  // reason) for a valid combination this backend cannot run (unsupported head_dim, shared
  // memory or register budget exceeded, ...). Never launches anything.
  virtual absl::Status CanImplement(const AttentionProblem& problem,
                                    const KernelConfig& config) const = 0;

  // Every config this backend can run for `problem` on this device, all variants and
  // precisions: CanImplement is OK for each one, and every config CanImplement accepts
  // that differs in a way that can change the kernel's speed is here (the CUDA backend
  // from its compiled instance table, the CPU backend from its tile and thread ranges).
  // Sorted by ConfigOrderLess, without duplicates; empty when the backend cannot run the
  // problem at all (e.g. an unsupported head_dim) or the problem is invalid.
  virtual std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const = 0;

  // Computes O for the problem. Returns CanImplement's error without touching O when it
  // fails, ValidateBuffers' error (InvalidArgument) for a null or misaligned tensor;
  // Internal/Unavailable on a launch or device error. Synchronous: O is complete
  // when this returns OK.
  virtual absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                           const AttentionBuffers& buffers) = 0;

  // Computes O as Run does, for inference code on its own stream: enqueues the work on
  // `launch.stream` and returns without waiting for it (the CPU backend, which has no
  // streams, computes O before returning). It never synchronizes with the device and never
  // copies host memory to it; it allocates device memory only when a problem needs more
  // workspace than earlier calls did, and refuses to (FailedPrecondition) while the stream is
  // being captured into a CUDA graph, so a call made once outside the capture makes the
  // captured ones allocation-free. On a GPU a paged problem's block table is read by the
  // kernel only: its entries are not checked on the host (that needs a copy back, i.e. a
  // synchronization) and must name pages of the pool. One backend's calls share its
  // workspace: they must be ordered on the device (one stream, or streams that wait for each
  // other). The calling thread's current device is left as it was.
  // Errors, with O untouched: CanImplement's and ValidateBuffers'; InvalidArgument for
  // device lengths missing or given twice (launch.kv_valid_lens beside problem.kv_valid_lens)
  // or a stream the backend cannot have; Unimplemented for a variant other than fused on a GPU
  // (the partial and materialized variants are measurement baselines) and for backends
  // without this path (the default; hip). A launch error is Internal; a fault while the
  // kernels run surfaces at the caller's next synchronization.
  virtual absl::Status RunOnStream(const AttentionProblem& problem, const KernelConfig& config,
                                   const AttentionBuffers& buffers, const StreamLaunch& launch);

  // Times Run() as the options say; each sample covers exactly one kernel-family launch
  // (all kernels of the variant), excluding cache flushing. Same errors as Run().
  virtual absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem,
                                             const KernelConfig& config,
                                             const AttentionBuffers& buffers,
                                             const TimingOptions& options) = 0;

  // Whether Time honours TimingOptions::graph (then TimingSamples::graphed is true whenever it
  // is asked). True for the CUDA backend; false by default (the CPU and HIP backends). A backend
  // that wraps another asks it.
  virtual bool TakesGraphTiming() const { return false; }

  // Scratch in memory the caller provides. A launch uses scratch besides O (on the CPU: each
  // worker's tiles, the score workspace of the baselines, split-KV partials, a paged cache
  // gathered for the materialized variant), which a backend allocates itself and keeps for its
  // life. Two backends timed side by side on the same inputs (fusetune regress: two builds in
  // one process) then differ in where their scratch lies, and on the CPU that alone moved a
  // single-thread cell by 1-2.5 % for a whole run, in either direction (docs/perf.md). Handing
  // both the same arena gives both the same placement.
  //
  // ScratchBytes: the bytes of arena a Run or Time of (problem, config) needs; CanImplement's
  // error for a pair the backend cannot run. Unimplemented where the backend cannot use an
  // arena (the default; the GPU backends so far).
  virtual absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& problem, const KernelConfig& config) const;
  // From now on Run and Time (and RunOnStream) lay out every scratch buffer at fixed offsets of
  // the arena [base, base + bytes) in device memory, kScratchArenaAlignment-aligned, which the
  // caller keeps alive and leaves alone during those calls; base nullptr: the backend's own
  // memory again. The arena's contents are undefined at each launch (a backend initialises what
  // it reads), so one arena can serve several backends in turn. A launch that needs more than
  // `bytes` fails with FailedPrecondition, O untouched. InvalidArgument for a misaligned base;
  // Unimplemented where the backend cannot use an arena (the default): it keeps its own scratch.
  // UseScratchArena(nullptr, 0) is OK exactly where arenas are supported, so it doubles as the
  // question.
  virtual absl::Status UseScratchArena(void* base, size_t bytes);

  // Worker threads. The CPU backend runs a launch's tasks on threads it creates and keeps; two
  // backends timed side by side then run on different threads, and on a loaded host one set
  // can be scheduled worse than the other for a whole run (two-thread CPU cells 12-26 % apart
  // in an A/A of one library, docs/perf.md). Lending both the same threads removes that.
  //
  // LendWorkers: this backend's threads, valid while it lives (and not used by it concurrently
  // with the borrower: backends are not thread-safe). Unimplemented where it has none (the
  // default; the GPU backends).
  virtual absl::StatusOr<WorkerPool> LendWorkers();
  // From now on launches run their tasks on `pool`'s threads (which must stay valid during
  // those calls); nullptr: the backend's own again. InvalidArgument for a pool without a
  // parallel_for; Unimplemented where launches do not run on host threads (the default). Like
  // UseScratchArena, UseWorkers(nullptr) is OK exactly where it is supported.
  virtual absl::Status UseWorkers(const WorkerPool* pool);

  // The device's clock, power and throttle state now, as Time reads it around a block (known =
  // false where the backend cannot read it: the default, the CPU). For a caller that times
  // another backend's kernels on this backend's device (fusetune regress: another build's
  // library in this process, whose timing reports no state) and records the state around them.
  virtual DeviceState CurrentDeviceState() const { return {}; }

  // Device memory management (host memory for the CPU backend).
  virtual absl::StatusOr<DeviceMemory> Allocate(size_t bytes) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Sets every byte to `value` (used to poison outputs before verification).
  virtual absl::Status Fill(void* dst, uint8_t value, size_t bytes) = 0;

  // From now on Run and Time stop early once `stop` asks (StopToken::Check), returning its
  // status (Cancelled or DeadlineExceeded) with O incomplete. Every backend checks it before
  // each launch; the CPU backend also between the tiles of one launch, so a launch of many
  // seconds stops within about a tile's time. A backend that wraps another passes it on. The
  // default token never stops.
  virtual void SetStopToken(StopToken stop) { stop_ = std::move(stop); }

 protected:
  const StopToken& stop_token() const { return stop_; }

 private:
  StopToken stop_;
};

// Creates a backend by name ("cpu", "cuda", "hip") for device `device_index`.
// NotFound for an unknown name, Unavailable when the backend is compiled out or no device
// is present (message says which), InvalidArgument for a bad index.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       int device_index = 0);

// Number of devices of a backend on this host (0 when unavailable; cpu counts 1).
int CountDevices(std::string_view name);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_BACKEND_H_
