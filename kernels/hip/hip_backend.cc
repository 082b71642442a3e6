// The HIP backend: device limits -> HipCanImplement / HipCandidateConfigs (hip_configs.h), and
// Run/Time launching the shared kernels and the HIP GEMMs on one stream, timed with hipEvents.
#include "fusetune/kernels/hip_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "attention_params.h"
#include "baseline_args.h"
#include "baseline_kernels.h"
#include "baseline_plan.h"
#include "hip_configs.h"
#include "hip_gemm.h"

namespace fusetune {
namespace {

using absl::StrCat;
using hip::AttentionParams;
using hip::ElemType;
using hip::GemmGroup;
using hip::ToElemType;

constexpr size_t kL2FlushBytes = size_t{256} << 20;  // over the largest AMD last-level cache

// "name: description" (HIP 5.2's description is often just the name again: then the name).
std::string HipErrorText(hipError_t e) {
  const std::string name = hipGetErrorName(e), text = hipGetErrorString(e);
  return name == text ? name : StrCat(name, ": ", text);
}

class HipBackend final : public Backend {
 public:
  HipBackend(int device, DeviceInfo info, hip::HipDeviceLimits limits, hipStream_t stream)
      : device_(device), info_(std::move(info)), limits_(limits), stream_(stream) {}
  ~HipBackend() override {
    // Destruction cannot report errors; a lost device frees everything anyway.
    for (hipEvent_t e : events_) (void)hipEventDestroy(e);
    for (void* p : {workspace_, flush_buffer_, seqlens_}) {
      if (p != nullptr) (void)hipFree(p);
    }
    (void)hipStreamDestroy(stream_);
  }

  DeviceInfo Describe() const override { return info_; }

  absl::Status CanImplement(const AttentionProblem& problem, const KernelConfig& config) const override {
    return hip::HipCanImplement(problem, config, limits_);
  }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& problem) const override {
    return hip::HipCandidateConfigs(problem, limits_);
  }

  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = Prepare(problem, config, buffers); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;
    if (auto s = Enqueue(problem, config); !s.ok()) return s;
    return Check(hipStreamSynchronize(stream_), "run");
  }

  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers,
                                     const TimingOptions& options) override {
    if (options.repeats < 1 || options.warmup < 0) {
      return absl::InvalidArgumentError("timing needs repeats >= 1 and warmup >= 0");
    }
    if (auto s = Prepare(problem, config, buffers); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;  // before the block, as on CUDA
    if (options.flush_l2 && flush_buffer_ == nullptr) {
      if (auto s = Check(hipMalloc(&flush_buffer_, kL2FlushBytes), "allocating the cache flush buffer");
          !s.ok()) {
        flush_buffer_ = nullptr;
        return s;
      }
    }
    // As the CUDA backend: the warm-up's host time decides how many launches fit in max_seconds.
    const auto warm_begin = std::chrono::steady_clock::now();
    for (int i = 0; i < options.warmup; ++i) {
      if (auto s = Enqueue(problem, config); !s.ok()) return s;
    }
    if (auto s = Check(hipStreamSynchronize(stream_), "warm-up"); !s.ok()) return s;
    int count = options.repeats;
    if (!(options.max_seconds > 0)) {
      count = std::min(count, 3);
    } else if (options.warmup > 0) {
      const double per_launch =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_begin).count() /
          options.warmup;
      if (per_launch * count > options.max_seconds) {
        count = std::min(options.repeats,
                         std::max(3, static_cast<int>(options.max_seconds / std::max(per_launch, 1e-9))));
      }
    }
    while (static_cast<int>(events_.size()) < 2 * count) {
      hipEvent_t e = nullptr;
      if (auto s = Check(hipEventCreate(&e), "hipEventCreate"); !s.ok()) return s;
      events_.push_back(e);
    }
    for (int i = 0; i < count; ++i) {
      if (options.flush_l2) {
        if (auto s = Check(hipMemsetAsync(flush_buffer_, i & 0xff, kL2FlushBytes, stream_), "cache flush");
            !s.ok()) {
          return s;
        }
      }
      if (auto s = Check(hipEventRecord(events_[2 * i], stream_), "hipEventRecord"); !s.ok()) return s;
      if (auto s = Enqueue(problem, config); !s.ok()) return s;
      if (auto s = Check(hipEventRecord(events_[2 * i + 1], stream_), "hipEventRecord"); !s.ok()) return s;
    }
    if (auto s = Check(hipEventSynchronize(events_[2 * count - 1]), "timed launches"); !s.ok()) return s;
    TimingSamples out;
    for (int i = 0; i < count; ++i) {
      float ms = 0;
      if (auto s = Check(hipEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]), "hipEventElapsedTime");
          !s.ok()) {
        return s;
      }
      out.micros.push_back(1000.0 * ms);
    }
    return out;
  }

  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    void* p = nullptr;
    if (bytes > 0) {
      if (hipError_t e = hipMalloc(&p, bytes); e != hipSuccess) {
        return absl::ResourceExhaustedError(StrCat("hipMalloc(", bytes, "): ", HipErrorText(e)));
      }
    }
    return DeviceMemory(p, bytes, [](void* q) { (void)hipFree(q); });
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return Check(hipMemcpy(dst, src, bytes, hipMemcpyHostToDevice), "hipMemcpy to device");
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return Check(hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost), "hipMemcpy to host");
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override {
    return Check(hipMemset(dst, value, bytes), "hipMemset");
  }

 private:
  absl::Status Check(hipError_t e, std::string_view what) {
    if (e == hipSuccess) return absl::OkStatus();
    (void)hipGetLastError();  // clear a sticky launch error for the next call
    return absl::InternalError(StrCat(std::string(what), " on HIP device ", device_, ": ", HipErrorText(e)));
  }

  // API checks, then params_ / plan_ / device-side sequence arrays for one (problem, buffers).
  absl::Status Prepare(const AttentionProblem& problem, const KernelConfig& config,
                       const AttentionBuffers& buffers) {
    if (auto s = CanImplement(problem, config); !s.ok()) return s;
    if (auto s = ValidateBuffers(problem, buffers); !s.ok()) return s;
    if (auto s = Check(hipSetDevice(device_), "hipSetDevice"); !s.ok()) return s;
    AttentionParams& p = params_;
    p = hip::AttentionParamsFor(problem, buffers.q, buffers.k, buffers.v, buffers.o);
    if (config.variant == Variant::kFused) {
      // cu_seqlens_q, cu_seqlens_k, kv_valid_lens back to back in one device array.
      std::vector<int32_t> host(problem.cu_seqlens_q.begin(), problem.cu_seqlens_q.end());
      host.insert(host.end(), problem.cu_seqlens_k.begin(), problem.cu_seqlens_k.end());
      host.insert(host.end(), problem.kv_valid_lens.begin(), problem.kv_valid_lens.end());
      if (host.size() * sizeof(int32_t) > seqlens_bytes_) {
        if (seqlens_ != nullptr) (void)hipFree(seqlens_);
        seqlens_ = nullptr;
        seqlens_bytes_ = 0;
        if (auto s = Check(hipMalloc(&seqlens_, host.size() * sizeof(int32_t)), "sequence arrays"); !s.ok()) {
          seqlens_ = nullptr;
          return s;
        }
        seqlens_bytes_ = host.size() * sizeof(int32_t);
      }
      if (!host.empty()) {
        if (auto s = Check(hipMemcpy(seqlens_, host.data(), host.size() * sizeof(int32_t),
                                     hipMemcpyHostToDevice),
                           "copying sequence arrays");
            !s.ok()) {
          return s;
        }
      }
      const int32_t* base = static_cast<const int32_t*>(seqlens_);
      const size_t nq = problem.cu_seqlens_q.size(), nk = problem.cu_seqlens_k.size();
      p.cu_seqlens_q = nq > 0 ? base : nullptr;
      p.cu_seqlens_k = nk > 0 ? base + nq : nullptr;
      p.kv_valid_lens = problem.kv_valid_lens.empty() ? nullptr : base + nq + nk;
      return absl::OkStatus();
    }
    auto plan = hip::PlanBaseline(problem, config.variant == Variant::kMaterialized,
                                  problem.dtype == DType::kFp32 ? 4 : 2);
    if (!plan.ok()) return plan.status();
    plan_ = *std::move(plan);
    if (plan_.workspace_bytes > workspace_bytes_) {
      if (workspace_ != nullptr) (void)hipFree(workspace_);
      workspace_ = nullptr;
      workspace_bytes_ = 0;
      if (auto s = Check(hipMalloc(&workspace_, plan_.workspace_bytes), "allocating the S/P workspace");
          !s.ok()) {
        workspace_ = nullptr;
        return s;
      }
      workspace_bytes_ = plan_.workspace_bytes;
    }
    return absl::OkStatus();
  }

  // Enqueues every kernel of the variant on stream_ (Prepare ran); no synchronization.
  absl::Status Enqueue(const AttentionProblem& problem, const KernelConfig& config) {
    const AttentionParams& p = params_;
    if (config.variant == Variant::kFused) return Check(hip::LaunchFused(p, config, stream_), "fused launch");
    const size_t elem = static_cast<size_t>(DTypeBytes(problem.dtype));
    for (const hip::ZeroRows& z : plan_.zero_rows) {
      char* o = static_cast<char*>(p.o) + static_cast<size_t>(z.first_token) * p.o_row_stride * elem;
      if (auto s = Check(hipMemsetAsync(o, 0, static_cast<size_t>(z.tokens) * p.o_row_stride * elem, stream_),
                         "zeroing rows that see no key");
          !s.ok()) {
        return s;
      }
    }
    char* ws = static_cast<char*>(workspace_);
    for (const GemmGroup& g : plan_.groups) {
      hip::AttentionGemmArgs gemm;
      gemm.q = p.q;
      gemm.k = p.k;
      gemm.v = p.v;
      gemm.o = p.o;
      gemm.scores = reinterpret_cast<float*>(ws + g.scores_offset);
      gemm.probs = ws + g.probs_offset;
      gemm.in_type = ToElemType(problem.dtype);
      gemm.head_dim = problem.head_dim;
      gemm.q_heads = problem.q_heads;
      gemm.kv_heads = problem.kv_heads;
      gemm.q_first_row = g.q_first_row;
      gemm.k_first_row = g.k_first_row;
      gemm.q_seq_stride = g.q_seq_stride;
      gemm.k_seq_stride = g.k_seq_stride;
      gemm.entries = g.entries;
      gemm.q_len = g.q_len;
      gemm.k_len = g.k_len;
      gemm.ld = g.ld;
      if (config.variant == Variant::kMaterialized) {
        if (auto s = Check(hip::LaunchScoresGemm(gemm, stream_), "QK^T GEMM"); !s.ok()) return s;
        const hip::SoftmaxRowsArgs sm = hip::SoftmaxRowsArgsFor(problem, config, g, ws, gemm.in_type, p.scale_log2);
        if (auto s = Check(hip::LaunchSoftmaxRows(sm, stream_), "softmax launch"); !s.ok()) return s;
      } else {
        // WMMA is CUDA-only: QK^T in exact fp32.
        const hip::PartialScoresArgs ps =
            hip::PartialScoresArgsFor(problem, config, g, p.q, p.k, ws, p.scale_log2, /*tensor_cores=*/false);
        if (auto s = Check(hip::LaunchPartialScores(ps, stream_), "partial scores launch"); !s.ok()) return s;
      }
      if (auto s = Check(hip::LaunchProbsValueGemm(gemm, stream_), "PV GEMM"); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const int device_;
  const DeviceInfo info_;
  const hip::HipDeviceLimits limits_;
  hipStream_t stream_;
  AttentionParams params_;
  hip::BaselinePlan plan_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* seqlens_ = nullptr;
  size_t seqlens_bytes_ = 0;
  void* flush_buffer_ = nullptr;
  std::vector<hipEvent_t> events_;
};

}  // namespace

int HipDeviceCount() {
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess) return 0;
  return count;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(int device_index) {
  int count = 0;
  if (hipError_t e = hipGetDeviceCount(&count); e != hipSuccess || count == 0) {
    return absl::UnavailableError(StrCat(
        "no AMD GPU: hipGetDeviceCount ", e == hipSuccess ? "found 0 devices" : HipErrorText(e),
        " (the HIP backend needs a ROCm driver and device)"));
  }
  if (device_index < 0 || device_index >= count) {
    return absl::UnavailableError(StrCat("HIP device ", device_index, " does not exist (", count, " present)"));
  }
  if (hipError_t e = hipSetDevice(device_index); e != hipSuccess) {
    return absl::UnavailableError(StrCat("hipSetDevice(", device_index, "): ", HipErrorText(e)));
  }
  hipDeviceProp_t prop{};
  if (hipError_t e = hipGetDeviceProperties(&prop, device_index); e != hipSuccess) {
    return absl::UnavailableError(StrCat("hipGetDeviceProperties: ", HipErrorText(e)));
  }
  hip::HipDeviceLimits limits;
  limits.wavefront_size = prop.warpSize;
  limits.compute_units = prop.multiProcessorCount;
  limits.max_threads_per_block = prop.maxThreadsPerBlock;
  limits.lds_bytes_per_block = static_cast<int64_t>(prop.sharedMemPerBlock);
  limits.workspace_limit_bytes = static_cast<int64_t>(prop.totalGlobalMem / 2);
  DeviceInfo info;
  info.backend = "hip";
  info.name = prop.name;
  // gcnArchName is e.g. "gfx90a:sramecc+:xnack-": the target before the feature flags.
  const std::string gcn = prop.gcnArchName;
  info.arch = gcn.substr(0, gcn.find(':'));
  info.device_index = device_index;
  info.sm_count = prop.multiProcessorCount;
  info.shared_mem_per_block = limits.lds_bytes_per_block;
  info.l2_bytes = prop.l2CacheSize;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.max_clock_mhz = prop.clockRate / 1000;
  int runtime = 0, driver = 0;
  (void)hipRuntimeGetVersion(&runtime);  // 0 when unknown
  (void)hipDriverGetVersion(&driver);
  info.driver = StrCat("hip runtime ", runtime, ", driver ", driver, ", wavefront ", prop.warpSize);
  hipStream_t stream = nullptr;
  if (hipError_t e = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking); e != hipSuccess) {
    return absl::UnavailableError(StrCat("hipStreamCreate: ", HipErrorText(e)));
  }
  return std::unique_ptr<Backend>(new HipBackend(device_index, std::move(info), limits, stream));
}

}  // namespace fusetune
