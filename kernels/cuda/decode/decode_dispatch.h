// Host side of the CUDA decode kernel family (decode_kernel.cuh): which configs are compiled,
// whether one can run a problem, and the launch (API checks -> DecodeKernelArgs -> instance).
//
// The family serves every problem of kind decode (contiguous or paged cache) and every prefill
// over a paged cache (prefix caching), for the fused variant. Config axes: block_m (16: decode,
// a KV group's heads x the new tokens in one block; 64: prefill over a cache), block_s (keys per
// tile), threads, stages (K/V tiles in flight, 2-4), split_kv (key splits per sequence, or
// kAutoSplitKv: ChooseSplitKv at launch with the device's resident-block slots as its
// processors). Precision: the storage type's own (fp16/bf16 on the tensor cores, exact fp32 for
// fp32 storage); fp16 for K/V stored as e4m3 (KvStorage::kE4m3, Q/O fp16 or bf16).
//
// Thread-safety: pure functions over immutable tables; LaunchDecode is as thread-safe as the
// stream it is given.
#ifndef FUSETUNE_KERNELS_CUDA_DECODE_DECODE_DISPATCH_H_
#define FUSETUNE_KERNELS_CUDA_DECODE_DECODE_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "decode/decode_instance.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune::cuda {

// The split counts the tuner tries for decode problems on the GPU (kAutoSplitKv included).
inline constexpr int kGpuDecodeSplits[] = {1, 2, 4, 8, 16, 32, kAutoSplitKv};

// True when the fused variant of `problem` runs on the decode family (decode, or paged).
bool UsesDecodeFamily(const AttentionProblem& problem);

// Every compiled decode-family config for (head_dim, Q/O storage dtype, K/V storage), split_kv 1,
// in a fixed order; empty for a head_dim without instances.
std::vector<KernelConfig> DecodeCompiledConfigs(int head_dim, DType dtype, KvStorage kv = KvStorage::kDType);

// The fused configs CandidateConfigs offers for `problem` (valid, UsesDecodeFamily): compiled
// instances whose block_m suits the rows of a (sequence, KV head) (block_m 64 only where
// they exceed 16), times kGpuDecodeSplits for decode problems (split 1 for prefill over a
// cache). CanImplement still filters them (shared memory).
std::vector<KernelConfig> DecodeCandidateConfigs(const AttentionProblem& problem);

// OK when a compiled instance implements `config` for the (valid) problem and fits
// `smem_limit_bytes`; Unimplemented / FailedPrecondition naming the reason otherwise (precision
// other than the storage's, an uncompiled tile, a split of a prefill, a grid too large).
// Never calls CUDA.
absl::Status DecodeCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                                int64_t smem_limit_bytes);

// The split count a launch of `config` uses: config.split_kv, or ChooseSplitKv(problem,
// resident_blocks) for kAutoSplitKv (resident_blocks: blocks of the instance the whole device
// holds at once).
int ResolveDecodeSplits(const AttentionProblem& problem, const KernelConfig& config, int resident_blocks);

// Floats of workspace a launch with `splits` needs (0 for one split).
int64_t DecodeWorkspaceFloats(const AttentionProblem& problem, int splits);

// Split counters (int32) a launch of `config` with more than one split needs. They must be zero
// before the first launch; every completed launch leaves them zero (the last block of each row
// block resets its counter), so a caller zeroes them once when it allocates them.
int64_t DecodeSplitCounterCount(const AttentionProblem& problem, const KernelConfig& config);

// Blocks of the instance of `config` one multiprocessor holds at once (occupancy); 0 when
// there is no instance or CUDA cannot tell.
int DecodeBlocksPerMultiprocessor(const AttentionProblem& problem, const KernelConfig& config);

// Device pointers of one launch: the four tensors, the block table (paged), the varlen /
// key-padding arrays (nullptr where the problem has none), the split workspace (at least
// DecodeWorkspaceFloats floats when splits > 1), the split counters (DecodeSplitCounterCount,
// zeroed once) and, for K/V stored as e4m3, their scales.
struct DecodeLaunchBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* kv_valid_lens = nullptr;
  float* workspace = nullptr;
  int32_t* split_counters = nullptr;
  const float* k_scale = nullptr;  // K/V stored as e4m3: kv_heads scales each
  const float* v_scale = nullptr;
};

// Enqueues the launch (one kernel; with splits > 1 its last blocks merge the splits) on `stream`; the problem and config
// must have passed DecodeCanImplement and the table ValidateBlockTable. Returns the launch
// error (cudaSuccess when launched).
cudaError_t LaunchDecode(const AttentionProblem& problem, const KernelConfig& config, int splits,
                         const DecodeLaunchBuffers& buffers, cudaStream_t stream);

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_DECODE_DECODE_DISPATCH_H_
