// The C ABI over fusetune::Backend: converts C structs to AttentionProblem/KernelConfig,
// Status to codes + messages, and catches every C++ exception at the boundary.
#include "fusetune/c_api.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "c_api_internal.h"
#include "fusetune/base/median.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/default_config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/kernels/reference.h"

struct fusetune_handle {
  std::unique_ptr<fusetune::Backend> backend;
  bool graph_timing = false;  // fusetune_use_graph_timing: the time calls ask for graph-timed blocks
};

namespace fusetune::capi {

void WriteMessage(std::string_view message, char* err, size_t errlen) {
  if (err == nullptr || errlen == 0) return;
  const size_t n = std::min(message.size(), errlen - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

int Report(const absl::Status& s, char* err, size_t errlen) {
  WriteMessage(s.ok() ? std::string_view() : std::string_view(s.message().data(), s.message().size()),
               err, errlen);
  switch (s.code()) {
    case absl::StatusCode::kOk: return FUSETUNE_OK;
    case absl::StatusCode::kInvalidArgument: return FUSETUNE_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound: return FUSETUNE_NOT_FOUND;
    case absl::StatusCode::kPermissionDenied: return FUSETUNE_PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted: return FUSETUNE_RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return FUSETUNE_FAILED_PRECONDITION;
    case absl::StatusCode::kUnimplemented: return FUSETUNE_UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return FUSETUNE_INTERNAL;
    case absl::StatusCode::kUnavailable: return FUSETUNE_UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return FUSETUNE_DATA_LOSS;
    default: return FUSETUNE_UNKNOWN;
  }
}

}  // namespace fusetune::capi

namespace {

using fusetune::AttentionProblem;
using fusetune::KernelConfig;
using fusetune::capi::Guard;
using fusetune::capi::Report;
using fusetune::capi::WriteMessage;

// Copies `text` with its NUL into key[0..keylen); InvalidArgument, writing nothing, when it does
// not fit (a truncated key would silently name another problem).
absl::Status WriteKey(const std::string& text, char* key, size_t keylen) {
  if (key == nullptr) return absl::InvalidArgumentError("key buffer is NULL");
  if (text.size() + 1 > keylen) {
    return absl::InvalidArgumentError(absl::StrCat("key buffer of ", keylen, " bytes is too small for the ",
                                                   text.size() + 1, " bytes of the key and its NUL"));
  }
  std::memcpy(key, text.c_str(), text.size() + 1);
  return absl::OkStatus();
}

// The C ABI's FUSETUNE_FP32/FP16/BF16 as a storage dtype; InvalidArgument for any other value.
absl::StatusOr<fusetune::DType> DTypeFromC(int dtype) {
  switch (dtype) {
    case FUSETUNE_FP32: return fusetune::DType::kFp32;
    case FUSETUNE_FP16: return fusetune::DType::kFp16;
    case FUSETUNE_BF16: return fusetune::DType::kBf16;
    default: return absl::InvalidArgumentError("dtype must be FUSETUNE_FP32, FP16 or BF16");
  }
}

// The C ABI's FUSETUNE_PRECISION_* as a precision; InvalidArgument for any other value.
absl::StatusOr<fusetune::Precision> PrecisionFromC(int precision) {
  switch (precision) {
    case FUSETUNE_PRECISION_FP32: return fusetune::Precision::kFp32;
    case FUSETUNE_PRECISION_TF32: return fusetune::Precision::kTf32;
    case FUSETUNE_PRECISION_FP16: return fusetune::Precision::kFp16;
    case FUSETUNE_PRECISION_BF16: return fusetune::Precision::kBf16;
    default: return absl::InvalidArgumentError("precision must be one of FUSETUNE_PRECISION_*");
  }
}

// `cache` (may be NULL: a contiguous prefill) adds the kind and the paged-cache fields, `quant`
// (may be NULL: K/V in the problem's dtype) the K/V storage.
absl::Status ToProblem(const fusetune_problem* in, const fusetune_kv_cache* cache, const fusetune_kv_quant* quant,
                       AttentionProblem* out) {
  if (in == nullptr) return absl::InvalidArgumentError("problem is NULL");
  AttentionProblem p;
  if (quant != nullptr) {
    if (quant->storage != FUSETUNE_KV_DTYPE && quant->storage != FUSETUNE_KV_E4M3) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv_quant.storage must be FUSETUNE_KV_DTYPE or FUSETUNE_KV_E4M3, got ", quant->storage));
    }
    if (quant->storage == FUSETUNE_KV_E4M3) p.kv_storage = fusetune::KvStorage::kE4m3;
  }
  if (cache != nullptr) {
    if (cache->decode != 0 && cache->decode != 1) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache.decode must be 0 or 1, got ", cache->decode));
    }
    p.kind = cache->decode == 1 ? fusetune::ProblemKind::kDecode : fusetune::ProblemKind::kPrefill;
    p.page_block_size = cache->page_block_size;
    p.kv_pool_pages = cache->pool_pages;
    p.block_table_width = cache->block_table_width;
    p.shared_prefix_pages = cache->shared_prefix_pages;
  }
  p.batch = in->batch;
  p.q_heads = in->q_heads;
  p.kv_heads = in->kv_heads;
  p.q_len = in->q_len;
  p.kv_len = in->kv_len;
  p.head_dim = in->head_dim;
  if (in->causal != 0 && in->causal != 1) {
    return absl::InvalidArgumentError(absl::StrCat("causal must be 0 or 1, got ", in->causal));
  }
  p.causal = in->causal == 1;
  absl::StatusOr<fusetune::DType> dtype = DTypeFromC(in->dtype);
  if (!dtype.ok()) return dtype.status();
  p.dtype = *dtype;
  p.softmax_scale = in->softmax_scale;
  // The batch bounds come first: the length arrays are read with `batch` entries.
  if (in->batch < 1 || in->batch > fusetune::kMaxBatch) {
    return absl::InvalidArgumentError("batch out of range");
  }
  const size_t n = static_cast<size_t>(in->batch);
  if ((in->cu_seqlens_q == nullptr) != (in->cu_seqlens_k == nullptr)) {
    return absl::InvalidArgumentError("cu_seqlens_q and cu_seqlens_k must both be set or both NULL");
  }
  if (in->cu_seqlens_q != nullptr) {
    p.cu_seqlens_q.assign(in->cu_seqlens_q, in->cu_seqlens_q + n + 1);
    p.cu_seqlens_k.assign(in->cu_seqlens_k, in->cu_seqlens_k + n + 1);
  }
  if (in->kv_valid_lens != nullptr) p.kv_valid_lens.assign(in->kv_valid_lens, in->kv_valid_lens + n);
  if (auto s = p.Validate(); !s.ok()) return s;
  *out = std::move(p);
  return absl::OkStatus();
}

absl::Status ToConfig(const fusetune_config* in, KernelConfig* out) {
  if (in == nullptr) return absl::InvalidArgumentError("config is NULL");
  KernelConfig c;
  switch (in->variant) {
    case FUSETUNE_FUSED: c.variant = fusetune::Variant::kFused; break;
    case FUSETUNE_PARTIAL: c.variant = fusetune::Variant::kPartial; break;
    case FUSETUNE_MATERIALIZED: c.variant = fusetune::Variant::kMaterialized; break;
    default: return absl::InvalidArgumentError("variant must be FUSETUNE_FUSED, PARTIAL or MATERIALIZED");
  }
  absl::StatusOr<fusetune::Precision> precision = PrecisionFromC(in->precision);
  if (!precision.ok()) return precision.status();
  c.precision = *precision;
  c.block_m = in->block_m;
  c.block_s = in->block_s;
  c.threads = in->threads;
  c.stages = in->stages;
  c.split_kv = in->split_kv;
  if ((in->pingpong != 0 && in->pingpong != 1) || (in->persistent != 0 && in->persistent != 1)) {
    return absl::InvalidArgumentError("pingpong and persistent must be 0 or 1");
  }
  c.pingpong = in->pingpong == 1;
  c.persistent = in->persistent == 1;
  if (auto s = c.Validate(); !s.ok()) return s;
  *out = c;
  return absl::OkStatus();
}

fusetune_config FromConfig(const KernelConfig& c) {
  fusetune_config out;
  out.variant = c.variant == fusetune::Variant::kFused     ? FUSETUNE_FUSED
                : c.variant == fusetune::Variant::kPartial ? FUSETUNE_PARTIAL
                                                           : FUSETUNE_MATERIALIZED;
  out.precision = static_cast<int32_t>(c.precision);  // enum orders match
  out.block_m = c.block_m;
  out.block_s = c.block_s;
  out.threads = c.threads;
  out.stages = c.stages;
  out.split_kv = c.split_kv;
  out.pingpong = c.pingpong ? 1 : 0;
  out.persistent = c.persistent ? 1 : 0;
  return out;
}

absl::Status CheckHandle(const fusetune_handle* h) {
  if (h == nullptr || h->backend == nullptr) return absl::InvalidArgumentError("handle is NULL");
  return absl::OkStatus();
}

// What every call about one (problem, config) checks first: a live handle, then the problem and
// the config converted (and validated) from their C structs.
absl::Status PrepareCall(const fusetune_handle* h, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                         const fusetune_kv_quant* quant, const fusetune_config* config, AttentionProblem* p,
                         KernelConfig* c) {
  if (auto s = CheckHandle(h); !s.ok()) return s;
  if (auto s = ToProblem(problem, cache, quant, p); !s.ok()) return s;
  return ToConfig(config, c);
}

// The tensors of a run, all required, the block table of a paged cache and the scales of e4m3
// K/V (null otherwise).
absl::StatusOr<fusetune::AttentionBuffers> ToBuffers(const AttentionProblem& p, const fusetune_kv_cache* cache,
                                                     const fusetune_kv_quant* quant, const void* q, const void* k,
                                                     const void* v, void* o) {
  fusetune::AttentionBuffers buffers{q, k, v, o, cache == nullptr ? nullptr : cache->block_table};
  if (quant != nullptr) {
    buffers.k_scale = quant->k_scale;
    buffers.v_scale = quant->v_scale;
  }
  if (auto s = fusetune::ValidateBuffers(p, buffers); !s.ok()) return s;
  return buffers;
}

absl::Status CanImplementCall(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                              const fusetune_kv_quant* quant, const fusetune_config* config) {
  AttentionProblem p;
  KernelConfig c;
  if (auto s = PrepareCall(handle, problem, cache, quant, config, &p, &c); !s.ok()) return s;
  return handle->backend->CanImplement(p, c);
}

absl::Status RunCall(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                     const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                     const void* v, void* o) {
  AttentionProblem p;
  KernelConfig c;
  if (auto s = PrepareCall(handle, problem, cache, quant, config, &p, &c); !s.ok()) return s;
  absl::StatusOr<fusetune::AttentionBuffers> buffers = ToBuffers(p, cache, quant, q, k, v, o);
  if (!buffers.ok()) return buffers.status();
  return handle->backend->Run(p, c, *buffers);
}

struct TimeRequest {
  int warmup, repeats;
  double max_seconds;
  int flush_l2;
  double* median_us;
  double* samples_us;
  int capacity;
  int* count;
};

absl::Status TimeCall(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                      const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                      const void* v, void* o, const TimeRequest& r) {
  AttentionProblem p;
  KernelConfig c;
  if (auto s = PrepareCall(handle, problem, cache, quant, config, &p, &c); !s.ok()) return s;
  absl::StatusOr<fusetune::AttentionBuffers> buffers = ToBuffers(p, cache, quant, q, k, v, o);
  if (!buffers.ok()) return buffers.status();
  if (r.median_us == nullptr) return absl::InvalidArgumentError("median_us is NULL");
  if (r.capacity > 0 && (r.samples_us == nullptr || r.count == nullptr)) {
    return absl::InvalidArgumentError("samples_us and count must be non-NULL when capacity > 0");
  }
  fusetune::TimingOptions opt;
  opt.warmup = r.warmup;
  opt.repeats = r.repeats;
  opt.max_seconds = r.max_seconds;
  opt.flush_l2 = r.flush_l2 != 0;
  opt.graph = handle->graph_timing;
  auto t = handle->backend->Time(p, c, *buffers, opt);
  if (!t.ok()) return t.status();
  const size_t n = t->micros.size();
  *r.median_us = n == 0 ? 0.0 : fusetune::Median(t->micros);
  if (r.count != nullptr) *r.count = 0;
  for (size_t i = 0; i < n && static_cast<int>(i) < r.capacity; ++i) {
    r.samples_us[i] = t->micros[i];
    *r.count = static_cast<int>(i) + 1;
  }
  return absl::OkStatus();
}

absl::Status RunOnStreamCall(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                             const fusetune_kv_quant* quant, const fusetune_config* config, const void* q,
                             const void* k, const void* v, void* o, const fusetune_launch* launch) {
  AttentionProblem p;
  KernelConfig c;
  if (auto s = PrepareCall(handle, problem, cache, quant, config, &p, &c); !s.ok()) return s;
  absl::StatusOr<fusetune::AttentionBuffers> buffers = ToBuffers(p, cache, quant, q, k, v, o);
  if (!buffers.ok()) return buffers.status();
  fusetune::StreamLaunch on;
  if (launch != nullptr) {
    on.stream = launch->stream;
    on.cu_seqlens_q = launch->cu_seqlens_q;
    on.cu_seqlens_k = launch->cu_seqlens_k;
    on.kv_valid_lens = launch->kv_valid_lens;
  }
  return handle->backend->RunOnStream(p, c, *buffers, on);
}

}  // namespace

extern "C" {

int fusetune_api_version(void) { return FUSETUNE_C_API_VERSION; }


int fusetune_create(const char* backend, int device, fusetune_handle** out, char* err,
                    size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    if (backend == nullptr) return absl::InvalidArgumentError("backend name is NULL");
    auto b = fusetune::CreateBackend(backend, device);
    if (!b.ok()) return b.status();
    *out = new fusetune_handle{*std::move(b)};
    return absl::OkStatus();
  });
}

void fusetune_destroy(fusetune_handle* handle) {
  try {
    delete handle;
  } catch (...) {
  }
}

int fusetune_describe(fusetune_handle* handle, char* buf, size_t buflen) {
  return Guard(nullptr, 0, [&]() -> absl::Status {
    if (auto s = CheckHandle(handle); !s.ok()) return s;
    const fusetune::DeviceInfo d = handle->backend->Describe();
    const std::string line = d.DeviceClass() + " | " + std::to_string(d.sm_count) + " SMs | smem/block " +
                             std::to_string(d.shared_mem_per_block) + " | L2 " + std::to_string(d.l2_bytes) +
                             " | memory " + std::to_string(d.memory_bytes) + " | " + d.driver +
                             " | max clock " + std::to_string(d.max_clock_mhz) + " MHz";
    WriteMessage(line, buf, buflen);
    return absl::OkStatus();
  });
}

int fusetune_config_from_key(const char* key, fusetune_config* out, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (key == nullptr || out == nullptr) return absl::InvalidArgumentError("key and out must be non-NULL");
    auto c = KernelConfig::FromKey(key);
    if (!c.ok()) return c.status();
    *out = FromConfig(*c);
    return absl::OkStatus();
  });
}

int fusetune_can_implement(fusetune_handle* handle, const fusetune_problem* problem,
                           const fusetune_config* config, char* err, size_t errlen) {
  return Guard(err, errlen, [&] { return CanImplementCall(handle, problem, nullptr, nullptr, config); });
}

int fusetune_can_implement_kv_cache(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_config* config, char* err,
                                    size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (cache == nullptr) return absl::InvalidArgumentError("kv_cache is NULL");
    return CanImplementCall(handle, problem, cache, nullptr, config);
  });
}

int fusetune_run(fusetune_handle* handle, const fusetune_problem* problem,
                 const fusetune_config* config, const void* q, const void* k, const void* v,
                 void* o, char* err, size_t errlen) {
  return Guard(err, errlen, [&] { return RunCall(handle, problem, nullptr, nullptr, config, q, k, v, o); });
}

int fusetune_run_kv_cache(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                          const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                          char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (cache == nullptr) return absl::InvalidArgumentError("kv_cache is NULL");
    return RunCall(handle, problem, cache, nullptr, config, q, k, v, o);
  });
}

int fusetune_run_on_stream(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                           const fusetune_launch* launch, char* err, size_t errlen) {
  return Guard(err, errlen, [&] { return RunOnStreamCall(handle, problem, cache, nullptr, config, q, k, v, o, launch); });
}

int fusetune_problem_validate(const fusetune_problem* problem, const fusetune_kv_cache* cache, char* err,
                              size_t errlen) {
  return Guard(err, errlen, [&] {
    AttentionProblem p;
    return ToProblem(problem, cache, nullptr, &p);
  });
}

int fusetune_problem_key(const fusetune_problem* problem, const fusetune_kv_cache* cache, char* key,
                         size_t keylen, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    AttentionProblem p;
    if (auto s = ToProblem(problem, cache, nullptr, &p); !s.ok()) return s;
    return WriteKey(p.Key(), key, keylen);
  });
}

int fusetune_config_key(const fusetune_config* config, char* key, size_t keylen, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    KernelConfig c;
    if (auto s = ToConfig(config, &c); !s.ok()) return s;
    return WriteKey(c.Key(), key, keylen);
  });
}

int fusetune_default_config(const char* device_class, const fusetune_problem* problem,
                            const fusetune_kv_cache* cache, fusetune_config* out, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    AttentionProblem p;
    if (auto s = ToProblem(problem, cache, nullptr, &p); !s.ok()) return s;
    *out = FromConfig(fusetune::DefaultConfigOfDeviceClass(device_class == nullptr ? "" : device_class, p));
    return absl::OkStatus();
  });
}

int fusetune_tolerance(int precision, int dtype, double* tolerance) {
  return Guard(nullptr, 0, [&]() -> absl::Status {
    if (tolerance == nullptr) return absl::InvalidArgumentError("tolerance is NULL");
    absl::StatusOr<fusetune::Precision> p = PrecisionFromC(precision);
    if (!p.ok()) return p.status();
    absl::StatusOr<fusetune::DType> d = DTypeFromC(dtype);
    if (!d.ok()) return d.status();
    *tolerance = fusetune::ToleranceFor(*p, *d);
    return absl::OkStatus();
  });
}

int fusetune_seed_problems(fusetune_problem* out, size_t capacity, size_t* count) {
  return Guard(nullptr, 0, [&]() -> absl::Status {
    if (count == nullptr) return absl::InvalidArgumentError("count is NULL");
    if (out == nullptr && capacity > 0) return absl::InvalidArgumentError("out is NULL");
    const std::vector<AttentionProblem> seed = fusetune::SeedPresetProblems();
    for (size_t i = 0; i < seed.size() && i < capacity; ++i) {
      // A seed shape is a contiguous prefill: no length arrays, no KV cache.
      fusetune_problem p{};
      p.batch = seed[i].batch;
      p.q_heads = seed[i].q_heads;
      p.kv_heads = seed[i].kv_heads;
      p.q_len = seed[i].q_len;
      p.kv_len = seed[i].kv_len;
      p.head_dim = seed[i].head_dim;
      p.causal = seed[i].causal ? 1 : 0;
      p.dtype = static_cast<int32_t>(seed[i].dtype);  // enum orders match
      p.softmax_scale = seed[i].softmax_scale;
      out[i] = p;
    }
    *count = seed.size();
    return absl::OkStatus();
  });
}

int fusetune_device_class(fusetune_handle* handle, char* buf, size_t buflen) {
  return Guard(nullptr, 0, [&]() -> absl::Status {
    if (auto s = CheckHandle(handle); !s.ok()) return s;
    return WriteKey(handle->backend->Describe().DeviceClass(), buf, buflen);
  });
}

int fusetune_time(fusetune_handle* handle, const fusetune_problem* problem,
                  const fusetune_config* config, const void* q, const void* k, const void* v,
                  void* o, int warmup, int repeats, double max_seconds, int flush_l2,
                  double* median_us, double* samples_us, int capacity, int* count, char* err,
                  size_t errlen) {
  return Guard(err, errlen, [&] {
    return TimeCall(handle, problem, nullptr, nullptr, config, q, k, v, o,
                    {warmup, repeats, max_seconds, flush_l2, median_us, samples_us, capacity, count});
  });
}

int fusetune_time_kv_cache(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                           int warmup, int repeats, double max_seconds, int flush_l2, double* median_us,
                           double* samples_us, int capacity, int* count, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (cache == nullptr) return absl::InvalidArgumentError("kv_cache is NULL");
    return TimeCall(handle, problem, cache, nullptr, config, q, k, v, o,
                    {warmup, repeats, max_seconds, flush_l2, median_us, samples_us, capacity, count});
  });
}

int fusetune_can_implement_kv_quant(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_kv_quant* quant,
                                    const fusetune_config* config, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (quant == nullptr) return absl::InvalidArgumentError("kv_quant is NULL");
    return CanImplementCall(handle, problem, cache, quant, config);
  });
}

int fusetune_run_kv_quant(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                          const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                          const void* v, void* o, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (quant == nullptr) return absl::InvalidArgumentError("kv_quant is NULL");
    return RunCall(handle, problem, cache, quant, config, q, k, v, o);
  });
}

int fusetune_time_kv_quant(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_kv_quant* quant, const fusetune_config* config, const void* q, const void* k,
                           const void* v, void* o, int warmup, int repeats, double max_seconds, int flush_l2,
                           double* median_us, double* samples_us, int capacity, int* count, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (quant == nullptr) return absl::InvalidArgumentError("kv_quant is NULL");
    return TimeCall(handle, problem, cache, quant, config, q, k, v, o,
                    {warmup, repeats, max_seconds, flush_l2, median_us, samples_us, capacity, count});
  });
}

int fusetune_run_on_stream_kv_quant(fusetune_handle* handle, const fusetune_problem* problem,
                                    const fusetune_kv_cache* cache, const fusetune_kv_quant* quant,
                                    const fusetune_config* config, const void* q, const void* k, const void* v, void* o,
                                    const fusetune_launch* launch, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (quant == nullptr) return absl::InvalidArgumentError("kv_quant is NULL");
    return RunOnStreamCall(handle, problem, cache, quant, config, q, k, v, o, launch);
  });
}

int fusetune_problem_key_kv_quant(const fusetune_problem* problem, const fusetune_kv_cache* cache,
                                  const fusetune_kv_quant* quant, char* key, size_t keylen, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (quant == nullptr) return absl::InvalidArgumentError("kv_quant is NULL");
    AttentionProblem p;
    if (auto s = ToProblem(problem, cache, quant, &p); !s.ok()) return s;
    return WriteKey(p.Key(), key, keylen);
  });
}

int fusetune_scratch_bytes(fusetune_handle* handle, const fusetune_problem* problem, const fusetune_kv_cache* cache,
                           const fusetune_kv_quant* quant, const fusetune_config* config, size_t* bytes, char* err,
                           size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (bytes == nullptr) return absl::InvalidArgumentError("bytes is NULL");
    AttentionProblem p;
    KernelConfig c;
    if (auto s = PrepareCall(handle, problem, cache, quant, config, &p, &c); !s.ok()) return s;
    absl::StatusOr<size_t> need = handle->backend->ScratchBytes(p, c);
    if (!need.ok()) return need.status();
    *bytes = *need;
    return absl::OkStatus();
  });
}

int fusetune_use_workers(fusetune_handle* handle, const fusetune_workers* workers, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckHandle(handle); !s.ok()) return s;
    if (workers == nullptr) return handle->backend->UseWorkers(nullptr);
    fusetune::WorkerPool pool;
    pool.context = workers->context;
    pool.parallel_for = workers->parallel_for;
    return handle->backend->UseWorkers(&pool);
  });
}

int fusetune_use_scratch_arena(fusetune_handle* handle, void* base, size_t bytes, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckHandle(handle); !s.ok()) return s;
    return handle->backend->UseScratchArena(base, bytes);
  });
}

int fusetune_use_graph_timing(fusetune_handle* handle, int on, char* err, size_t errlen) {
  return Guard(err, errlen, [&]() -> absl::Status {
    if (auto s = CheckHandle(handle); !s.ok()) return s;
    if (!handle->backend->TakesGraphTiming()) {
      handle->graph_timing = false;
      return absl::UnimplementedError(absl::StrCat(
          "the ", handle->backend->Describe().backend,
          " backend does not time blocks through a CUDA graph (cuda only)"));
    }
    handle->graph_timing = on != 0;
    return absl::OkStatus();
  });
}

}  // extern "C"
