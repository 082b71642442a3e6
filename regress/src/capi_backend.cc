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
// persistent to fusetune_config, and the adapter only hands configs to the library (the
// can_implement, run and time calls, plain, *_kv_cache and *_kv_quant, read them; it calls
// nothing that writes one), so a version-1 library reads the first seven fields of the same
// struct as its own config. fusetune_kv_cache and fusetune_kv_quant have kept their layout
// since they were added. The next version must decide again which older ones stay callable.
static_assert(FUSETUNE_C_API_VERSION == 2, "decide which older C ABI versions the adapter can still call");
bool Callable(int version) { return version == 1 || version == FUSETUNE_C_API_VERSION; }

// The library's entry points this adapter calls, resolved once. The first six are in every
// library since the ABI's first commit. The *_kv_cache three came later (a KV cache: decode and
// paged problems) and the *_kv_quant three later still (e4m3 K/V): each three is resolved only
// together, and null where the library predates them. So are the two scratch calls,
// fusetune_use_workers, and fusetune_use_graph_timing, added last.
struct CapiFunctions {
  decltype(&fusetune_api_version) api_version = nullptr;
  decltype(&fusetune_create) create = nullptr;
  decltype(&fusetune_destroy) destroy = nullptr;
  decltype(&fusetune_can_implement) can_implement = nullptr;
  decltype(&fusetune_run) run = nullptr;
  decltype(&fusetune_time) time = nullptr;
  decltype(&fusetune_can_implement_kv_cache) can_implement_kv_cache = nullptr;
  decltype(&fusetune_run_kv_cache) run_kv_cache = nullptr;
  decltype(&fusetune_time_kv_cache) time_kv_cache = nullptr;
  decltype(&fusetune_can_implement_kv_quant) can_implement_kv_quant = nullptr;
  decltype(&fusetune_run_kv_quant) run_kv_quant = nullptr;
  decltype(&fusetune_time_kv_quant) time_kv_quant = nullptr;
  decltype(&fusetune_scratch_bytes) scratch_bytes = nullptr;
  decltype(&fusetune_use_scratch_arena) use_scratch_arena = nullptr;
  decltype(&fusetune_use_workers) use_workers = nullptr;
  decltype(&fusetune_use_graph_timing) use_graph_timing = nullptr;

  bool has_kv_cache() const { return can_implement_kv_cache != nullptr; }
  bool has_kv_quant() const { return can_implement_kv_quant != nullptr; }
};

// A fusetune_status code as the absl status of the same value (the ABI's codes equal absl's).
absl::Status FromCapi(int code, const char* err) {
  if (code == FUSETUNE_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat("C ABI library: ", err));
}

// A problem as the ABI's struct; the length arrays point into `problem`, which must outlive it.
// It has no kind, paged fields or K/V storage: those go in fusetune_kv_cache and
// fusetune_kv_quant (CapiProblem below).
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

// A decode problem, or one over a paged cache, is said through the *_kv_cache (or *_kv_quant)
// calls: the plain ones would take a decode problem for a prefill of the same shape (the same
// function, another kernel) and a paged pool for contiguous K/V.
bool NeedsKvCache(const AttentionProblem& p) { return p.kind == ProblemKind::kDecode || p.is_paged(); }

// One (problem, buffers) as the ABI's structs: the problem, its KV cache where it needs one
// (NeedsKvCache) and its K/V storage where that is e4m3. The cache is the exact inverse of
// c_api.cc's ToProblem: the problem's own fields, not the derived widths and pool sizes, so the
// library rebuilds the same problem (and key). Pointers go into `problem` and the buffers, which
// must outlive it; not copyable, as cache() points into it.
struct CapiProblem {
  CapiProblem(const AttentionProblem& p, const int32_t* block_table, const float* k_scale, const float* v_scale)
      : problem(ToCapi(p)), with_cache(NeedsKvCache(p)), with_quant(p.is_kv_quantized()) {
    kv_cache.decode = p.kind == ProblemKind::kDecode ? 1 : 0;
    kv_cache.page_block_size = p.page_block_size;
    kv_cache.pool_pages = p.kv_pool_pages;
    kv_cache.block_table_width = p.block_table_width;
    kv_cache.shared_prefix_pages = p.shared_prefix_pages;
    kv_cache.block_table = block_table;  // as given: the library checks that a paged cache has one
    if (with_quant) kv_quant = {FUSETUNE_KV_E4M3, k_scale, v_scale};
  }
  CapiProblem(const CapiProblem&) = delete;
  CapiProblem& operator=(const CapiProblem&) = delete;

  // The *_kv_quant calls take a contiguous prefill as a NULL cache, as the plain calls would.
  const fusetune_kv_cache* cache() const { return with_cache ? &kv_cache : nullptr; }

  fusetune_problem problem;
  fusetune_kv_cache kv_cache{};
  fusetune_kv_quant kv_quant{FUSETUNE_KV_DTYPE, nullptr, nullptr};
  bool with_cache;
  bool with_quant;
};

class CapiBackend : public Backend {
 public:
  CapiBackend(void* library, CapiFunctions f, int version, fusetune_handle* handle, std::unique_ptr<Backend> memory)
      : library_(library), f_(f), version_(version), handle_(handle), memory_(std::move(memory)) {
    // fusetune_use_graph_timing(h, 0) is OK exactly where the handle can time through a graph.
    char err[512] = "";
    takes_graph_timing_ =
        f_.use_graph_timing != nullptr && f_.use_graph_timing(handle_, 0, err, sizeof err) == FUSETUNE_OK;
  }
  ~CapiBackend() override {
    f_.destroy(handle_);
    // The library stays loaded: a CUDA runtime inside it may still run exit handlers.
    (void)library_;
  }

  DeviceInfo Describe() const override { return memory_->Describe(); }

  bool TakesGraphTiming() const override { return takes_graph_timing_; }

  absl::Status CanImplement(const AttentionProblem& problem, const KernelConfig& config) const override {
    if (auto s = Representable(problem, config); !s.ok()) return s;
    // The library cannot see the token: it is read before each call into it.
    if (auto s = stop_token().Check(); !s.ok()) return s;
    // No memory is read: the block table and scales stay NULL.
    const CapiProblem p(problem, nullptr, nullptr, nullptr);
    const fusetune_config c = ToCapi(config);
    char err[512] = "";
    int code;
    if (p.with_quant) {
      code = f_.can_implement_kv_quant(handle_, &p.problem, p.cache(), &p.kv_quant, &c, err, sizeof err);
    } else if (p.with_cache) {
      code = f_.can_implement_kv_cache(handle_, &p.problem, p.cache(), &c, err, sizeof err);
    } else {
      code = f_.can_implement(handle_, &p.problem, &c, err, sizeof err);
    }
    return FromCapi(code, err);
  }

  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem&) const override { return {}; }

  absl::Status Run(const AttentionProblem& problem, const KernelConfig& config,
                   const AttentionBuffers& buffers) override {
    if (auto s = Representable(problem, config); !s.ok()) return s;
    // The library cannot see the token: it is read before each call into it.
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const CapiProblem p(problem, buffers.block_table, buffers.k_scale, buffers.v_scale);
    const fusetune_config c = ToCapi(config);
    const void *q = buffers.q, *k = buffers.k, *v = buffers.v;
    void* o = buffers.o;
    char err[512] = "";
    int code;
    if (p.with_quant) {
      code = f_.run_kv_quant(handle_, &p.problem, p.cache(), &p.kv_quant, &c, q, k, v, o, err, sizeof err);
    } else if (p.with_cache) {
      code = f_.run_kv_cache(handle_, &p.problem, p.cache(), &c, q, k, v, o, err, sizeof err);
    } else {
      code = f_.run(handle_, &p.problem, &c, q, k, v, o, err, sizeof err);
    }
    return FromCapi(code, err);
  }

  absl::StatusOr<TimingSamples> Time(const AttentionProblem& problem, const KernelConfig& config,
                                     const AttentionBuffers& buffers, const TimingOptions& options) override {
    if (auto s = Representable(problem, config); !s.ok()) return s;
    if (auto s = stop_token().Check(); !s.ok()) return s;
    const CapiProblem p(problem, buffers.block_table, buffers.k_scale, buffers.v_scale);
    const fusetune_config c = ToCapi(config);
    const void *q = buffers.q, *k = buffers.k, *v = buffers.v;
    void* o = buffers.o;
    const int warmup = options.warmup, repeats = options.repeats, flush = options.flush_l2 ? 1 : 0;
    const double max_seconds = options.max_seconds;
    std::vector<double> samples(static_cast<size_t>(std::max(options.repeats, 1)));
    const int capacity = static_cast<int>(samples.size());
    double median = 0;
    int count = 0;
    char err[512] = "";
    const bool graphed = UseGraphTiming(options.graph);
    int code;
    if (p.with_quant) {
      code = f_.time_kv_quant(handle_, &p.problem, p.cache(), &p.kv_quant, &c, q, k, v, o, warmup, repeats,
                              max_seconds, flush, &median, samples.data(), capacity, &count, err, sizeof err);
    } else if (p.with_cache) {
      code = f_.time_kv_cache(handle_, &p.problem, p.cache(), &c, q, k, v, o, warmup, repeats, max_seconds, flush,
                              &median, samples.data(), capacity, &count, err, sizeof err);
    } else {
      code = f_.time(handle_, &p.problem, &c, q, k, v, o, warmup, repeats, max_seconds, flush, &median,
                     samples.data(), capacity, &count, err, sizeof err);
    }
    if (auto s = FromCapi(code, err); !s.ok()) return s;
    TimingSamples t;
    t.micros.assign(samples.begin(), samples.begin() + std::clamp(count, 0, capacity));
    t.graphed = graphed;
    return t;
  }

  absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& problem, const KernelConfig& config) const override {
    if (f_.scratch_bytes == nullptr) return NoArena();
    if (auto s = Representable(problem, config); !s.ok()) return s;
    const CapiProblem p(problem, nullptr, nullptr, nullptr);
    const fusetune_config c = ToCapi(config);
    size_t bytes = 0;
    char err[512] = "";
    const int code = f_.scratch_bytes(handle_, &p.problem, p.cache(), p.with_quant ? &p.kv_quant : nullptr, &c, &bytes,
                                      err, sizeof err);
    if (auto s = FromCapi(code, err); !s.ok()) return s;
    return bytes;
  }

  absl::Status UseScratchArena(void* base, size_t bytes) override {
    if (f_.use_scratch_arena == nullptr) return NoArena();
    char err[512] = "";
    return FromCapi(f_.use_scratch_arena(handle_, base, bytes, err, sizeof err), err);
  }

  absl::Status UseWorkers(const WorkerPool* pool) override {
    if (f_.use_workers == nullptr) {
      return absl::UnimplementedError(
          "this C ABI library has no fusetune_use_workers: it runs its tasks on threads of its own");
    }
    fusetune_workers workers{};
    if (pool != nullptr) {
      workers.context = pool->context;
      workers.parallel_for = pool->parallel_for;
    }
    char err[512] = "";
    return FromCapi(f_.use_workers(handle_, pool == nullptr ? nullptr : &workers, err, sizeof err), err);
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
  // What this library cannot be told. A config's split_kv 0 (kAutoSplitKv, /skauto) is not
  // among them: no library runs it as something else, so it is handed over as it is and a
  // refusal is the library's own. Before split_kv 0 meant "planned at launch",
  // KernelConfig::Validate, which the C ABI has run on every config since its first commit,
  // refused it (INVALID_ARGUMENT, "split_kv must be in [1, 64]"); after, each backend refused
  // every split_kv but 1 (UNIMPLEMENTED) until it had a planner. So no capability needs testing,
  // and libraries from between that change and the *_kv_cache calls, whose CPU backend already
  // plans a prefill's split, keep serving it.
  absl::Status Representable(const AttentionProblem& problem, const KernelConfig& config) const {
    // The plain calls would read e4m3 bytes as the problem's dtype.
    if (problem.is_kv_quantized() && !f_.has_kv_quant()) {
      return absl::UnimplementedError(
          "this C ABI library has no fusetune_*_kv_quant functions: K/V stored as e4m3 cannot be served");
    }
    if (NeedsKvCache(problem) && !f_.has_kv_cache()) {
      return absl::UnimplementedError(absl::StrCat(
          "this C ABI library has no fusetune_*_kv_cache functions: a ",
          problem.is_paged() ? "paged" : "decode", " problem cannot be served"));
    }
    // A version-1 library would read the config without its appended fields, as another one.
    if (version_ < 2 && (config.pingpong || config.persistent)) {
      return absl::UnimplementedError(absl::StrCat("the C ABI (version ", version_,
                                                   ") has no pingpong or persistent schedule: ", config.Key(),
                                                   " cannot be served by this library"));
    }
    return absl::OkStatus();
  }

  // Tells the handle to time through a graph or not, as `graph` says, where it can; whether its
  // next time call will (false: the library has no fusetune_use_graph_timing, or refuses it).
  bool UseGraphTiming(bool graph) {
    if (!takes_graph_timing_) return false;
    if (graph != handle_graph_timing_) {
      char err[512] = "";
      const bool told = f_.use_graph_timing(handle_, graph ? 1 : 0, err, sizeof err) == FUSETUNE_OK;
      handle_graph_timing_ = told ? graph : false;
    }
    return handle_graph_timing_;
  }

  static absl::Status NoArena() {
    return absl::UnimplementedError(
        "this C ABI library has no fusetune_scratch_bytes and fusetune_use_scratch_arena: it keeps its scratch in "
        "memory of its own");
  }

  void* library_;
  CapiFunctions f_;
  int version_;
  fusetune_handle* handle_;
  std::unique_ptr<Backend> memory_;
  bool takes_graph_timing_ = false;   // the library's handle can time through a graph
  bool handle_graph_timing_ = false;  // and was last told to
};

template <typename F>
absl::Status Resolve(void* library, const std::string& path, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  if (*out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no function ", name, ": not a fusetune C ABI library"));
  }
  return absl::OkStatus();
}

// Resolves three functions added together, all or none: a library with only some of them is
// served as one without them.
template <typename A, typename B, typename C>
void ResolveOptional(void* library, const char* name_a, A* a, const char* name_b, B* b, const char* name_c, C* c) {
  *a = reinterpret_cast<A>(dlsym(library, name_a));
  *b = reinterpret_cast<B>(dlsym(library, name_b));
  *c = reinterpret_cast<C>(dlsym(library, name_c));
  if (*a == nullptr || *b == nullptr || *c == nullptr) {
    *a = nullptr;
    *b = nullptr;
    *c = nullptr;
  }
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
  ResolveOptional(handle, "fusetune_can_implement_kv_cache", &f.can_implement_kv_cache, "fusetune_run_kv_cache",
                  &f.run_kv_cache, "fusetune_time_kv_cache", &f.time_kv_cache);
  ResolveOptional(handle, "fusetune_can_implement_kv_quant", &f.can_implement_kv_quant, "fusetune_run_kv_quant",
                  &f.run_kv_quant, "fusetune_time_kv_quant", &f.time_kv_quant);
  f.scratch_bytes = reinterpret_cast<decltype(f.scratch_bytes)>(dlsym(handle, "fusetune_scratch_bytes"));
  f.use_scratch_arena = reinterpret_cast<decltype(f.use_scratch_arena)>(dlsym(handle, "fusetune_use_scratch_arena"));
  if (f.scratch_bytes == nullptr || f.use_scratch_arena == nullptr) f.scratch_bytes = nullptr, f.use_scratch_arena = nullptr;
  f.use_workers = reinterpret_cast<decltype(f.use_workers)>(dlsym(handle, "fusetune_use_workers"));
  f.use_graph_timing = reinterpret_cast<decltype(f.use_graph_timing)>(dlsym(handle, "fusetune_use_graph_timing"));
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
