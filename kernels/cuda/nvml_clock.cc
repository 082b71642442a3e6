#include "nvml_clock.h"

#include <dlfcn.h>

#include <mutex>

namespace fusetune::cuda {
namespace {

// The few NVML declarations needed, from NVML's documented C API (nvml.h is not required
// at build time).
using NvmlReturn = int;  // NVML_SUCCESS == 0
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*max_clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  bool ok = false;
};

const Nvml& LoadNvml() {
  static Nvml nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    nvml.init = reinterpret_cast<NvmlReturn (*)()>(dlsym(lib, "nvmlInit_v2"));
    nvml.handle_by_pci = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
        dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    nvml.clock_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(
        dlsym(lib, "nvmlDeviceGetClockInfo"));
    nvml.max_clock_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(
        dlsym(lib, "nvmlDeviceGetMaxClockInfo"));
    if (nvml.init == nullptr || nvml.handle_by_pci == nullptr || nvml.clock_info == nullptr ||
        nvml.max_clock_info == nullptr) {
      return;  // the library stays loaded; harmless
    }
    nvml.ok = nvml.init() == 0;
  });
  return nvml;
}

int Query(const std::string& pci_bus_id, bool max_clock) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok || pci_bus_id.empty()) return 0;
  NvmlDevice device = nullptr;
  if (nvml.handle_by_pci(pci_bus_id.c_str(), &device) != 0) return 0;
  unsigned int mhz = 0;
  const NvmlReturn r = max_clock ? nvml.max_clock_info(device, kNvmlClockSm, &mhz)
                                 : nvml.clock_info(device, kNvmlClockSm, &mhz);
  return r == 0 ? static_cast<int>(mhz) : 0;
}

}  // namespace

int NvmlSmClockMhz(const std::string& pci_bus_id) { return Query(pci_bus_id, false); }
int NvmlMaxSmClockMhz(const std::string& pci_bus_id) { return Query(pci_bus_id, true); }

}  // namespace fusetune::cuda
