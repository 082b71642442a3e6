// What the HIP backend can run on a device, from the device's limits alone: CanImplement and
// the candidate list without touching a GPU (so CI tests them on a host without one).
//
// Thread-safety: pure functions over immutable tables; safe to call concurrently.
#ifndef FUSETUNE_KERNELS_HIP_HIP_CONFIGS_H_
#define FUSETUNE_KERNELS_HIP_HIP_CONFIGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune::hip {

// The device properties the configs depend on (hipDeviceProp_t on a real device).
struct HipDeviceLimits {
  int wavefront_size = 64;                // 64 on CDNA (gfx90a, gfx940), 32 on RDNA (gfx1030)
  int compute_units = 0;
  int max_threads_per_block = 1024;
  int64_t lds_bytes_per_block = 65536;    // shared memory (LDS) one block may use
  int64_t workspace_limit_bytes = 0;      // S/P workspace the baselines may allocate
};

// OK when the HIP backend can run `config` for `problem` on a device with `limits`. Otherwise
// InvalidArgument (invalid problem/config), Unimplemented (a kernel this build lacks: head_dim
// other than 64/128, paged KV, tensor-core precisions, a fused config not compiled) or
// FailedPrecondition (threads not a multiple of the wavefront, over the LDS or workspace limit),
// each with the reason.
absl::Status HipCanImplement(const AttentionProblem& problem, const KernelConfig& config,
                             const HipDeviceLimits& limits);

// Every config HipCanImplement accepts that can change the speed, sorted by ConfigOrderLess,
// without duplicates: fused — the compiled SIMT instance table; partial — block_m, block_s in
// {16..256} x threads in {32..512} (powers of two); materialized — softmax threads {32..1024};
// each only where HipCanImplement is OK. Empty for an invalid problem.
std::vector<KernelConfig> HipCandidateConfigs(const AttentionProblem& problem,
                                              const HipDeviceLimits& limits);

}  // namespace fusetune::hip

#endif  // FUSETUNE_KERNELS_HIP_HIP_CONFIGS_H_
