#include "fusetune/regress/capi_backend.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fusetune/c_api.h"

namespace fusetune::regress {
namespace {

// The C ABI versions this build calls: its own, and 1. Version 2 only appended pingpong and
// persistent to fusetune_config, and the adapter only hands configs to the library
// (fusetune_can_implement, fusetune_run and fusetune_time read them; it calls nothing that
// writes one), so a version-1 library reads the first seven fields of the same struct as its
// own config. The next version must decide again which older ones stay callable.
static_assert(FUSETUNE_C_API_VERSION == 2, "decide which older C ABI versions the adapter can still call");
bool Callable(int version) { return version == 1 || version == FUSETUNE_C_API_VERSION; }

// The library's entry points this adapter calls, resolved once.
struct CapiFunctions {
  decltype(&fusetune_api_version) api_version = nullptr;
  decltype(&fusetune_create) create = nullptr;
  decltype(&fusetune_destroy) destroy = nullptr;
  decltype(&fusetune_can_implement) can_implement = nullptr;
  decltype(&fusetune_run) run = nullptr;
  decltype(&fusetune_time) time = nullptr;
};

// A fusetune_status code as the absl status of the same value (the ABI's codes equal absl's).
absl::Status FromCapi(int code, const char* err) {
  if (code == FUSETUNE_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat("C ABI library: ", err));
}

// A problem as the ABI's struct; the length arrays point into `problem`, which must outlive it.
fusetune_problem ToCapi(const AttentionProblem& p) {
  fusetune_problem out{};
  out.batch = p.batch;
  out.q_heads = p.q_heads;
  out.kv_heads = p.kv_heads;
  out.q_len = p.q_len;
  out.kv_len = p.kv_len;
  out.head_dim = p.head_dim;
  out.causal = p.causal ? 1 : 0;
  out.dtype = p.dtype == DType::kFp32 ? FUSETUNE_FP32 : p.dtype == DType::kFp16 ? FUSETUNE_FP16 : FUSETUNE_BF16;
  out.softmax_scale = p.softmax_scale;
  out.cu_seqlens_q = p.cu_seqlens_q.empty() ? nullptr : p.cu_seqlens_q.data();
  out.cu_seqlens_k = p.cu_seqlens_k.empty() ? nullptr : p.cu_seqlens_k.data();
  out.kv_valid_lens = p.kv_valid_lens.empty() ? nullptr : p.kv_valid_lens.data();
  return out;
}

fusetune_config ToCapi(const KernelConfig& c) {
  fusetune_config out{};
  out.variant = c.variant == Variant::kFused     ? FUSETUNE_FUSED
                : c.variant == Variant::kPartial ? FUSETUNE_PARTIAL
                                                 : FUSETUNE_MATERIALIZED;
  switch (c.precision) {
    case Precision::kFp32: out.precision = FUSETUNE_PRECISION_FP32; break;
    case Precision::kTf32: out.precision = FUSETUNE_PRECISION_TF32; break;
    case Precision::kFp16: out.precision = FUSETUNE_PRECISION_FP16; break;
    case Precision::kBf16: out.precision = FUSETUNE_PRECISION_BF16; break;
  }
  out.block_m = c.block_m;
  out.block_s = c.block_s;
  out.threads = c.threads;
  out.stages = c.stages;
  out.split_kv = c.split_kv;
  out.pingpong = c.pingpong ? 1 : 0;
  out.persistent = c.persistent ? 1 : 0;
  return out;
}

class CapiBackend : public Backend {
 public:
  CapiBackend(void* library, CapiFunctions f, int version, fusetune_handle* handle, std::unique_ptr<Backend> memory)
      : library_(library), f_(f), version_(version), handle_(handle), memory_(std::move(memory)) {}
  ~CapiBackend() override {
    f_.destroy(handle_);
    // The library stays loaded: a CUDA runtime inside it may still run exit handlers.
    (void)library_;
  }

  DeviceInfo Describe() const override { return memory_->Describe(); }

  absl::Status CanImplement(const AttentionProblem& problem, const KernelConfig& config) const override {
    if (auto s = Representable(version_, problem, config); !s.ok()) return s;
    // The library cannot see the token: it is read before each call into it.
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const fusetune_problem p = ToCapi(problem);
    const fusetune_config c = ToCapi(config);
    char err[512] = "";
    return FromCapi(f_.can_implement(handle_, &p, &c, err, sizeof err), err);
  }

  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem&) const override { return {}; }

  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = Representable(version_, problem, config); !s.ok()) return s;
    // The library cannot see the token: it is read before each call into it.
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const fusetune_problem p = ToCapi(problem);
    const fusetune_config c = ToCapi(config);
    char err[512] = "";
    return FromCapi(f_.run(handle_, &p, &c, buffers.q, buffers.k, buffers.v, buffers.o, err, sizeof err), err);
  }

  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers, const TimingOptions& options) override {
    if (auto s = Representable(version_, problem, config); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const fusetune_problem p = ToCapi(problem);
    const fusetune_config c = ToCapi(config);
    std::vector<double> samples(static_cast<size_t>(std::max(options.repeats, 1)));
    double median = 0;
    int count = 0;
    char err[512] = "";
    const int code = f_.time(handle_, &p, &c, buffers.q, buffers.k, buffers.v, buffers.o, options.warmup,
                             options.repeats, options.max_seconds, options.flush_l2 ? 1 : 0, &median, samples.data(),
                             static_cast<int>(samples.size()), &count, err, sizeof err);
    if (auto s = FromCapi(code, err); !s.ok()) return s;
    TimingSamples t;
    t.micros.assign(samples.begin(), samples.begin() + std::clamp(count, 0, static_cast<int>(samples.size())));
    return t;
  }

  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override { return memory_->Allocate(bytes); }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return memory_->CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return memory_->CopyToHost(dst, src, bytes);
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes) override { return memory_->Fill(dst, value, bytes); }

 private:
  // What the library's C ABI version cannot express. The first two hold for every version: the
  // adapter calls only version 1's first functions, which every library has.
  static absl::Status Representable(int version, const AttentionProblem& problem, const KernelConfig& config) {
    if (problem.is_paged()) {
      return absl::UnimplementedError("the C ABI (version 1) has no paged KV cache: a paged problem cannot be served");
    }
    if (config.split_kv == kAutoSplitKv) {
      return absl::UnimplementedError("the C ABI (version 1) has no planned split count (/skauto)");
    }
    // A version-1 library would read the config without its appended fields, as another one.
    if (version < 2 && (config.pingpong || config.persistent)) {
      return absl::UnimplementedError(absl::StrCat("the C ABI (version ", version,
                                                   ") has no pingpong or persistent schedule: ", config.Key(),
                                                   " cannot be served by this library"));
    }
    return absl::OkStatus();
  }

  void* library_;
  CapiFunctions f_;
  int version_;
  fusetune_handle* handle_;
  std::unique_ptr<Backend> memory_;
};

template <typename F>
absl::Status Resolve(void* library, const std::string& path, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  if (*out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no function ", name, ": not a fusetune C ABI library"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> OpenCapiBackend(const std::string& library, std::string_view backend,
                                                         int device, std::unique_ptr<Backend> memory) {
  if (memory == nullptr) return absl::InvalidArgumentError("OpenCapiBackend needs this build's backend for memory");
  struct stat st;
  if (stat(library.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("no library at ", library));
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::InvalidArgumentError(absl::StrCat("cannot load ", library, ": ", why ? why : "unknown error"));
  }
  CapiFunctions f;
  for (absl::Status s : {Resolve(handle, library, "fusetune_api_version", &f.api_version),
                         Resolve(handle, library, "fusetune_create", &f.create),
                         Resolve(handle, library, "fusetune_destroy", &f.destroy),
                         Resolve(handle, library, "fusetune_can_implement", &f.can_implement),
                         Resolve(handle, library, "fusetune_run", &f.run),
                         Resolve(handle, library, "fusetune_time", &f.time)}) {
    if (!s.ok()) {
      dlclose(handle);
      return s;
    }
  }
  const int version = f.api_version();
  if (!Callable(version)) {
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(library, " speaks C ABI version ", version,
                                                      "; this build calls versions 1 and ", FUSETUNE_C_API_VERSION));
  }
  fusetune_handle* h = nullptr;
  char err[512] = "";
  const std::string name(backend);
  if (absl::Status s = FromCapi(f.create(name.c_str(), device, &h, err, sizeof err), err); !s.ok()) return s;
  return std::unique_ptr<Backend>(new CapiBackend(handle, f, version, h, std::move(memory)));
}

}  // namespace fusetune::regress
