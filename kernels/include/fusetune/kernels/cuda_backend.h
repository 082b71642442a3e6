// The CUDA backend (built when FUSETUNE_WITH_CUDA is ON).
//
// Thread-safety: as Backend (one instance per thread and device).
#ifndef FUSETUNE_KERNELS_CUDA_BACKEND_H_
#define FUSETUNE_KERNELS_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"

namespace fusetune {

// Unavailable when no CUDA device/driver is present (the message says why).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device_index);
// 0 when there is no driver or no device (never an error).
int CudaDeviceCount();

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_CUDA_BACKEND_H_
