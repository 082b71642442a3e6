// The CUDA backend: API checks -> AttentionParams / BaselinePlan -> launches on the legacy
// default stream (so callers such as PyTorch, which also use it, see our work ordered with
// theirs) -> synchronize -> Status. RunOnStream instead launches the fused variant on the
// caller's stream and returns: no synchronization, no host-to-device copy, and device memory
// of its own that only grows outside a stream capture (RetainedDeviceBuffer).
//
// CUDA errors come in two kinds. A launch-configuration or API error is reported and
// cleared; the backend stays usable. A kernel fault (illegal address, ...) poisons the CUDA
// context for the rest of the process: the backend then reports Internal for every later
// call, with the original error, instead of crashing or pretending to work.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "attention_params.h"
#include "baseline_args.h"
#include "baseline_kernels.h"
#include "baseline_plan.h"
#include "decode/decode_dispatch.h"
#include "l2_flush.h"
#include "fused/fused_configs.h"
#include "fusetune/base/strings.h"
#include "fusetune/kernels/cuda_backend.h"
#include "fusetune/kernels/split_kv.h"
#include "gather_paged_kv.h"
#include "nvml_clock.h"

namespace fusetune {
namespace {

using cuda::AttentionParams;
using cuda::BaselinePlan;
using cuda::ElemType;
using cuda::GemmGroup;
using cuda::ToElemType;

constexpr cudaStream_t kStream = 0;  // legacy default stream
// Bigger than twice the H200's 60 MB L2, so reading it once evicts everything a launch left
// there (l2_flush.h: why reading, not writing). The sink word sits after it.
constexpr size_t kL2FlushBytes = size_t{256} << 20;

// The workspace cuBLAS gets while a timed block is captured into a graph: its own default pool
// would be allocated inside the capture (cudaMallocAsync since cuBLAS 12.2). The size cuBLAS's
// documentation recommends for the architecture (cublasSetWorkspace: 32 MiB on Hopper, 4 MiB
// before), so that it can pick the same GEMM kernels as outside the graph.
size_t GraphCublasWorkspaceBytes(int sm_version) { return (sm_version >= 90 ? size_t{32} : size_t{4}) << 20; }

std::string CudaErrorText(cudaError_t e) {
  return Cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

const char* CublasErrorName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cudaDataType_t CublasType(DType d) {
  switch (d) {
    case DType::kFp32: return CUDA_R_32F;
    case DType::kFp16: return CUDA_R_16F;
    case DType::kBf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// The partial and materialized variants compute the PV product with cuBLAS, whose operands
// must share a type: P takes V's storage type. So fp32 storage runs fp32 or tf32 products,
// fp16/bf16 storage runs fp16/bf16 tensor-core products (fp32 accumulation).
absl::Status CheckBaselinePrecision(const AttentionProblem& p, const KernelConfig& c) {
  const bool ok = (p.dtype == DType::kFp32 &&
                   (c.precision == Precision::kFp32 || c.precision == Precision::kTf32)) ||
                  (p.dtype == DType::kFp16 && c.precision == Precision::kFp16) ||
                  (p.dtype == DType::kBf16 && c.precision == Precision::kBf16);
  if (ok) return absl::OkStatus();
  return absl::UnimplementedError(Cat(
      "the ", VariantName(c.variant), " variant computes PV with cuBLAS, so P takes V's type: ",
      DTypeName(p.dtype), " storage supports precision ",
      p.dtype == DType::kFp32 ? "fp32 or tf32" : DTypeName(p.dtype), ", not ",
      PrecisionName(c.precision)));
}

// CandidateConfigs offers the partial and materialized grids of baseline_args.h at every
// precision (the fused variant's come from its compiled instance table).
constexpr Precision kAllPrecisions[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16,
                                        Precision::kBf16};

// Device copy of a small host int array, re-uploaded only when its contents change.
class DeviceIntArray {
 public:
  ~DeviceIntArray() { Reset(); }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    host_.clear();
    capacity_ = 0;
  }
  absl::StatusOr<const int32_t*> Upload(const std::vector<int32_t>& values) {
    if (values.empty()) return static_cast<const int32_t*>(nullptr);
    if (ptr_ != nullptr && values == host_) return static_cast<const int32_t*>(ptr_);
    if (values.size() > capacity_) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = nullptr;
      capacity_ = 0;
      if (cudaError_t e = cudaMalloc(&ptr_, values.size() * sizeof(int32_t)); e != cudaSuccess) {
        ptr_ = nullptr;
        return absl::ResourceExhaustedError(Cat("cudaMalloc for lengths: ", CudaErrorText(e)));
      }
      capacity_ = values.size();
    }
    host_.clear();
    if (cudaError_t e = cudaMemcpy(ptr_, values.data(), values.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return absl::InternalError(Cat("copying lengths to the device: ", CudaErrorText(e)));
    }
    host_ = values;
    return static_cast<const int32_t*>(ptr_);
  }

 private:
  int32_t* ptr_ = nullptr;
  size_t capacity_ = 0;
  std::vector<int32_t> host_;
};

// Device memory RunOnStream reuses across calls. It grows to a power of two (so a run of ever
// larger problems allocates a few times only), and only while the stream is not being
// captured; an outgrown buffer is kept until the backend is destroyed instead of freed, since a
// CUDA graph captured earlier may still run kernels that use it.
class RetainedDeviceBuffer {
 public:
  ~RetainedDeviceBuffer() {
    for (void* p : buffers_) cudaFree(p);
  }
  // At least `bytes` of device memory: the current buffer, or a new one (zeroed on `stream`
  // when `zeroed`) when it is too small. FailedPrecondition, naming `what`, when a new one is
  // needed while `stream` is being captured; ResourceExhausted when the allocation fails.
  absl::StatusOr<void*> AtLeast(size_t bytes, cudaStream_t stream, bool zeroed, std::string_view what) {
    if (!buffers_.empty() && bytes <= bytes_) return buffers_.back();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaError_t e = cudaStreamIsCapturing(stream, &capture); e != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(Cat("asking whether the stream is being captured: ", CudaErrorText(e)));
    }
    if (capture != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(Cat(
          what, " needs ", bytes, " bytes, more than earlier launches of this backend allocated, and the stream is "
          "being captured (allocating would break the capture): launch this shape once before capturing"));
    }
    size_t rounded = size_t{1} << 16;
    while (rounded < bytes) rounded <<= 1;
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, rounded); e != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(Cat("allocating ", rounded, " bytes for ", what, ": ", CudaErrorText(e)));
    }
    if (zeroed) {
      if (cudaError_t e = cudaMemsetAsync(p, 0, rounded, stream); e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return absl::InternalError(Cat("zeroing ", what, ": ", CudaErrorText(e)));
      }
    }
    buffers_.push_back(p);
    bytes_ = rounded;
    return p;
  }

 private:
  std::vector<void*> buffers_;  // every buffer allocated; back() is the current one
  size_t bytes_ = 0;            // size of back()
};

// Restores the calling thread's current device when it goes out of scope: a launch on a caller's
// stream must not change the device the caller's next work goes to (the backend sets its own).
class CurrentDeviceRestorer {
 public:
  CurrentDeviceRestorer() {
    if (cudaGetDevice(&device_) != cudaSuccess) {
      cudaGetLastError();
      device_ = -1;
    }
  }
  ~CurrentDeviceRestorer() {
    if (device_ >= 0) cudaSetDevice(device_);
  }
  CurrentDeviceRestorer(const CurrentDeviceRestorer&) = delete;
  CurrentDeviceRestorer& operator=(const CurrentDeviceRestorer&) = delete;

 private:
  int device_ = -1;
};

// Everything a variant's launches need, computed before any timing starts so that the
// timed region holds launches only.
struct PreparedLaunch {
  Variant variant = Variant::kFused;
  AttentionParams params;
  BaselinePlan plan;
  // Device pointer arrays for the batched GEMMs, per group: {K, Q, S, V, P, O} x entries.
  std::vector<const void**> group_pointers;
  // The fused variant of a decode problem or of a prefill over a paged cache: the decode
  // family's launch with its split count resolved for this device.
  bool decode = false;
  int decode_splits = 1;
  cuda::DecodeLaunchBuffers decode_buffers;
  // Partial/materialized over a paged cache: K and V gathered first (part of every launch),
  // then the baseline's passes on `unpaged` with params.k/v pointing at the gathered copies.
  bool gather = false;
  cuda::GatherPagedKVArgs gather_args;
  AttentionProblem unpaged;
};

// Bytes of each of the gathered K and V a baseline over a paged cache needs (0 otherwise).
// They follow the plan's S/P in the workspace, each 256-byte aligned (AlignUp256).
size_t GatheredKVBytes(const AttentionProblem& problem) {
  if (!problem.is_paged()) return 0;
  return static_cast<size_t>(problem.Unpaged().KVElements()) * static_cast<size_t>(DTypeBytes(problem.dtype));
}
size_t AlignUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

class CudaBackend final : public Backend {
 public:
  // `sm_version` = compute capability major * 10 + minor (90 for Hopper).
  CudaBackend(int device, DeviceInfo info, int sm_version, std::string pci_bus_id, cublasHandle_t cublas)
      : device_(device),
        info_(std::move(info)),
        sm_version_(sm_version),
        pci_bus_id_(std::move(pci_bus_id)),
        cublas_(cublas) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cublasDestroy(cublas_);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (flush_buffer_ != nullptr) cudaFree(flush_buffer_);
    if (pointer_arrays_ != nullptr) cudaFree(pointer_arrays_);
    if (split_counters_ != nullptr) cudaFree(split_counters_);
    for (cudaEvent_t e : timing_events_) cudaEventDestroy(e);
    if (graph_stream_ != nullptr) cudaStreamDestroy(graph_stream_);
    if (graph_cublas_workspace_ != nullptr) cudaFree(graph_cublas_workspace_);
    cu_seqlens_q_.Reset();
    cu_seqlens_k_.Reset();
    kv_valid_lens_.Reset();
  }

  DeviceInfo Describe() const override { return info_; }
  DeviceState CurrentDeviceState() const override { return cuda::NvmlDeviceState(pci_bus_id_); }

  bool TakesGraphTiming() const override { return true; }

  // The workspace of Run and Time (split partials, the baselines' S/P and gathered K/V) in a
  // caller's arena. The split counters stay the backend's own (they rely on staying zero between
  // launches), so do the L2 flush buffer, cuBLAS's workspace and RunOnStream's workspace.
  absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& problem, const KernelConfig& config) const override {
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (FusedOnDecodeFamily(problem, config)) {
      const int splits = cuda::ResolveDecodeSplits(problem, config, DecodeResidentBlocks(problem, config));
      return static_cast<size_t>(cuda::DecodeWorkspaceFloats(problem, splits)) * sizeof(float);
    }
    if (config.variant == Variant::kFused) {
      const cuda::FusedSplitWorkspace split = cuda::FusedSplitWorkspaceFor(problem, config, info_.sm_count);
      return static_cast<size_t>(std::max<int64_t>(split.partial_floats, 0)) * sizeof(float);
    }
    auto plan = PlanFor(problem, config);
    if (!plan.ok()) return plan.status();
    return BaselineWorkspaceBytes(problem, *plan);
  }

  absl::Status UseScratchArena(void* base, size_t bytes) override {
    if (base != nullptr && reinterpret_cast<uintptr_t>(base) % kScratchArenaAlignment != 0) {
      return absl::InvalidArgumentError(Cat("cuda: a scratch arena must be ", kScratchArenaAlignment, "-byte aligned"));
    }
    arena_ = base;
    arena_bytes_ = base == nullptr ? 0 : bytes;
    return absl::OkStatus();
  }

  absl::Status CanImplement(const AttentionProblem& problem,
                            const KernelConfig& config) const override {
    if (auto s = problem.Validate(); !s.ok()) return s;
    if (auto s = config.Validate(); !s.ok()) return s;
    if (problem.head_dim != 64 && problem.head_dim != 128) {
      return absl::UnimplementedError(Cat(
          "the CUDA backend supports head_dim 64 and 128 only, got ", problem.head_dim));
    }
    if (config.threads < 32 || config.threads > 1024 || config.threads % 32 != 0) {
      return absl::FailedPreconditionError(Cat(
          "threads per block must be a multiple of 32 in [32, 1024], got ", config.threads));
    }
    if (problem.is_kv_quantized() && !FusedOnDecodeFamily(problem, config)) {
      return absl::UnimplementedError(
          "K/V stored as e4m3 run on the CUDA backend's fused decode kernels only (a decode, or a prefill over "
          "a paged cache): the baselines and the contiguous prefill read 16-bit K/V");
    }
    if (FusedOnDecodeFamily(problem, config)) {
      if (auto s = cuda::DecodeCanImplement(problem, config, info_.shared_mem_per_block); !s.ok()) return s;
      // The split partials of the most splits the config can ask for (the planner's cap for
      // kAutoSplitKv).
      const int splits = config.split_kv == kAutoSplitKv ? kMaxSplitKv : config.split_kv;
      const size_t bytes = static_cast<size_t>(cuda::DecodeWorkspaceFloats(problem, splits)) * sizeof(float);
      if (bytes > WorkspaceLimit()) {
        return absl::FailedPreconditionError(Cat(
            "fused decode with ", splits, " KV splits needs ", bytes >> 20,
            " MiB of workspace for the split partials, over the backend's limit of ", WorkspaceLimit() >> 20,
            " MiB (half the device memory)"));
      }
      return absl::OkStatus();
    }
    if (config.variant == Variant::kFused) {
      return cuda::FusedCanImplement(problem, config, info_.shared_mem_per_block, sm_version_);
    }
    if (auto s = CheckBaselinePrecision(problem, config); !s.ok()) return s;
    if (config.stages != 1 || config.split_kv != 1) {
      return absl::UnimplementedError(Cat(
          "the ", VariantName(config.variant),
          " variant has no K/V load pipeline or KV split: stages and split_kv must be 1"));
    }
    if (config.pingpong || config.persistent) {
      return absl::UnimplementedError(Cat(
          "the ", VariantName(config.variant),
          " variant has no pingpong or persistent schedule (the Hopper fused kernel's): both must be off"));
    }
    if (config.variant == Variant::kPartial) {
      if (config.block_m > 256 || config.block_s > 256) {
        return absl::FailedPreconditionError("partial: block_m and block_s must be <= 256");
      }
      if (config.threads > cuda::kPartialMaxThreads) {
        return absl::FailedPreconditionError(Cat(
            "partial: at most ", cuda::kPartialMaxThreads,
            " threads per block (its register budget), got ", config.threads));
      }
      const bool tensor_cores = config.precision != Precision::kFp32;
      if (tensor_cores && (config.block_m % 16 != 0 || config.block_s % 16 != 0)) {
        return absl::FailedPreconditionError(Cat(
            "partial: the tensor-core path (", PrecisionName(config.precision),
            ") tiles by 16: block_m and block_s must be multiples of 16, got ", config.block_m,
            "/", config.block_s));
      }
      const int64_t smem = cuda::PartialScoresSharedBytes(
          problem.head_dim, config.block_m, config.block_s, ToElemType(problem.dtype), tensor_cores);
      if (smem > info_.shared_mem_per_block) {
        return absl::FailedPreconditionError(Cat(
            "partial: block_m=", config.block_m, " block_s=", config.block_s, " head_dim=",
            problem.head_dim, " needs ", smem, " bytes of shared memory, the device allows ",
            info_.shared_mem_per_block));
      }
    }
    auto plan = PlanFor(problem, config);
    if (!plan.ok()) return plan.status();
    const size_t workspace = BaselineWorkspaceBytes(problem, *plan);
    if (workspace > WorkspaceLimit()) {
      return absl::FailedPreconditionError(Cat(
          VariantName(config.variant), " needs ", workspace >> 20, " MiB of workspace for S/P",
          problem.is_paged() ? " and the gathered K/V" : "", ", over the backend's limit of ",
          WorkspaceLimit() >> 20, " MiB (half the device memory)"));
    }
    return absl::OkStatus();
  }

  // Fused: the compiled instance table for (head_dim, dtype), or for decode problems and
  // prefills over a paged cache the decode family's candidates (its tiles times the KV
  // splits); partial and materialized: the grids above over every precision. Each kept only
  // where CanImplement accepts it (this GPU's architecture and shared memory, the workspace
  // limit, the PV precision).
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const override {
    std::vector<KernelConfig> out;
    if (!problem.Validate().ok()) return out;
    auto keep = [&](const KernelConfig& c) {
      if (CanImplement(problem, c).ok()) out.push_back(c);
    };
    const std::vector<KernelConfig> fused = cuda::UsesDecodeFamily(problem)
                                                ? cuda::DecodeCandidateConfigs(problem)
                                                : cuda::FusedCompiledConfigs(problem.head_dim, problem.dtype);
    for (const KernelConfig& c : fused) keep(c);
    // A prefill over a paged cache: the Hopper prefill kernel's configs too (it reads pages of a
    // multiple of 16 tokens through the table; CanImplement says which).
    if (problem.kind == ProblemKind::kPrefill && problem.is_paged()) {
      for (const KernelConfig& c : cuda::FusedCompiledConfigs(problem.head_dim, problem.dtype)) keep(c);
    }
    for (Precision precision : kAllPrecisions) cuda::ForEachBaselineConfig(precision, keep);
    std::sort(out.begin(), out.end(), ConfigOrderLess);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (auto s = ValidateBuffers(problem, buffers); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;
    auto prepared = Prepare(problem, config, buffers);
    if (!prepared.ok()) return prepared.status();
    if (auto s = Enqueue(problem, config, *prepared, kStream); !s.ok()) return s;
    return Check(cudaStreamSynchronize(kStream), "synchronizing after the launch");
  }

  absl::Status RunOnStream(const AttentionProblem& problem, const KernelConfig& config,
                           const AttentionBuffers& buffers, const StreamLaunch& launch) override {
    const CurrentDeviceRestorer restore_device;
    if (auto s = Enter(); !s.ok()) return s;
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (config.variant != Variant::kFused) {
      return absl::UnimplementedError(Cat(
          "the ", VariantName(config.variant),
          " variant runs through Run only: on a caller's stream the CUDA backend runs the fused variant (the "
          "partial and materialized variants are measurement baselines)"));
    }
    if (auto s = ValidateBuffers(problem, buffers); !s.ok()) return s;
    if (auto s = CheckStreamLengths(problem, launch); !s.ok()) return s;
    if (problem.is_paged()) {
      if (auto s = CheckBlockTableMemory(buffers.block_table); !s.ok()) return s;
    }
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const auto stream = static_cast<cudaStream_t>(launch.stream);
    AttentionParams p = ParamsOf(problem, buffers);
    p.cu_seqlens_q = launch.cu_seqlens_q;
    p.cu_seqlens_k = launch.cu_seqlens_k;
    p.kv_valid_lens = launch.kv_valid_lens;
    if (!FusedOnDecodeFamily(problem, config)) {
      // The split last round of a persistent launch (cuda::FusedSplitWorkspaceFor).
      const cuda::FusedSplitWorkspace split = cuda::FusedSplitWorkspaceFor(problem, config, info_.sm_count);
      if (split.partial_floats > 0) {
        auto partials = stream_workspace_.AtLeast(static_cast<size_t>(split.partial_floats) * sizeof(float), stream,
                                                  /*zeroed=*/false, "the split partial states");
        if (!partials.ok()) return partials.status();
        auto counters = stream_split_counters_.AtLeast(static_cast<size_t>(split.counters) * sizeof(int32_t), stream,
                                                       /*zeroed=*/true, "the split counters");
        if (!counters.ok()) return counters.status();
        p.split_partials = static_cast<float*>(*partials);
        p.split_partial_floats = split.partial_floats;
        p.split_counters = static_cast<int32_t*>(*counters);
        p.split_counter_count = split.counters;
      }
      return CheckStreamLaunch(cuda::LaunchFused(p, config, stream), "fused launch");
    }
    // Planned for the problem as given: with the counts on the device, for kv_len keys per
    // sequence, which holds for any counts up to it.
    const int splits = cuda::ResolveDecodeSplits(problem, config, DecodeResidentBlocks(problem, config));
    cuda::DecodeLaunchBuffers decode = DecodeBuffersOf(problem, buffers, p);
    if (splits > 1) {
      const size_t floats = static_cast<size_t>(cuda::DecodeWorkspaceFloats(problem, splits));
      auto workspace = stream_workspace_.AtLeast(floats * sizeof(float), stream, /*zeroed=*/false,
                                                 "the decode split workspace");
      if (!workspace.ok()) return workspace.status();
      const size_t counters = static_cast<size_t>(cuda::DecodeSplitCounterCount(problem, config));
      auto counter_memory = stream_split_counters_.AtLeast(counters * sizeof(int32_t), stream, /*zeroed=*/true,
                                                           "the split counters");
      if (!counter_memory.ok()) return counter_memory.status();
      decode.workspace = static_cast<float*>(*workspace);
      decode.split_counters = static_cast<int32_t*>(*counter_memory);
    }
    return CheckStreamLaunch(cuda::LaunchDecode(problem, config, splits, decode, stream), "fused decode launch");
  }

  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers,
                                     const TimingOptions& options) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (auto s = ValidateBuffers(problem, buffers); !s.ok()) return s;
    if (options.repeats < 1 || options.warmup < 0) {
      return absl::InvalidArgumentError("timing needs repeats >= 1 and warmup >= 0");
    }
    // One block is bounded by max_seconds and its launches are queued together: the token
    // is read before the block, not between its launches.
    if (auto s = stop_token().Check(); !s.ok()) return s;
    auto prepared = Prepare(problem, config, buffers);
    if (!prepared.ok()) return prepared.status();
    if (options.flush_l2 && flush_buffer_ == nullptr) {
      if (cudaError_t e = cudaMalloc(&flush_buffer_, kL2FlushBytes + 16); e != cudaSuccess) {
        flush_buffer_ = nullptr;
        cudaGetLastError();
        return absl::ResourceExhaustedError(
            Cat("allocating the L2 flush buffer: ", CudaErrorText(e)));
      }
      if (auto s = Check(cudaMemset(flush_buffer_, 0, kL2FlushBytes + 16), "zeroing the L2 flush buffer"); !s.ok()) {
        cudaFree(flush_buffer_);
        flush_buffer_ = nullptr;
        return s;
      }
    }
    // Warm-up, timed on the host: how long a launch takes decides how many fit in
    // max_seconds (at least 3), since the timed launches are queued all at once.
    const auto warm_begin = std::chrono::steady_clock::now();
    for (int i = 0; i < options.warmup; ++i) {
      if (auto s = Enqueue(problem, config, *prepared, kStream); !s.ok()) return s;
    }
    if (auto s = Check(cudaStreamSynchronize(kStream), "warm-up"); !s.ok()) return s;
    int count = options.repeats;
    if (!(options.max_seconds > 0)) {
      count = std::min(count, 3);
    } else if (options.warmup > 0) {
      const double per_launch =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_begin).count() / options.warmup;
      if (per_launch * count > options.max_seconds) {
        count = std::max(3, static_cast<int>(options.max_seconds / std::max(per_launch, 1e-9)));
        count = std::min(count, options.repeats);
      }
    }
    while (static_cast<int>(timing_events_.size()) < 2 * count) {
      cudaEvent_t e = nullptr;
      if (auto s = Check(cudaEventCreate(&e), "cudaEventCreate"); !s.ok()) return s;
      timing_events_.push_back(e);
    }

    // Every timed launch is queued before the first is waited for, each between its own
    // pair of events (after its L2 flush when asked), so a sample is the kernels' time plus
    // the GPU-side gap from the start event to the first kernel, not the host's launch
    // latency, as long as the host queues faster than the GPU runs. With launches of 10-25 µs
    // it may not, and a sample then holds a wait for the host; with `graph` the whole block
    // goes to the GPU as one graph, whose nodes it runs back to back.
    TimingSamples out;
    if (options.graph) {
      if (auto s = RunBlockAsGraph(problem, config, *prepared, count, options.flush_l2, out); !s.ok()) return s;
      out.graphed = true;
    } else {
      out.before = cuda::NvmlDeviceState(pci_bus_id_);
      for (int i = 0; i < count; ++i) {
        if (auto s = EnqueueTimedLaunch(problem, config, *prepared, options.flush_l2, i, kStream,
                                        /*in_capture=*/false);
            !s.ok()) {
          return s;
        }
      }
      if (auto s = Check(cudaEventSynchronize(timing_events_[2 * count - 1]), "timed launches"); !s.ok()) return s;
    }
    for (int i = 0; i < count; ++i) {
      float ms = 0;
      if (auto s = Check(cudaEventElapsedTime(&ms, timing_events_[2 * i], timing_events_[2 * i + 1]),
                         "cudaEventElapsedTime");
          !s.ok()) {
        return s;
      }
      out.micros.push_back(static_cast<double>(ms) * 1000.0);
    }
    // Read while the clocks are up: the last launch has just finished.
    out.after = cuda::NvmlDeviceState(pci_bus_id_);
    out.sm_clock_mhz = out.after.sm_clock_mhz;  // 0 when unknown
    return out;
  }

  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (bytes == 0) return DeviceMemory();
    void* ptr = nullptr;
    if (cudaError_t e = cudaMalloc(&ptr, bytes); e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky
      return absl::ResourceExhaustedError(
          Cat("cudaMalloc(", bytes, " bytes): ", CudaErrorText(e)));
    }
    const int device = device_;
    return DeviceMemory(ptr, bytes, [device](void* p) {
      cudaSetDevice(device);
      cudaFree(p);
    });
  }

  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("null pointer in CopyToDevice");
    return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }

  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("null pointer in CopyToHost");
    return Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override {
    if (auto s = Enter(); !s.ok()) return s;
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) return absl::InvalidArgumentError("null pointer in Fill");
    if (auto s = Check(cudaMemsetAsync(dst, value, bytes, kStream), "cudaMemset"); !s.ok()) return s;
    return Check(cudaStreamSynchronize(kStream), "cudaMemset");
  }

 private:
  size_t WorkspaceLimit() const { return static_cast<size_t>(info_.memory_bytes / 2); }

  // The baselines' GEMM plan; a paged problem's is that of its gathered, contiguous twin.
  static absl::StatusOr<BaselinePlan> PlanFor(const AttentionProblem& problem,
                                              const KernelConfig& config) {
    if (config.variant == Variant::kFused) return BaselinePlan{};
    const int probs_bytes = problem.dtype == DType::kFp32 ? 4 : 2;
    return cuda::PlanBaseline(problem.is_paged() ? problem.Unpaged() : problem,
                              config.variant == Variant::kMaterialized, probs_bytes);
  }

  // The plan's S/P, then (paged) the gathered K and V.
  static size_t BaselineWorkspaceBytes(const AttentionProblem& problem, const BaselinePlan& plan) {
    const size_t gathered = GatheredKVBytes(problem);
    return gathered == 0 ? plan.workspace_bytes : AlignUp256(plan.workspace_bytes) + 2 * AlignUp256(gathered);
  }

  // Copies the block table of a paged problem to the host and checks it (ValidateBlockTable)
  // before anything reads K/V through it: a bad table is InvalidArgument with O untouched.
  // Copied on every call rather than cached by pointer: the caller may rewrite a table in
  // place between calls (a serving engine does, every step), and a stale check would let a
  // kernel read outside the pool.
  absl::Status ValidateDeviceBlockTable(const AttentionProblem& problem, const int32_t* table) {
    if (auto s = CheckBlockTableMemory(table); !s.ok()) return s;
    const int64_t entries = problem.BlockTableEntries();
    host_table_.resize(static_cast<size_t>(entries));
    if (entries > 0) {
      if (auto s = Check(cudaMemcpy(host_table_.data(), table, static_cast<size_t>(entries) * sizeof(int32_t),
                                    cudaMemcpyDefault),
                         "copying the block table to the host to check it");
          !s.ok()) {
        return s;
      }
    }
    return ValidateBlockTable(problem, host_table_.data(), entries);
  }

  // Copies the K/V scales of an e4m3 problem to the host and checks them (ValidateKvScales), on
  // every call for the same reason as the block table.
  absl::Status ValidateDeviceKvScales(const AttentionProblem& problem, const AttentionBuffers& buffers) {
    std::vector<float> k(static_cast<size_t>(problem.kv_heads)), v(k.size());
    for (auto [host, device] : {std::pair<float*, const float*>{k.data(), buffers.k_scale},
                                std::pair<float*, const float*>{v.data(), buffers.v_scale}}) {
      if (auto s = Check(cudaMemcpy(host, device, k.size() * sizeof(float), cudaMemcpyDefault),
                         "copying the K/V scales to the host to check them");
          !s.ok()) {
        return s;
      }
    }
    return ValidateKvScales(problem, k.data(), v.data());
  }

  // The block table must be memory the GPU can read (the kernels read it there).
  static absl::Status CheckBlockTableMemory(const int32_t* table) {
    cudaPointerAttributes attributes{};
    if (cudaError_t e = cudaPointerGetAttributes(&attributes, table); e != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(Cat("block_table is not a pointer CUDA knows: ", CudaErrorText(e)));
    }
    if (attributes.type == cudaMemoryTypeUnregistered) {
      return absl::InvalidArgumentError(
          "block_table is plain host memory; the CUDA backend reads the table on the GPU, so it must be "
          "device (or managed, or host-registered) memory");
    }
    return absl::OkStatus();
  }

  // The lengths RunOnStream's kernels read, all on the device: a varlen problem's prefix sums
  // as copies beside the problem's host arrays (validated there), the visible-key counts of a
  // uniform batch as the launch's array only (it may change between launches).
  static absl::Status CheckStreamLengths(const AttentionProblem& problem, const StreamLaunch& launch) {
    const bool device_prefix_sums = launch.cu_seqlens_q != nullptr || launch.cu_seqlens_k != nullptr;
    if (problem.is_varlen() && (launch.cu_seqlens_q == nullptr || launch.cu_seqlens_k == nullptr)) {
      return absl::InvalidArgumentError(
          "a varlen problem on a CUDA stream needs device copies of cu_seqlens_q and cu_seqlens_k (this path "
          "never copies host memory to the device)");
    }
    if (!problem.is_varlen() && device_prefix_sums) {
      return absl::InvalidArgumentError("device cu_seqlens are given for a problem that is not varlen");
    }
    if (!problem.kv_valid_lens.empty()) {
      return absl::InvalidArgumentError(
          "on a CUDA stream the visible-key counts are read on the device: give them as the launch's "
          "kv_valid_lens (device memory), not the problem's");
    }
    if (launch.kv_valid_lens != nullptr && problem.is_varlen()) {
      return absl::InvalidArgumentError(
          "kv_valid_lens applies to uniform batches; varlen batches express lengths in cu_seqlens_k");
    }
    for (const int32_t* lengths : {launch.cu_seqlens_q, launch.cu_seqlens_k, launch.kv_valid_lens}) {
      if (reinterpret_cast<uintptr_t>(lengths) % alignof(int32_t) != 0) {
        return absl::InvalidArgumentError("a device length array is not aligned to 4 bytes");
      }
    }
    return absl::OkStatus();
  }

  // A launch error on the stream path, without Check's device synchronization (forbidden while
  // the stream is captured, and it would wait for the caller's work): reported and cleared.
  // A fault while the kernels run shows at the caller's next synchronization.
  static absl::Status CheckStreamLaunch(cudaError_t e, std::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();
    return absl::InternalError(Cat(what, ": ", CudaErrorText(e)));
  }

  // Every public call starts here: the right device, and no use of a faulted context.
  absl::Status Enter() {
    if (!fault_.empty()) {
      return absl::InternalError(Cat(
          "the CUDA context of device ", device_, " is unusable after an earlier fault: ", fault_));
    }
    return Check(cudaSetDevice(device_), "cudaSetDevice");
  }

  // Converts a CUDA error into a Status. Errors that survive a device synchronize are
  // sticky (the context is lost): remembered, so later calls fail fast with the cause.
  absl::Status Check(cudaError_t e, std::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    const std::string text = Cat(what, ": ", CudaErrorText(e));
    cudaGetLastError();  // clears a non-sticky error
    // A synchronization would break the capture; nothing has run yet, so nothing can be sticky.
    if (capturing_) return absl::InternalError(text);
    if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess) {
      fault_ = text;
      return absl::InternalError(Cat(text, " (sticky: the CUDA context is lost)"));
    }
    return absl::InternalError(text);
  }

  absl::Status CheckCublas(cublasStatus_t s, std::string_view what) {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    if (auto cuda = Check(cudaGetLastError(), what); !cuda.ok()) return cuda;
    return absl::InternalError(Cat(what, ": ", CublasErrorName(s)));
  }

  // Points launch_workspace_ at `bytes` of workspace: the caller's arena when one is set
  // (FailedPrecondition when it is smaller), else the backend's own, grown to fit.
  absl::Status EnsureWorkspace(size_t bytes) {
    if (arena_ != nullptr) {
      if (bytes > arena_bytes_) {
        return absl::FailedPreconditionError(
            Cat("cuda: the scratch arena has ", arena_bytes_, " bytes; this launch needs ", bytes, " (ScratchBytes)"));
      }
      launch_workspace_ = arena_;
      launch_workspace_bytes_ = arena_bytes_;
      return absl::OkStatus();
    }
    launch_workspace_ = workspace_;
    launch_workspace_bytes_ = workspace_bytes_;
    if (bytes <= workspace_bytes_) return absl::OkStatus();
    launch_workspace_ = nullptr;
    launch_workspace_bytes_ = 0;
    if (workspace_ != nullptr) cudaFree(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
    if (cudaError_t e = cudaMalloc(&workspace_, bytes); e != cudaSuccess) {
      workspace_ = nullptr;
      cudaGetLastError();
      return absl::ResourceExhaustedError(
          Cat("allocating ", bytes >> 20, " MiB of workspace: ", CudaErrorText(e)));
    }
    workspace_bytes_ = bytes;
    launch_workspace_ = workspace_;
    launch_workspace_bytes_ = workspace_bytes_;
    return absl::OkStatus();
  }

  // The split counters of the decode family and of the split last round of a persistent
  // prefill: zero before a launch, and every completed launch leaves them zero, so they are
  // zeroed only when allocated. Their own allocation, not the
  // workspace, which the baselines overwrite.
  absl::StatusOr<int32_t*> SplitCounters(int64_t count) {
    if (count <= split_counter_capacity_) return split_counters_;
    if (split_counters_ != nullptr) cudaFree(split_counters_);
    split_counters_ = nullptr;
    split_counter_capacity_ = 0;
    const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
    if (cudaError_t e = cudaMalloc(&split_counters_, bytes); e != cudaSuccess) {
      split_counters_ = nullptr;
      cudaGetLastError();
      return absl::ResourceExhaustedError(Cat("allocating the split counters: ", CudaErrorText(e)));
    }
    if (auto s = Check(cudaMemset(split_counters_, 0, bytes), "zeroing the split counters"); !s.ok()) {
      return s;
    }
    split_counter_capacity_ = count;
    return split_counters_;
  }

  // What kAutoSplitKv plans with: the blocks of the config's decode instance the whole device
  // holds at once (0 for an explicit split count, which needs none). Asked of CUDA once per
  // instance, so that a launch being captured into a graph calls nothing but the launch.
  int DecodeResidentBlocks(const AttentionProblem& problem, const KernelConfig& config) const {
    if (config.split_kv != kAutoSplitKv) return 0;
    const auto key = std::make_tuple(problem.head_dim, static_cast<int>(problem.dtype),
                                     static_cast<int>(problem.kv_storage), config.block_m, config.block_s,
                                     config.threads, config.stages);
    if (auto it = decode_resident_blocks_.find(key); it != decode_resident_blocks_.end()) return it->second;
    const int blocks = info_.sm_count * cuda::DecodeBlocksPerMultiprocessor(problem, config);
    if (blocks > 0) decode_resident_blocks_.emplace(key, blocks);
    return blocks;
  }

  // The fused kernels' arguments for the problem's tensors in the layout of problem.h; the
  // device length arrays are the caller's to set.
  static AttentionParams ParamsOf(const AttentionProblem& problem, const AttentionBuffers& buffers) {
    AttentionParams p = cuda::AttentionParamsFor(problem, buffers.q, buffers.k, buffers.v, buffers.o);
    if (problem.is_paged()) p.block_table = buffers.block_table;
    return p;
  }

  // Whether the fused variant of `problem` runs on the decode family: every decode step, and a
  // prefill over a paged cache unless the Hopper prefill kernel reads it with this config
  // (pages of a multiple of 16 tokens; FusedCanImplement). The two families' configs do not
  // overlap there: the Hopper kernel's have 256 threads or more, the decode family's block_m
  // 64 has 128.
  bool FusedOnDecodeFamily(const AttentionProblem& problem, const KernelConfig& config) const {
    if (config.variant != Variant::kFused || !cuda::UsesDecodeFamily(problem)) return false;
    if (problem.kind == ProblemKind::kDecode) return true;
    return !cuda::FusedCanImplement(problem, config, info_.shared_mem_per_block, sm_version_).ok();
  }

  // The decode family's pointers: the tensors, a paged problem's table and the device length
  // arrays of `p`; the split workspace and counters are the caller's to set.
  static cuda::DecodeLaunchBuffers DecodeBuffersOf(const AttentionProblem& problem, const AttentionBuffers& buffers,
                                                   const AttentionParams& p) {
    cuda::DecodeLaunchBuffers launch;
    launch.q = buffers.q;
    launch.k = buffers.k;
    launch.v = buffers.v;
    launch.o = buffers.o;
    launch.block_table = problem.is_paged() ? buffers.block_table : nullptr;
    launch.k_scale = buffers.k_scale;
    launch.v_scale = buffers.v_scale;
    launch.cu_seqlens_q = p.cu_seqlens_q;
    launch.cu_seqlens_k = p.cu_seqlens_k;
    launch.kv_valid_lens = p.kv_valid_lens;
    return launch;
  }

  absl::StatusOr<PreparedLaunch> Prepare(const AttentionProblem& problem,
                                         const KernelConfig& config,
                                         const AttentionBuffers& buffers) {
    // First, before any upload or launch, so that a bad table leaves O (and everything
    // else) as it was.
    if (problem.is_paged()) {
      if (auto s = ValidateDeviceBlockTable(problem, buffers.block_table); !s.ok()) return s;
    }
    if (problem.is_kv_quantized()) {
      if (auto s = ValidateDeviceKvScales(problem, buffers); !s.ok()) return s;
    }
    PreparedLaunch out;
    out.variant = config.variant;
    out.params = ParamsOf(problem, buffers);
    AttentionParams& p = out.params;
    const int d = problem.head_dim;

    // The fused kernels read the lengths on the device; so does the gather of a paged cache.
    if (config.variant == Variant::kFused || problem.is_paged()) {
      auto q = cu_seqlens_q_.Upload(problem.cu_seqlens_q);
      if (!q.ok()) return q.status();
      auto k = cu_seqlens_k_.Upload(problem.cu_seqlens_k);
      if (!k.ok()) return k.status();
      auto pad = kv_valid_lens_.Upload(problem.kv_valid_lens);
      if (!pad.ok()) return pad.status();
      p.cu_seqlens_q = *q;
      p.cu_seqlens_k = *k;
      p.kv_valid_lens = *pad;
    }

    if (FusedOnDecodeFamily(problem, config)) {
      out.decode = true;
      out.decode_splits = cuda::ResolveDecodeSplits(problem, config, DecodeResidentBlocks(problem, config));
      const size_t floats = static_cast<size_t>(cuda::DecodeWorkspaceFloats(problem, out.decode_splits));
      if (auto s = EnsureWorkspace(floats * sizeof(float)); !s.ok()) return s;
      out.decode_buffers = DecodeBuffersOf(problem, buffers, p);
      cuda::DecodeLaunchBuffers& launch = out.decode_buffers;
      launch.workspace = floats > 0 ? static_cast<float*>(launch_workspace_) : nullptr;
      if (out.decode_splits > 1) {
        auto counters = SplitCounters(cuda::DecodeSplitCounterCount(problem, config));
        if (!counters.ok()) return counters.status();
        launch.split_counters = *counters;
      }
      return out;
    }
    if (config.variant == Variant::kFused) {
      // The split last round of a persistent launch (cuda::FusedSplitWorkspaceFor).
      const cuda::FusedSplitWorkspace split = cuda::FusedSplitWorkspaceFor(problem, config, info_.sm_count);
      if (split.partial_floats > 0) {
        if (auto s = EnsureWorkspace(static_cast<size_t>(split.partial_floats) * sizeof(float)); !s.ok()) return s;
        auto counters = SplitCounters(split.counters);
        if (!counters.ok()) return counters.status();
        p.split_partials = static_cast<float*>(launch_workspace_);
        p.split_partial_floats = split.partial_floats;
        p.split_counters = *counters;
        p.split_counter_count = split.counters;
      }
      return out;
    }

    auto plan = PlanFor(problem, config);
    if (!plan.ok()) return plan.status();
    out.plan = *std::move(plan);
    if (auto s = EnsureWorkspace(BaselineWorkspaceBytes(problem, out.plan)); !s.ok()) return s;
    p.workspace = launch_workspace_;
    p.workspace_bytes = launch_workspace_bytes_;
    if (problem.is_paged()) {
      // The baselines run on the contiguous twin of the problem, reading K and V from the
      // gathered copies behind S/P in the workspace.
      out.gather = true;
      out.unpaged = problem.Unpaged();
      const size_t gathered = GatheredKVBytes(problem);
      char* k_copy = static_cast<char*>(launch_workspace_) + AlignUp256(out.plan.workspace_bytes);
      char* v_copy = k_copy + AlignUp256(gathered);
      cuda::GatherPagedKVArgs& gather = out.gather_args;
      gather.k_pool = buffers.k;
      gather.v_pool = buffers.v;
      gather.k_out = k_copy;
      gather.v_out = v_copy;
      gather.block_table = buffers.block_table;
      gather.block_table_width = problem.BlockTableWidth();
      gather.page_size = problem.page_block_size;
      gather.batch = problem.batch;
      gather.kv_len = problem.kv_len;
      gather.kv_valid_lens = p.kv_valid_lens;
      gather.cu_seqlens_k = p.cu_seqlens_k;
      gather.total_rows = out.unpaged.TotalKeys();
      gather.row_bytes = static_cast<int64_t>(problem.kv_heads) * d * DTypeBytes(problem.dtype);
      p.k = k_copy;
      p.v = v_copy;
      p.kv_total_rows = gather.total_rows;
    }
    const AttentionProblem& flat = out.gather ? out.unpaged : problem;

    // Pointer arrays for cublasGemmBatchedEx: one entry per (sequence, q head); GQA by
    // pointing each q head at its kv head.
    const size_t elem = static_cast<size_t>(DTypeBytes(problem.dtype));
    const size_t p_elem = problem.dtype == DType::kFp32 ? 4 : 2;
    std::vector<const void*> host;
    std::vector<size_t> group_start;
    for (const GemmGroup& g : out.plan.groups) {
      group_start.push_back(host.size());
      const size_t base = host.size();
      host.resize(base + 6 * static_cast<size_t>(g.entries));
      const void** ptrs = host.data() + base;
      char* ws = static_cast<char*>(launch_workspace_);
      for (int64_t e = 0; e < g.entries; ++e) {
        const int64_t s = e / flat.q_heads;
        const int h = static_cast<int>(e % flat.q_heads);
        const int kvh = h / flat.heads_per_kv();
        const int64_t q_row = g.q_first_row + s * g.q_seq_stride;
        const int64_t k_row = g.k_first_row + s * g.k_seq_stride;
        const size_t rows_elems = static_cast<size_t>(e) * g.q_len * static_cast<size_t>(g.ld);
        const char* qb = static_cast<const char*>(buffers.q);
        const char* kb = static_cast<const char*>(p.k);
        const char* vb = static_cast<const char*>(p.v);
        char* ob = static_cast<char*>(buffers.o);
        ptrs[0 * g.entries + e] = kb + (k_row * p.k_row_stride + kvh * d) * elem;
        ptrs[1 * g.entries + e] = qb + (q_row * p.q_row_stride + h * d) * elem;
        ptrs[2 * g.entries + e] = ws + g.scores_offset + rows_elems * 4;
        ptrs[3 * g.entries + e] = vb + (k_row * p.v_row_stride + kvh * d) * elem;
        ptrs[4 * g.entries + e] = ws + g.probs_offset + rows_elems * p_elem;
        ptrs[5 * g.entries + e] = ob + (q_row * p.o_row_stride + h * d) * elem;
      }
    }
    if (host != pointer_host_) {
      const size_t bytes = host.size() * sizeof(void*);
      if (bytes > pointer_capacity_) {
        if (pointer_arrays_ != nullptr) cudaFree(pointer_arrays_);
        pointer_arrays_ = nullptr;
        pointer_capacity_ = 0;
        pointer_host_.clear();
        if (cudaError_t e = cudaMalloc(&pointer_arrays_, bytes); e != cudaSuccess) {
          pointer_arrays_ = nullptr;
          cudaGetLastError();
          return absl::ResourceExhaustedError(
              Cat("allocating GEMM pointer arrays: ", CudaErrorText(e)));
        }
        pointer_capacity_ = bytes;
      }
      pointer_host_.clear();
      if (bytes > 0) {
        if (auto s = Check(cudaMemcpy(pointer_arrays_, host.data(), bytes, cudaMemcpyHostToDevice),
                           "copying GEMM pointer arrays");
            !s.ok()) {
          return s;
        }
      }
      pointer_host_ = std::move(host);
    }
    for (size_t start : group_start) {
      out.group_pointers.push_back(static_cast<const void**>(pointer_arrays_) + start);
    }
    return out;
  }

  // One timed launch on `stream`: the L2 flush when asked, then the variant's kernels between
  // the i-th pair of timing events. `in_capture`: `stream` is being captured into a graph, where
  // a plain cudaEventRecord only orders the work captured around it and records nothing; with
  // cudaEventRecordExternal it becomes an event record node, which records the event each time
  // the graph runs (cudaGraphAddEventRecordNode), so cudaEventElapsedTime reads the pair as it
  // reads a pair recorded on a stream (it needs both recorded, completed and created with
  // timing, nothing about where). PyTorch times graphs this way (external events).
  absl::Status EnqueueTimedLaunch(const AttentionProblem& problem, const KernelConfig& config,
                                  const PreparedLaunch& prepared, bool flush_l2, int i, cudaStream_t stream,
                                  bool in_capture) {
    const auto record = [&](cudaEvent_t event) {
      return in_capture ? cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal)
                        : cudaEventRecord(event, stream);
    };
    if (flush_l2) {
      if (auto s = Check(cuda::EnqueueL2FlushByReading(
                             flush_buffer_, kL2FlushBytes,
                             reinterpret_cast<uint32_t*>(static_cast<char*>(flush_buffer_) + kL2FlushBytes),
                             info_.sm_count, stream),
                         "L2 flush");
          !s.ok()) {
        return s;
      }
    }
    if (auto s = Check(record(timing_events_[2 * i]), "cudaEventRecord"); !s.ok()) return s;
    if (auto s = Enqueue(problem, config, prepared, stream); !s.ok()) return s;
    return Check(record(timing_events_[2 * i + 1]), "cudaEventRecord");
  }

  // Time's block as one CUDA graph (TimingOptions::graph): the `count` timed launches, each
  // with its flush and its events, captured on a stream of the backend's own, instantiated and
  // launched once on kStream, then waited for; `out.before` is read just before that launch.
  // Everything the capture holds was prepared before it (workspace, pointer arrays, lengths,
  // flush buffer, events) and cuBLAS gets a workspace of ours, so nothing is allocated inside.
  // A capture that fails is ended and its graph destroyed: the stream never stays in capture
  // mode, and the error (Internal) is cleared. The graph is destroyed after the block.
  absl::Status RunBlockAsGraph(const AttentionProblem& problem, const KernelConfig& config,
                               const PreparedLaunch& prepared, int count, bool flush_l2, TimingSamples& out) {
    if (graph_stream_ == nullptr) {
      // Non-blocking: a capture must not implicitly wait for the legacy default stream.
      if (auto s = Check(cudaStreamCreateWithFlags(&graph_stream_, cudaStreamNonBlocking),
                         "creating the stream timed blocks are captured on");
          !s.ok()) {
        graph_stream_ = nullptr;
        return s;
      }
    }
    const bool uses_cublas = config.variant != Variant::kFused;
    const size_t cublas_bytes = GraphCublasWorkspaceBytes(sm_version_);
    if (uses_cublas && graph_cublas_workspace_ == nullptr) {
      if (cudaError_t e = cudaMalloc(&graph_cublas_workspace_, cublas_bytes); e != cudaSuccess) {
        graph_cublas_workspace_ = nullptr;
        cudaGetLastError();
        return absl::ResourceExhaustedError(Cat("allocating cuBLAS's workspace for graph-timed blocks: ",
                                                CudaErrorText(e)));
      }
    }
    // cuBLAS launches on its handle's stream: the capture stream for the capture, kStream again
    // afterwards whatever happens (cublasSetStream also puts it back on its default workspace).
    struct CublasStreamRestorer {
      cublasHandle_t handle;
      ~CublasStreamRestorer() { cublasSetStream(handle, kStream); }
    } restore_cublas{cublas_};
    if (uses_cublas) {
      if (auto s = CheckCublas(cublasSetStream(cublas_, graph_stream_), "cublasSetStream"); !s.ok()) return s;
      if (auto s = CheckCublas(cublasSetWorkspace(cublas_, graph_cublas_workspace_, cublas_bytes), "cublasSetWorkspace");
          !s.ok()) {
        return s;
      }
    }
    // Thread-local: this thread may not make a call that would break the capture (an allocation,
    // a synchronization), while other threads' CUDA calls neither break it nor fail.
    if (auto s = Check(cudaStreamBeginCapture(graph_stream_, cudaStreamCaptureModeThreadLocal),
                       "beginning the capture of a timed block");
        !s.ok()) {
      return s;
    }
    capturing_ = true;
    absl::Status captured = absl::OkStatus();
    for (int i = 0; i < count && captured.ok(); ++i) {
      captured = EnqueueTimedLaunch(problem, config, prepared, flush_l2, i, graph_stream_, /*in_capture=*/true);
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(graph_stream_, &graph);
    capturing_ = false;
    struct GraphOwner {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ~GraphOwner() {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        if (graph != nullptr) cudaGraphDestroy(graph);
      }
    } owner{graph};
    if (!captured.ok() || ended != cudaSuccess) {
      cudaGetLastError();
      return absl::InternalError(Cat("capturing the timed block into a CUDA graph: ",
                                     !captured.ok() ? captured.message() : CudaErrorText(ended)));
    }
    if (auto s = Check(cudaGraphInstantiate(&owner.exec, graph, 0), "instantiating the timed block's graph"); !s.ok()) {
      owner.exec = nullptr;
      return s;
    }
    out.before = cuda::NvmlDeviceState(pci_bus_id_);
    if (auto s = Check(cudaGraphLaunch(owner.exec, kStream), "launching the timed block's graph"); !s.ok()) return s;
    return Check(cudaStreamSynchronize(kStream), "the timed block's graph");
  }

  // Enqueues every kernel of the variant on `stream` (kStream, or Time's capture stream); no
  // synchronization. cuBLAS launches on its handle's stream, which the caller has set to `stream`.
  absl::Status Enqueue(const AttentionProblem& paged_or_contiguous, const KernelConfig& config,
                       const PreparedLaunch& prepared, cudaStream_t stream) {
    const AttentionParams& p = prepared.params;
    if (prepared.decode) {
      return Check(cuda::LaunchDecode(paged_or_contiguous, config, prepared.decode_splits, prepared.decode_buffers,
                                      stream),
                   "fused decode launch");
    }
    if (config.variant == Variant::kFused) {
      return Check(cuda::LaunchFused(p, config, stream), "fused launch");
    }
    // A baseline over a paged cache first gathers K and V into contiguous copies (its GEMMs
    // take one pointer and stride per operand): the work such a baseline must do, so it is
    // inside every timed launch.
    if (prepared.gather) {
      if (auto s = Check(cuda::LaunchGatherPagedKV(prepared.gather_args, stream), "gathering the paged K/V");
          !s.ok()) {
        return s;
      }
    }
    const AttentionProblem& problem = prepared.gather ? prepared.unpaged : paged_or_contiguous;
    const size_t elem = static_cast<size_t>(DTypeBytes(problem.dtype));
    for (const cuda::ZeroRows& z : prepared.plan.zero_rows) {
      char* o = static_cast<char*>(p.o) + static_cast<size_t>(z.first_token) * p.o_row_stride * elem;
      if (auto s = Check(cudaMemsetAsync(o, 0, static_cast<size_t>(z.tokens) * p.o_row_stride * elem, stream),
                         "zeroing rows that see no key");
          !s.ok()) {
        return s;
      }
    }
    const cudaDataType_t io_type = CublasType(problem.dtype);
    const cublasComputeType_t compute =
        config.precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    const int d = problem.head_dim;
    char* ws = static_cast<char*>(launch_workspace_);
    for (size_t gi = 0; gi < prepared.plan.groups.size(); ++gi) {
      const GemmGroup& g = prepared.plan.groups[gi];
      const void** ptrs = prepared.group_pointers[gi];
      const int entries = static_cast<int>(g.entries);
      void* const* k_ptrs = const_cast<void* const*>(ptrs + 0 * g.entries);
      void* const* q_ptrs = const_cast<void* const*>(ptrs + 1 * g.entries);
      void* const* s_ptrs = const_cast<void* const*>(ptrs + 2 * g.entries);
      void* const* v_ptrs = const_cast<void* const*>(ptrs + 3 * g.entries);
      void* const* p_ptrs = const_cast<void* const*>(ptrs + 4 * g.entries);
      void* const* o_ptrs = const_cast<void* const*>(ptrs + 5 * g.entries);
      if (config.variant == Variant::kMaterialized) {
        // Column-major view: S^T (k x q) = K (d x k)^T * Q (d x q); row-major S[q][ld].
        if (auto s = CheckCublas(
                cublasGemmBatchedEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, g.k_len, g.q_len, d, &one,
                                    reinterpret_cast<const void* const*>(k_ptrs), io_type,
                                    static_cast<int>(p.k_row_stride),
                                    reinterpret_cast<const void* const*>(q_ptrs), io_type,
                                    static_cast<int>(p.q_row_stride), &zero, s_ptrs, CUDA_R_32F,
                                    g.ld, entries, compute, CUBLAS_GEMM_DEFAULT),
                "cuBLAS QK^T");
            !s.ok()) {
          return s;
        }
        const cuda::SoftmaxRowsArgs sm =
            cuda::SoftmaxRowsArgsFor(problem, config, g, ws, ToElemType(problem.dtype), p.scale_log2);
        if (auto s = Check(cuda::LaunchSoftmaxRows(sm, stream), "softmax launch"); !s.ok()) return s;
      } else {
        const cuda::PartialScoresArgs ps = cuda::PartialScoresArgsFor(
            problem, config, g, p.q, p.k, ws, p.scale_log2, /*tensor_cores=*/config.precision != Precision::kFp32);
        if (auto s = Check(cuda::LaunchPartialScores(ps, stream), "partial scores launch"); !s.ok()) {
          return s;
        }
      }
      // Column-major view: O^T (d x q) = V^T (d x k) * P^T (k x q).
      if (auto s = CheckCublas(
              cublasGemmBatchedEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, d, g.q_len, g.k_len, &one,
                                  reinterpret_cast<const void* const*>(v_ptrs), io_type,
                                  static_cast<int>(p.v_row_stride),
                                  reinterpret_cast<const void* const*>(p_ptrs), io_type, g.ld,
                                  &zero, o_ptrs, io_type, static_cast<int>(p.o_row_stride),
                                  entries, compute, CUBLAS_GEMM_DEFAULT),
              "cuBLAS PV");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  const int device_;
  const DeviceInfo info_;
  const int sm_version_;
  const std::string pci_bus_id_;
  cublasHandle_t cublas_;
  std::string fault_;  // non-empty once the context is lost

  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // The caller's arena (UseScratchArena), or null; what the prepared launch uses (arena or own).
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  void* launch_workspace_ = nullptr;
  size_t launch_workspace_bytes_ = 0;
  void* flush_buffer_ = nullptr;
  void* pointer_arrays_ = nullptr;
  size_t pointer_capacity_ = 0;
  std::vector<const void*> pointer_host_;
  std::vector<cudaEvent_t> timing_events_;  // start/stop pairs of the timed launches, grown on demand
  // Graph-timed blocks (TimingOptions::graph): the stream they are captured on and cuBLAS's
  // workspace during the capture, both made at the first one.
  cudaStream_t graph_stream_ = nullptr;
  void* graph_cublas_workspace_ = nullptr;
  bool capturing_ = false;  // a block is being captured: Check must not synchronize
  DeviceIntArray cu_seqlens_q_, cu_seqlens_k_, kv_valid_lens_;
  std::vector<int32_t> host_table_;  // the last block table checked, copied from the device
  int32_t* split_counters_ = nullptr;
  int64_t split_counter_capacity_ = 0;
  // RunOnStream's own: never shared with Run's, whose workspace is freed when it grows.
  RetainedDeviceBuffer stream_workspace_;
  RetainedDeviceBuffer stream_split_counters_;
  // DecodeResidentBlocks by (head_dim, dtype, kv_storage, block_m, block_s, threads, stages).
  // (A cache: ScratchBytes, a const question, asks it too.)
  mutable std::map<std::tuple<int, int, int, int, int, int, int>, int> decode_resident_blocks_;
};

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(Cat("no usable CUDA driver/device: ", CudaErrorText(e)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device on this host");
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(
        Cat("CUDA device index ", device_index, " out of range [0, ", count, ")"));
  }
  if (cudaError_t e = cudaSetDevice(device_index); e != cudaSuccess) {
    return absl::UnavailableError(Cat("cudaSetDevice: ", CudaErrorText(e)));
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device_index); e != cudaSuccess) {
    return absl::UnavailableError(Cat("cudaGetDeviceProperties: ", CudaErrorText(e)));
  }
  char bus_id[32] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_index) != cudaSuccess) {
    cudaGetLastError();
    bus_id[0] = '\0';
  }
  int driver = 0, runtime = 0, clock_khz = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_index);
  cublasHandle_t handle = nullptr;
  if (cublasStatus_t s = cublasCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return absl::UnavailableError(Cat("cublasCreate: ", CublasErrorName(s)));
  }
  int cublas_version = 0;
  cublasGetVersion(handle, &cublas_version);
  cublasSetStream(handle, kStream);
  cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST);

  DeviceInfo info;
  info.backend = "cuda";
  info.name = prop.name;
  info.arch = Cat("sm", prop.major * 10 + prop.minor);
  info.device_index = device_index;
  info.sm_count = prop.multiProcessorCount;
  info.shared_mem_per_block = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.l2_bytes = prop.l2CacheSize;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.driver = Cat("driver ", driver / 1000, ".", (driver % 1000) / 10, ", runtime ",
                             runtime / 1000, ".", (runtime % 1000) / 10, ", cuBLAS ",
                             cublas_version, ", pci ", bus_id);
  const int nvml_max = cuda::NvmlMaxSmClockMhz(bus_id);
  info.max_clock_mhz = nvml_max > 0 ? nvml_max : clock_khz / 1000;
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(device_index, std::move(info), prop.major * 10 + prop.minor,
                                    std::string(bus_id), handle));
}

}  // namespace fusetune
