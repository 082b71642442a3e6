// The HIP backend for AMD GPUs (built when FUSETUNE_WITH_HIP is ON): the kernel sources shared
// with the CUDA backend (fused SIMT, partial, materialized softmax) compiled by hipcc, and
// HIP-only tiled GEMMs for the baselines.
//
// Thread-safety: as Backend (one instance per thread and device).
#ifndef FUSETUNE_KERNELS_HIP_BACKEND_H_
#define FUSETUNE_KERNELS_HIP_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"

namespace fusetune {

// Unavailable when there is no AMD GPU (hipGetDeviceCount fails or finds none; the message
// says which) or the index is out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackend(int device_index);
// 0 when there is no ROCm driver or no device (never an error).
int HipDeviceCount();

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_HIP_BACKEND_H_
