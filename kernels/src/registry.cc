#include <string>

#include "absl/strings/str_cat.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/cpu_backend.h"
#if defined(FUSETUNE_HAVE_CUDA)
#include "fusetune/kernels/cuda_backend.h"
#endif
#if defined(FUSETUNE_HAVE_HIP)
#include "fusetune/kernels/hip_backend.h"
#endif

namespace fusetune {

int CountDevices(std::string_view name) {
  if (name == "cpu") return 1;
#if defined(FUSETUNE_HAVE_CUDA)
  if (name == "cuda") return CudaDeviceCount();
#endif
#if defined(FUSETUNE_HAVE_HIP)
  if (name == "hip") return HipDeviceCount();
#endif
  return 0;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name, int device_index) {
  if (device_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device index must be >= 0, got ", device_index));
  }
  if (name == "cpu") {
    if (device_index != 0) return absl::InvalidArgumentError("the cpu backend has one device (index 0)");
    return CreateCpuBackend();
  }
  if (name == "cuda") {
#if defined(FUSETUNE_HAVE_CUDA)
    return CreateCudaBackend(device_index);
#else
    return absl::UnavailableError("this build has no CUDA backend (configure with -DFUSETUNE_WITH_CUDA=ON)");
#endif
  }
  if (name == "hip") {
#if defined(FUSETUNE_HAVE_HIP)
    return CreateHipBackend(device_index);
#else
    return absl::UnavailableError("this build has no HIP backend (configure with -DFUSETUNE_WITH_HIP=ON)");
#endif
  }
  return absl::NotFoundError(absl::StrCat("unknown backend '", std::string(name), "' (known: cpu, cuda, hip)"));
}

}  // namespace fusetune
