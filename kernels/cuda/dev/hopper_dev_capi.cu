// The Hopper prefill kernels (fused/fused_wgmma.cuh) behind the C ABI's contiguous-prefill calls,
// built by nvcc alone (build_hopper_dev.sh: no absl, no CMake), so that a GPU host compiles a
// kernel variant in a minute and compares it with another build's kernels and cuDNN in one
// process: ci/device/compare_torch.py --also LABEL=KEY@libfusetune_hopper_dev.so.
//
// It serves what compare_torch.py asks of an --also library: fusetune_api_version,
// fusetune_status_name (../../capi/status_name.cc, linked in), fusetune_create ("cuda" only), fusetune_destroy, fusetune_describe,
// fusetune_can_implement, fusetune_run and fusetune_time, with the semantics of
// fusetune/c_api.h for the fused variant's Hopper instances (fp16/bf16, head_dim 64 or 128,
// causal or not, GQA) on uniform batches. Everything else is UNIMPLEMENTED with the reason:
// varlen, key padding, other variants and configs (the full library, libfusetune_capi.so,
// parses config keys and serves the rest). As the CUDA backend does, a persistent launch that
// may split its last round gets its workspace (the split partials and counters), and fusetune_time
// flushes L2 by reading 256 MiB before each timed launch and queues every timed launch before
// waiting for the first.
//
// Thread-safety: a handle is not thread-safe (one per thread), as in c_api.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fused/fused_instance.h"
#include "fused/persistent_tile_order.h"
#include "fusetune/base/median.h"
#include "fusetune/c_api.h"
#include "l2_flush.h"

#ifndef FUSETUNE_HOPPER_DEV_LABEL
#define FUSETUNE_HOPPER_DEV_LABEL "unlabelled"
#endif

struct fusetune_handle {
  int device = 0;
  int multiprocessors = 0;
  std::string description;
  void* flush = nullptr;  // L2 flush buffer, then a 4-byte sink
  float* split_partials = nullptr;
  int64_t split_partial_floats = 0;
  int32_t* split_counters = nullptr;  // zeroed when allocated; every launch leaves them zero
  int64_t split_counter_count = 0;
  std::vector<cudaEvent_t> events;
};

namespace {

namespace fused = fusetune::cuda::fused;

constexpr size_t kL2FlushBytes = size_t{256} << 20;  // the CUDA backend's flush: a read

// The C ABI's dtype and precision codes are the kernels' (as fusetune::DType and Precision).
static_assert(static_cast<int>(fused::StorageCode::kFp16) == FUSETUNE_FP16 &&
              static_cast<int>(fused::StorageCode::kBf16) == FUSETUNE_BF16);
static_assert(static_cast<int>(fused::PrecisionCode::kFp16) == FUSETUNE_PRECISION_FP16 &&
              static_cast<int>(fused::PrecisionCode::kBf16) == FUSETUNE_PRECISION_BF16);

int Fail(char* err, size_t errlen, int status, const std::string& message) {
  if (err != nullptr && errlen > 0) {
    const size_t n = std::min(errlen - 1, message.size());
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return status;
}

int CudaFail(char* err, size_t errlen, const char* what, cudaError_t e) {
  cudaGetLastError();  // clears a non-sticky error
  const int status = e == cudaErrorNotSupported ? FUSETUNE_UNIMPLEMENTED
                     : e == cudaErrorMemoryAllocation ? FUSETUNE_RESOURCE_EXHAUSTED
                     : e == cudaErrorInvalidValue || e == cudaErrorMisalignedAddress ? FUSETUNE_INVALID_ARGUMENT
                                                                                      : FUSETUNE_INTERNAL;
  return Fail(err, errlen, status, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// The Hopper instance of (problem, config), or nullptr with the reason in *why.
const fused::FusedInstance* FindInstance(const fusetune_problem& p, const fusetune_config& c, std::string* why) {
  if (c.variant != FUSETUNE_FUSED) {
    *why = "the Hopper dev library runs the fused variant only";
    return nullptr;
  }
  if (p.dtype != FUSETUNE_FP16 && p.dtype != FUSETUNE_BF16) {
    *why = "the Hopper kernels take fp16 or bf16 storage";
    return nullptr;
  }
  const fused::FusedInstanceList list =
      p.dtype == FUSETUNE_BF16 ? fused::WgmmaBf16Instances() : fused::WgmmaFp16Instances();
  for (int i = 0; i < list.size && c.split_kv == 1; ++i) {
    const fused::FusedInstance& in = list.data[i];
    if (in.Implements(p.head_dim, static_cast<fused::StorageCode>(p.dtype), static_cast<fused::PrecisionCode>(c.precision),
                      c.block_m, c.block_s, c.threads, c.stages, c.pingpong != 0, c.persistent != 0)) {
      return &in;
    }
  }
  *why = "no compiled Hopper instance has this head_dim, precision, block_m, block_s, threads, stages, "
         "pingpong and persistent (split_kv must be 1)";
  return nullptr;
}

// FUSETUNE_OK, or the status and reason why this library cannot run `p`.
int CheckProblem(const fusetune_problem* p, std::string* why) {
  if (p == nullptr) {
    *why = "problem is NULL";
    return FUSETUNE_INVALID_ARGUMENT;
  }
  if (p->batch <= 0 || p->q_heads <= 0 || p->kv_heads <= 0 || p->q_len <= 0 || p->kv_len <= 0 ||
      p->q_heads % p->kv_heads != 0 || (p->causal != 0 && p->causal != 1) || !(p->softmax_scale >= 0) ||
      !std::isfinite(p->softmax_scale)) {
    *why = "batch, heads and lengths must be positive, kv_heads divide q_heads, causal be 0 or 1 and the "
           "scale finite and >= 0";
    return FUSETUNE_INVALID_ARGUMENT;
  }
  if (p->cu_seqlens_q != nullptr || p->cu_seqlens_k != nullptr || p->kv_valid_lens != nullptr) {
    *why = "the Hopper dev library runs uniform batches only (no varlen, no key padding)";
    return FUSETUNE_UNIMPLEMENTED;
  }
  if (p->head_dim != 64 && p->head_dim != 128) {
    *why = "the Hopper kernels take head_dim 64 or 128";
    return FUSETUNE_UNIMPLEMENTED;
  }
  return FUSETUNE_OK;
}

fused::FusedKernelArgs ArgsOf(const fusetune_problem& p, const void* q, const void* k, const void* v, void* o) {
  fused::FusedKernelArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  // c_api.h: a softmax_scale of 0 means 1/sqrt(head_dim) (AttentionProblem::EffectiveScale).
  const float scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  fused::SetContiguousGeometry(a, p.batch, p.q_heads, p.kv_heads, p.head_dim, p.q_len, p.kv_len, p.causal, scale);
  a.heads_per_kv = p.q_heads / p.kv_heads;  // LaunchFused's part in the full library
  a.q_total_rows = static_cast<int64_t>(p.batch) * p.q_len;
  a.kv_total_rows = static_cast<int64_t>(p.batch) * p.kv_len;
  return a;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Makes *buffer hold at least `need` zeroed elements (reallocated, and zeroed once, when it grows;
// the split counters rely on staying zero between launches).
template <typename T>
cudaError_t Grow(T** buffer, int64_t* have, int64_t need) {
  if (need <= *have) return cudaSuccess;
  cudaFree(*buffer);
  *buffer = nullptr;
  *have = 0;
  if (cudaError_t e = cudaMalloc(buffer, need * sizeof(T)); e != cudaSuccess) return e;
  if (cudaError_t e = cudaMemset(*buffer, 0, need * sizeof(T)); e != cudaSuccess) return e;
  *have = need;
  return cudaSuccess;
}

// Checks, finds the instance and fills the arguments (the split workspace where the launch may
// split), or returns the failure.
int Prepare(fusetune_handle* h, const fusetune_problem* problem, const fusetune_config* config, const void* q,
            const void* k, const void* v, void* o, const fused::FusedInstance** inst, fused::FusedKernelArgs* args,
            char* err, size_t errlen) {
  if (h == nullptr || config == nullptr) return Fail(err, errlen, FUSETUNE_INVALID_ARGUMENT, "handle or config is NULL");
  std::string why;
  if (const int s = CheckProblem(problem, &why); s != FUSETUNE_OK) return Fail(err, errlen, s, why);
  *inst = FindInstance(*problem, *config, &why);
  if (*inst == nullptr) return Fail(err, errlen, FUSETUNE_UNIMPLEMENTED, why);
  if (q == nullptr || k == nullptr || v == nullptr || o == nullptr || !Aligned16(q) || !Aligned16(k) ||
      !Aligned16(v) || !Aligned16(o)) {
    return Fail(err, errlen, FUSETUNE_INVALID_ARGUMENT, "q, k, v and o must be 16-byte aligned device pointers");
  }
  if (cudaError_t e = cudaSetDevice(h->device); e != cudaSuccess) return CudaFail(err, errlen, "cudaSetDevice", e);
  *args = ArgsOf(*problem, q, k, v, o);
  if ((*inst)->split_tail) {
    const fused::SplitTail split =
        fused::SplitTail::ForLaunch(problem->q_len, problem->kv_len, problem->q_heads, problem->batch,
                                    problem->causal != 0, /*uniform=*/true, (*inst)->block_m, (*inst)->block_s,
                                    h->multiprocessors, (*inst)->tail_launch);
    const fused::SplitWorkspaceSize size = fused::SplitWorkspaceOf(split, (*inst)->threads, (*inst)->head_dim);
    if (cudaError_t e = Grow(&h->split_partials, &h->split_partial_floats, size.partial_floats); e != cudaSuccess) {
      return CudaFail(err, errlen, "the split partials", e);
    }
    if (cudaError_t e = Grow(&h->split_counters, &h->split_counter_count, size.counters); e != cudaSuccess) {
      return CudaFail(err, errlen, "the split counters", e);
    }
    args->split_partials = h->split_partials;
    args->split_partial_floats = h->split_partial_floats;
    args->split_counters = h->split_counters;
    args->split_counter_count = h->split_counter_count;
  }
  return FUSETUNE_OK;
}

}  // namespace

extern "C" {

int fusetune_api_version(void) { return FUSETUNE_C_API_VERSION; }


int fusetune_create(const char* backend, int device, fusetune_handle** out, char* err, size_t errlen) {
  if (out == nullptr) return Fail(err, errlen, FUSETUNE_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  if (backend == nullptr || std::strcmp(backend, "cuda") != 0) {
    return Fail(err, errlen, FUSETUNE_NOT_FOUND, "the Hopper dev library has the \"cuda\" backend only");
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return Fail(err, errlen, FUSETUNE_UNAVAILABLE, "no CUDA device " + std::to_string(device));
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return CudaFail(err, errlen, "cudaSetDevice", e);
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return CudaFail(err, errlen, "cudaGetDeviceProperties", e);
  }
  if (prop.major != 9) {
    return Fail(err, errlen, FUSETUNE_UNAVAILABLE,
                std::string(prop.name) + " is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                    ": the Hopper kernels need sm_90");
  }
  auto* h = new fusetune_handle;
  h->device = device;
  h->multiprocessors = prop.multiProcessorCount;
  char text[512];
  std::snprintf(text, sizeof(text), "%s (sm_%d%d, %d SMs, %.1f GiB) — Hopper dev library \"%s\"", prop.name,
                prop.major, prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30), FUSETUNE_HOPPER_DEV_LABEL);
  h->description = text;
  *out = h;
  return FUSETUNE_OK;
}

void fusetune_destroy(fusetune_handle* handle) {
  if (handle == nullptr) return;
  cudaSetDevice(handle->device);
  for (cudaEvent_t e : handle->events) cudaEventDestroy(e);
  cudaFree(handle->flush);
  cudaFree(handle->split_partials);
  cudaFree(handle->split_counters);
  delete handle;
}

int fusetune_describe(fusetune_handle* handle, char* buf, size_t buflen) {
  if (handle == nullptr) return Fail(buf, buflen, FUSETUNE_INVALID_ARGUMENT, "handle is NULL");
  Fail(buf, buflen, FUSETUNE_OK, handle->description);
  return FUSETUNE_OK;
}

int fusetune_can_implement(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_config* config,
                           char* err, size_t errlen) {
  if (handle == nullptr || config == nullptr) return Fail(err, errlen, FUSETUNE_INVALID_ARGUMENT, "handle or config is NULL");
  std::string why;
  if (const int s = CheckProblem(problem, &why); s != FUSETUNE_OK) return Fail(err, errlen, s, why);
  if (FindInstance(*problem, *config, &why) == nullptr) return Fail(err, errlen, FUSETUNE_UNIMPLEMENTED, why);
  return FUSETUNE_OK;
}

int fusetune_run(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_config* config,
                 const void* q, const void* k, const void* v, void* o, char* err, size_t errlen) {
  const fused::FusedInstance* inst = nullptr;
  fused::FusedKernelArgs args;
  if (const int s = Prepare(handle, problem, config, q, k, v, o, &inst, &args, err, errlen); s != FUSETUNE_OK) return s;
  if (cudaError_t e = inst->launch(args, /*stream=*/0); e != cudaSuccess) return CudaFail(err, errlen, "launch", e);
  if (cudaError_t e = cudaStreamSynchronize(0); e != cudaSuccess) return CudaFail(err, errlen, "after the launch", e);
  return FUSETUNE_OK;
}

int fusetune_time(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_config* config,
                  const void* q, const void* k, const void* v, void* o, int warmup, int repeats, double max_seconds,
                  int flush_l2, double* median_us, double* samples_us, int capacity, int* count, char* err,
                  size_t errlen) {
  if (median_us == nullptr || count == nullptr || warmup < 0 || repeats < 1 || !(max_seconds > 0) ||
      (capacity > 0 && samples_us == nullptr)) {
    return Fail(err, errlen, FUSETUNE_INVALID_ARGUMENT,
                "median_us and count must be set, warmup >= 0, repeats >= 1, max_seconds > 0");
  }
  const fused::FusedInstance* inst = nullptr;
  fused::FusedKernelArgs args;
  if (const int s = Prepare(handle, problem, config, q, k, v, o, &inst, &args, err, errlen); s != FUSETUNE_OK) return s;
  if (flush_l2 != 0 && handle->flush == nullptr) {
    if (cudaError_t e = cudaMalloc(&handle->flush, kL2FlushBytes + 64); e != cudaSuccess) {
      return CudaFail(err, errlen, "the L2 flush buffer", e);
    }
    if (cudaError_t e = cudaMemset(handle->flush, 1, kL2FlushBytes + 64); e != cudaSuccess) {
      return CudaFail(err, errlen, "filling the L2 flush buffer", e);
    }
  }
  // Warm-up, timed on the host to bound the timed launches by max_seconds (at least 3): they are
  // queued all at once.
  const auto warm_begin = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i) {
    if (cudaError_t e = inst->launch(args, 0); e != cudaSuccess) return CudaFail(err, errlen, "warm-up launch", e);
  }
  if (cudaError_t e = cudaStreamSynchronize(0); e != cudaSuccess) return CudaFail(err, errlen, "warm-up", e);
  int n = repeats;
  if (warmup > 0) {
    const double per_launch =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - warm_begin).count() / warmup;
    if (per_launch > 0) n = std::clamp(static_cast<int>(max_seconds / per_launch), std::min(3, repeats), repeats);
  }
  while (static_cast<int>(handle->events.size()) < 2 * n) {
    cudaEvent_t e;
    if (cudaError_t c = cudaEventCreate(&e); c != cudaSuccess) return CudaFail(err, errlen, "cudaEventCreate", c);
    handle->events.push_back(e);
  }
  uint32_t* sink =
      handle->flush == nullptr ? nullptr : reinterpret_cast<uint32_t*>(static_cast<char*>(handle->flush) + kL2FlushBytes);
  for (int i = 0; i < n; ++i) {
    if (flush_l2 != 0) {
      if (cudaError_t e = fusetune::cuda::EnqueueL2FlushByReading(handle->flush, kL2FlushBytes, sink,
                                                                  handle->multiprocessors, 0);
          e != cudaSuccess) {
        return CudaFail(err, errlen, "L2 flush", e);
      }
    }
    if (cudaError_t e = cudaEventRecord(handle->events[2 * i], 0); e != cudaSuccess) return CudaFail(err, errlen, "cudaEventRecord", e);
    if (cudaError_t e = inst->launch(args, 0); e != cudaSuccess) return CudaFail(err, errlen, "timed launch", e);
    if (cudaError_t e = cudaEventRecord(handle->events[2 * i + 1], 0); e != cudaSuccess) {
      return CudaFail(err, errlen, "cudaEventRecord", e);
    }
  }
  if (cudaError_t e = cudaEventSynchronize(handle->events[2 * n - 1]); e != cudaSuccess) {
    return CudaFail(err, errlen, "timed launches", e);
  }
  std::vector<double> samples(n);
  for (int i = 0; i < n; ++i) {
    float ms = 0;
    if (cudaError_t e = cudaEventElapsedTime(&ms, handle->events[2 * i], handle->events[2 * i + 1]); e != cudaSuccess) {
      return CudaFail(err, errlen, "cudaEventElapsedTime", e);
    }
    samples[i] = 1000.0 * ms;
  }
  for (int i = 0; i < n && i < capacity; ++i) samples_us[i] = samples[i];
  *count = std::min(n, std::max(capacity, 0));
  *median_us = fusetune::Median(samples);
  return FUSETUNE_OK;
}

}  // extern "C"
