// Host side of the decode family: the instance table, API checks and the launch.
#include "decode/decode_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "fusetune/base/strings.h"
#include "fusetune/kernels/split_kv.h"

namespace fusetune::cuda {
namespace {

using decode::DecodeInstance;
using decode::DecodeInstanceList;
using decode::DecodeKernelArgs;

static_assert(static_cast<int>(DType::kFp32) == static_cast<int>(decode::DecodeStorage::kFp32));
static_assert(static_cast<int>(DType::kFp16) == static_cast<int>(decode::DecodeStorage::kFp16));
static_assert(static_cast<int>(DType::kBf16) == static_cast<int>(decode::DecodeStorage::kBf16));

const std::vector<DecodeInstance>& AllInstances() {
  static const std::vector<DecodeInstance>* const all = [] {
    auto* v = new std::vector<DecodeInstance>();
    for (DecodeInstanceList list :
         {decode::DecodeFp32Instances(), decode::DecodeFp16Instances(), decode::DecodeBf16Instances(),
          decode::DecodeE4m3Instances()}) {
      v->insert(v->end(), list.data, list.data + list.size);
    }
    return v;
  }();
  return *all;
}

Precision PrecisionOfStorage(DType d) {
  switch (d) {
    case DType::kFp32: return Precision::kFp32;
    case DType::kFp16: return Precision::kFp16;
    case DType::kBf16: return Precision::kBf16;
  }
  return Precision::kFp32;
}

// The products' precision: the storage type's own, fp16 for K/V stored as e4m3 (every e4m3
// value is an fp16 value; Q is scaled into fp16's range per row).
Precision PrecisionOf(DType dtype, KvStorage kv) {
  return kv == KvStorage::kE4m3 ? Precision::kFp16 : PrecisionOfStorage(dtype);
}

bool Matches(const DecodeInstance& inst, int head_dim, DType dtype, KvStorage kv) {
  return inst.head_dim == head_dim && static_cast<int>(inst.storage) == static_cast<int>(dtype) &&
         inst.kv_e4m3 == (kv == KvStorage::kE4m3);
}

const DecodeInstance* FindInstance(const AttentionProblem& p, const KernelConfig& c) {
  if (c.precision != PrecisionOf(p.dtype, p.kv_storage)) return nullptr;
  for (const DecodeInstance& inst : AllInstances()) {
    if (Matches(inst, p.head_dim, p.dtype, p.kv_storage) && inst.block_m == c.block_m && inst.block_s == c.block_s && inst.threads == c.threads &&
        inst.stages == c.stages) {
      return &inst;
    }
  }
  return nullptr;
}

// Rows of one (sequence, KV head): the group's query heads times the longest query count.
int64_t RowsPerKvHead(const AttentionProblem& p) {
  return static_cast<int64_t>(p.heads_per_kv()) * p.q_len;
}

int RowBlocks(const AttentionProblem& p, int block_m) {
  return static_cast<int>((RowsPerKvHead(p) + block_m - 1) / block_m);
}

}  // namespace

bool UsesDecodeFamily(const AttentionProblem& problem) {
  return problem.kind == ProblemKind::kDecode || problem.is_paged();
}

std::vector<KernelConfig> DecodeCompiledConfigs(int head_dim, DType dtype, KvStorage kv) {
  std::vector<KernelConfig> out;
  for (const DecodeInstance& inst : AllInstances()) {
    if (!Matches(inst, head_dim, dtype, kv)) continue;
    KernelConfig c;
    c.variant = Variant::kFused;
    c.precision = PrecisionOf(dtype, kv);
    c.block_m = inst.block_m;
    c.block_s = inst.block_s;
    c.threads = inst.threads;
    c.stages = inst.stages;
    c.split_kv = 1;
    out.push_back(c);
  }
  return out;
}

std::vector<KernelConfig> DecodeCandidateConfigs(const AttentionProblem& problem) {
  std::vector<KernelConfig> out;
  const int64_t rows = RowsPerKvHead(problem);
  const int smallest = 16;
  for (KernelConfig c : DecodeCompiledConfigs(problem.head_dim, problem.dtype, problem.kv_storage)) {
    // A larger row block than the rows need only computes padding.
    if (c.block_m > smallest && rows <= smallest) continue;
    if (problem.kind == ProblemKind::kDecode) {
      for (int split : kGpuDecodeSplits) {
        c.split_kv = split;
        out.push_back(c);
      }
    } else {
      c.split_kv = 1;
      out.push_back(c);
    }
  }
  return out;
}

absl::Status DecodeCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                                int64_t smem_limit_bytes) {
  if (config.pingpong || config.persistent) {
    // FindInstance does not look at them: a decode kernel would run the config without them.
    return absl::UnimplementedError(
        "the CUDA decode kernels have no pingpong or persistent schedule (the Hopper fused prefill kernel's)");
  }
  const Precision precision = PrecisionOf(problem.dtype, problem.kv_storage);
  if (config.precision != precision) {
    return absl::UnimplementedError(
        problem.is_kv_quantized()
            ? Cat("the CUDA decode kernel computes with e4m3 K/V in fp16: precision fp16, not ",
                  PrecisionName(config.precision))
            : Cat("the CUDA decode kernel computes in the storage type's own precision: ", DTypeName(problem.dtype),
                  " storage needs precision ", PrecisionName(precision), ", not ", PrecisionName(config.precision)));
  }
  const DecodeInstance* inst = FindInstance(problem, config);
  if (inst == nullptr) {
    return absl::UnimplementedError(Cat(
        "no compiled CUDA decode kernel for head_dim ", problem.head_dim, " ", DTypeName(problem.dtype),
        problem.is_kv_quantized() ? " with e4m3 K/V" : "", " block_m ", config.block_m, " block_s ", config.block_s, " threads ", config.threads, " stages ",
        config.stages));
  }
  if (problem.kind != ProblemKind::kDecode && config.split_kv != 1 && config.split_kv != kAutoSplitKv) {
    return absl::UnimplementedError(Cat(
        "split_kv must be 1 for a prefill over a cache (only decode splits its keys), got ", config.split_kv));
  }
  if (inst->smem_bytes > smem_limit_bytes) {
    return absl::FailedPreconditionError(Cat(
        "the CUDA decode kernel ", config.Key(), " needs ", inst->smem_bytes,
        " bytes of shared memory per block, the device allows ", smem_limit_bytes));
  }
  const int64_t splits = config.split_kv == kAutoSplitKv ? kMaxSplitKv : config.split_kv;
  const int64_t blocks = static_cast<int64_t>(RowBlocks(problem, config.block_m)) * problem.batch *
                         problem.kv_heads * splits;
  if (blocks > 0x7fffffff) {
    return absl::FailedPreconditionError(Cat(
        "the CUDA decode kernel would need ", blocks, " blocks, over the grid limit of 2^31 - 1"));
  }
  return absl::OkStatus();
}

int ResolveDecodeSplits(const AttentionProblem& problem, const KernelConfig& config, int resident_blocks) {
  if (config.split_kv != kAutoSplitKv) return config.split_kv;
  return ChooseSplitKv(problem, std::max(1, resident_blocks));
}

int64_t DecodeWorkspaceFloats(const AttentionProblem& problem, int splits) {
  return decode::DecodeWorkspaceFloats(problem.TotalQueries(), problem.q_heads, problem.head_dim, splits);
}

int64_t DecodeSplitCounterCount(const AttentionProblem& problem, const KernelConfig& config) {
  return decode::DecodeSplitCounterCount(RowBlocks(problem, config.block_m), problem.batch, problem.kv_heads);
}

int DecodeBlocksPerMultiprocessor(const AttentionProblem& problem, const KernelConfig& config) {
  const DecodeInstance* inst = FindInstance(problem, config);
  return inst == nullptr ? 0 : inst->blocks_per_sm();
}

cudaError_t LaunchDecode(const AttentionProblem& problem, const KernelConfig& config, int splits,
                         const DecodeLaunchBuffers& buffers, cudaStream_t stream) {
  const DecodeInstance* inst = FindInstance(problem, config);
  if (inst == nullptr || splits < 1 ||
      (splits > 1 && (buffers.workspace == nullptr || buffers.split_counters == nullptr)) ||
      (problem.is_kv_quantized() && (buffers.k_scale == nullptr || buffers.v_scale == nullptr))) {
    return cudaErrorInvalidValue;
  }
  DecodeKernelArgs a;
  a.q = buffers.q;
  a.k = buffers.k;
  a.v = buffers.v;
  a.o = buffers.o;
  a.k_scale = buffers.k_scale;
  a.v_scale = buffers.v_scale;
  a.batch = problem.batch;
  a.q_heads = problem.q_heads;
  a.kv_heads = problem.kv_heads;
  a.group = problem.heads_per_kv();
  a.head_dim = problem.head_dim;
  a.q_len = problem.q_len;
  a.kv_len = problem.kv_len;
  a.cu_seqlens_q = buffers.cu_seqlens_q;
  a.cu_seqlens_k = buffers.cu_seqlens_k;
  a.kv_valid_lens = buffers.kv_valid_lens;
  a.causal = problem.causal ? 1 : 0;
  a.scale_log2 = problem.EffectiveScale() * 1.4426950408889634f;
  if (problem.is_paged()) {
    a.block_table = buffers.block_table;
    a.block_table_width = problem.BlockTableWidth();
    a.page_size = problem.page_block_size;
    a.page_magic = decode::PageDivisorMagic(problem.page_block_size);
  }
  a.splits = splits;
  a.total_q = problem.TotalQueries();
  if (splits > 1) {
    a.partial = buffers.workspace;
    a.partial_ml = buffers.workspace + a.total_q * problem.q_heads * static_cast<int64_t>(splits) * problem.head_dim;
    a.split_counters = buffers.split_counters;
  }
  a.row_blocks = RowBlocks(problem, config.block_m);
  if (a.total_q == 0 || a.row_blocks == 0) return cudaSuccess;  // nothing to compute
  return inst->launch(a, stream);
}

}  // namespace fusetune::cuda
