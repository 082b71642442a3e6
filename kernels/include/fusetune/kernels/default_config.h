// DefaultConfig: the one config each backend runs when nothing better is known for a problem.
//
// The tuning service answers with it (provenance "default") when it has tuned nothing
// comparable, and the client's ConfigCache falls back to it while the service has not
// answered (or cannot be reached). Both use this definition, so what inference code runs
// during an outage is what the service would have said.
//
// The defaults are chosen to be implementable, not fast: for every problem the backend
// supports (each storage dtype, each supported head_dim, causal or not, GQA/MQA, varlen and
// key padding, decode and paged KV caches), the default passes the backend's CanImplement.
// default_config_test checks this against the CPU backend and the CUDA fused and decode
// kernels' compiled instance tables.
//
//   cpu:   fused/bm64/bs64/t1/fp32/st1; decode: block_m 16 and split_kv = kAutoSplitKv (the
//          split count ChooseSplitKv plans at launch). One thread, because a caller's thread
//          pool is not ours to take (so the planned split is 1 unless a tuned config says
//          otherwise). The same for K/V stored as e4m3 (fp32 products of the widened values).
//   cuda:  fused, block_m 64, 128 threads, precision = the storage dtype (fp32 stays exact
//          fp32, never tf32 by default); fp16/bf16: block_s 64, 2 stages (mma.sync);
//          fp32: block_s 32, 1 stage (SIMT). Compiled for head_dim 64 and 128 and within the
//          99 KiB of shared memory per block of the smallest supported GPU (sm_86/sm_89).
//          Decode problems and prefills over a paged cache run on the decode family
//          (cuda/decode): block_m 16 (decode) or 64 (paged prefill; 16 for fp32, whose SIMT
//          instances all have 16 rows), block_s 64 (fp32: 32), 128 threads, 2 stages,
//          precision = the storage dtype, split_kv = kAutoSplitKv for decode (planned at launch
//          from the device's resident blocks) and 1 for a prefill. The same 99 KiB bound holds.
//   hip:   as cuda's prefill default with 256 threads (wave64), for every problem: the HIP
//          backend has no decode family and no split-KV path (split_kv 1).
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_KERNELS_DEFAULT_CONFIG_H_
#define FUSETUNE_KERNELS_DEFAULT_CONFIG_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {

// The default config of `backend` ("cpu", "cuda" or "hip") for `problem`. InvalidArgument
// for any other backend name. The problem is not validated here (the config depends only
// on its kind and storage dtype).
absl::StatusOr<KernelConfig> DefaultConfig(std::string_view backend, const AttentionProblem& problem);

// The default config of the backend of `device_class` (BackendOfDeviceClass); a class whose
// backend has no default here (an unknown name, an empty class) gets the cpu one. What a
// client runs while the service has not answered: the C++ ConfigCache's fallback and the C
// ABI's fusetune_default_config.
KernelConfig DefaultConfigOfDeviceClass(std::string_view device_class, const AttentionProblem& problem);

// The backend part of a device class: its text before the first '/', e.g. "cuda" for
// "cuda/NVIDIA-H200/sm90"; the whole text when it has no '/'.
std::string_view BackendOfDeviceClass(std::string_view device_class);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_DEFAULT_CONFIG_H_
