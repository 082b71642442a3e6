// Host side of the fused kernel: API checks (FusedCanImplement), the instance lookup and the
// conversion of AttentionParams into the kernels' plain argument block (LaunchFused).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "attention_params.h"
#include "fused/fused_configs.h"
#include "fused/fused_instance.h"
#include "fused/persistent_tile_order.h"

namespace fusetune::FUSETUNE_GPU_NAMESPACE {
namespace {

using fused::FusedInstance;
using fused::FusedInstanceList;
using fused::PrecisionCode;
using fused::StorageCode;

static_assert(static_cast<int>(DType::kFp32) == static_cast<int>(StorageCode::kFp32));
static_assert(static_cast<int>(DType::kFp16) == static_cast<int>(StorageCode::kFp16));
static_assert(static_cast<int>(DType::kBf16) == static_cast<int>(StorageCode::kBf16));
static_assert(static_cast<int>(Precision::kFp32) == static_cast<int>(PrecisionCode::kFp32));
static_assert(static_cast<int>(Precision::kTf32) == static_cast<int>(PrecisionCode::kTf32));
static_assert(static_cast<int>(Precision::kFp16) == static_cast<int>(PrecisionCode::kFp16));
static_assert(static_cast<int>(Precision::kBf16) == static_cast<int>(PrecisionCode::kBf16));

// What the messages call this kernel ("fused CUDA kernel" / "fused HIP kernel").
constexpr char kKernelName[] = "fused " FUSETUNE_GPU_NAME " kernel";

// Grid y/z limits (heads, sequences).
constexpr int kMaxGridYZ = 65535;

const std::vector<FusedInstance>& AllInstances() {
  static const std::vector<FusedInstance>* const all = [] {
    auto* v = new std::vector<FusedInstance>();
    // The tensor-core families (mma.sync, wgmma) are CUDA-only; the SIMT ones are shared.
    for (FusedInstanceList list :
         {fused::SimtFp32StorageInstances(), fused::SimtHalfStorageInstances(),
#if defined(FUSETUNE_GPU_CUDA)
          fused::MmaFp16D64Instances(), fused::MmaFp16D128Instances(),
          fused::MmaBf16D64Instances(), fused::MmaBf16D128Instances(),
          fused::MmaTf32Instances(), fused::WgmmaFp16Instances(),
          fused::WgmmaBf16Instances()
#endif
         }) {
      v->insert(v->end(), list.data, list.data + list.size);
    }
    return v;
  }();
  return *all;
}

const FusedInstance* FindInstance(int head_dim, DType dtype, const KernelConfig& c) {
  for (const FusedInstance& inst : AllInstances()) {
    if (inst.Implements(head_dim, static_cast<StorageCode>(dtype), static_cast<PrecisionCode>(c.precision), c.block_m,
                        c.block_s, c.threads, c.stages, c.pingpong, c.persistent)) {
      return &inst;
    }
  }
  return nullptr;
}

// The precisions the fused kernel computes in for a storage type: exact fp32 always; the
// tensor-core type that matches the storage (tf32 for fp32).
bool PrecisionMatchesStorage(Precision p, DType d) {
  switch (p) {
    case Precision::kFp32: return true;
    case Precision::kTf32: return d == DType::kFp32;
    case Precision::kFp16: return d == DType::kFp16;
    case Precision::kBf16: return d == DType::kBf16;
  }
  return false;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

absl::Status FusedCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                               int64_t smem_limit_bytes, int sm_version) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (auto s = config.Validate(); !s.ok()) return s;
  if (config.variant != Variant::kFused) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused kernel asked to run variant ", std::string(VariantName(config.variant))));
  }
  if (problem.head_dim != 64 && problem.head_dim != 128) {
    return absl::UnimplementedError(absl::StrCat(
        kKernelName, " supports head_dim 64 and 128, not ", problem.head_dim));
  }
  if (problem.is_kv_quantized()) {
    return absl::UnimplementedError(absl::StrCat(kKernelName, " reads 16-bit K/V, not e4m3"));
  }
  if (config.split_kv != 1) {
    return absl::UnimplementedError(
        absl::StrCat(kKernelName, " has no split-KV path (split_kv ", config.split_kv, ")"));
  }
  if (!PrecisionMatchesStorage(config.precision, problem.dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        kKernelName, " computes ", std::string(DTypeName(problem.dtype)), " storage in fp32 or ",
        problem.dtype == DType::kFp32 ? std::string("tf32") : std::string(DTypeName(problem.dtype)),
        ", not ", std::string(PrecisionName(config.precision))));
  }
  if (problem.batch > kMaxGridYZ || problem.q_heads > kMaxGridYZ) {
    return absl::UnimplementedError(
        absl::StrCat(kKernelName, " launches one grid row per head and sequence; batch ",
                     problem.batch, " / heads ", problem.q_heads, " exceed ", kMaxGridYZ));
  }
  const FusedInstance* inst = FindInstance(problem.head_dim, problem.dtype, config);
  if (inst == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "no compiled fused instantiation for head_dim ", problem.head_dim, ", ",
        std::string(DTypeName(problem.dtype)), " storage, config ", config.Key(),
        " (see kernels/cuda/fused/README.md for the list)"));
  }
  if (inst->needs_sm90 && sm_version / 10 != 9) {
    return absl::UnimplementedError(absl::StrCat(
        "config ", config.Key(), " is the Hopper wgmma/TMA kernel (sm_90a code only); this GPU is sm_",
        sm_version));
  }
  if (inst->smem_bytes > smem_limit_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("config ", config.Key(), " needs ", inst->smem_bytes,
                     " bytes of shared memory per block; the device allows ", smem_limit_bytes));
  }
  if (problem.is_paged()) {
    // The Hopper kernel loads a tile as TMA boxes of min(page, block_s) rows, whole 8-row
    // swizzle atoms each, so a page must be a multiple of 16 tokens that divides block_s or is
    // a multiple of it. Decode steps stay on the decode family.
    const int page = problem.page_block_size;
    if (!inst->needs_sm90 || problem.kind != ProblemKind::kPrefill || page % 16 != 0 ||
        (config.block_s % page != 0 && page % config.block_s != 0)) {
      return absl::UnimplementedError(absl::StrCat(
          kKernelName, " reads a paged cache only in the Hopper kernel, for a prefill, with pages of a multiple "
          "of 16 tokens that divides block_s or is a multiple of it (config ", config.Key(), ", pages of ", page,
          ")"));
    }
  }
  return absl::OkStatus();
}

cudaError_t LaunchFused(const AttentionParams& p, const KernelConfig& config,
                        cudaStream_t stream) {
  const FusedInstance* inst = FindInstance(p.head_dim, p.dtype, config);
  if (inst == nullptr || config.variant != Variant::kFused || config.split_kv != 1) {
    return cudaErrorNotSupported;
  }
  if (p.batch <= 0 || p.q_heads <= 0 || p.q_len <= 0) return cudaSuccess;  // nothing to write
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  // 16-byte cp.async / vector accesses need aligned bases, row and head strides.
  const int64_t elem = DTypeBytes(p.dtype);
  const bool aligned =
      Aligned16(p.q) && Aligned16(p.k) && Aligned16(p.v) && Aligned16(p.o) &&
      (p.q_row_stride * elem) % 16 == 0 && (p.k_row_stride * elem) % 16 == 0 &&
      (p.v_row_stride * elem) % 16 == 0 && (p.o_row_stride * elem) % 16 == 0 &&
      (p.q_head_stride * elem) % 16 == 0 && (p.k_head_stride * elem) % 16 == 0 &&
      (p.v_head_stride * elem) % 16 == 0 && (p.o_head_stride * elem) % 16 == 0;
  if (!aligned) return cudaErrorMisalignedAddress;
  if (p.cu_seqlens_q != nullptr && p.cu_seqlens_k == nullptr) return cudaErrorInvalidValue;
  if (p.page_size > 0 && (!inst->needs_sm90 || p.block_table == nullptr)) return cudaErrorNotSupported;
  if (!(p.scale_log2 > 0.0f)) return cudaErrorInvalidValue;

  fused::FusedKernelArgs a = p;
  a.heads_per_kv = p.q_heads / p.kv_heads;
  return inst->launch(a, stream);
}

FusedSplitWorkspace FusedSplitWorkspaceFor(const AttentionProblem& problem, const KernelConfig& config,
                                           int multiprocessors) {
  const FusedInstance* inst = FindInstance(problem.head_dim, problem.dtype, config);
  if (inst == nullptr || !inst->split_tail) return {};
  const bool uniform = !problem.is_varlen() && problem.kv_valid_lens.empty();
  const cuda::fused::SplitTail split =
      cuda::fused::SplitTail::ForLaunch(problem.q_len, problem.kv_len, problem.q_heads, problem.batch, problem.causal,
                                        uniform, inst->block_m, inst->block_s, multiprocessors, inst->tail_launch);
  const cuda::fused::SplitWorkspaceSize size = cuda::fused::SplitWorkspaceOf(split, inst->threads, inst->head_dim);
  FusedSplitWorkspace w;
  w.partial_floats = size.partial_floats;
  w.counters = size.counters;
  return w;
}

std::vector<KernelConfig> FusedCompiledConfigs(int head_dim, DType dtype) {
  std::vector<KernelConfig> out;
  for (const FusedInstance& inst : AllInstances()) {
    if (inst.head_dim != head_dim || static_cast<int>(inst.storage) != static_cast<int>(dtype)) {
      continue;
    }
    KernelConfig c;
    c.variant = Variant::kFused;
    c.block_m = inst.block_m;
    c.block_s = inst.block_s;
    c.threads = inst.threads;
    c.precision = static_cast<Precision>(static_cast<int>(inst.precision));
    c.stages = inst.stages;
    c.split_kv = 1;
    c.pingpong = inst.pingpong;
    c.persistent = inst.persistent;
    out.push_back(c);
  }
  return out;
}

int64_t FusedSharedMemoryBytes(int head_dim, DType dtype, const KernelConfig& config) {
  const FusedInstance* inst = FindInstance(head_dim, dtype, config);
  return inst == nullptr ? -1 : inst->smem_bytes;
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE
