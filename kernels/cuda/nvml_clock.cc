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
// nvmlClocksEventReasonGpuIdle: nothing is running, the clocks are allowed to drop.
constexpr unsigned long long kNvmlReasonGpuIdle = 0x1ull;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*max_clock_info)(NvmlDevice, int, unsigned int*) = nullptr;
  // Optional: a missing one leaves its DeviceState field at 0.
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*) = nullptr;
  NvmlReturn (*clocks_event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
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
    nvml.power_usage = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*)>(
        dlsym(lib, "nvmlDeviceGetPowerUsage"));
    // Drivers before 535 have only the older name of the same call.
    void* reasons = dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr) reasons = dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    nvml.clocks_event_reasons =
        reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(reasons);
    if (nvml.init == nullptr || nvml.handle_by_pci == nullptr || nvml.clock_info == nullptr ||
        nvml.max_clock_info == nullptr) {
      return;  // the library stays loaded; harmless
    }
    nvml.ok = nvml.init() == 0;
  });
  return nvml;
}

// The NVML handle of the device, or nullptr.
NvmlDevice Handle(const Nvml& nvml, const std::string& pci_bus_id) {
  if (!nvml.ok || pci_bus_id.empty()) return nullptr;
  NvmlDevice device = nullptr;
  if (nvml.handle_by_pci(pci_bus_id.c_str(), &device) != 0) return nullptr;
  return device;
}

}  // namespace

int NvmlMaxSmClockMhz(const std::string& pci_bus_id) {
  const Nvml& nvml = LoadNvml();
  NvmlDevice device = Handle(nvml, pci_bus_id);
  if (device == nullptr) return 0;
  unsigned int mhz = 0;
  return nvml.max_clock_info(device, kNvmlClockSm, &mhz) == 0 ? static_cast<int>(mhz) : 0;
}

DeviceState NvmlDeviceState(const std::string& pci_bus_id) {
  DeviceState state;
  const Nvml& nvml = LoadNvml();
  NvmlDevice device = Handle(nvml, pci_bus_id);
  if (device == nullptr) return state;
  unsigned int mhz = 0;
  if (nvml.clock_info(device, kNvmlClockSm, &mhz) != 0) return state;
  state.known = true;
  state.sm_clock_mhz = static_cast<int>(mhz);
  unsigned int milliwatts = 0;
  if (nvml.power_usage != nullptr && nvml.power_usage(device, &milliwatts) == 0) {
    state.power_mw = static_cast<int>(milliwatts);
  }
  unsigned long long reasons = 0;
  if (nvml.clocks_event_reasons != nullptr && nvml.clocks_event_reasons(device, &reasons) == 0) {
    state.throttle_reasons = static_cast<uint64_t>(reasons & ~kNvmlReasonGpuIdle);
  }
  return state;
}

}  // namespace fusetune::cuda
