// SM clock, power and throttle readings through NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1").
//
// NVML ships with the driver, so it is never linked: a binary must start on a machine with
// the CUDA toolkit but no driver (CI). Every function returns 0 (or an unknown DeviceState)
// when NVML or the device is unavailable.
//
// Thread-safety: safe to call from any thread (NVML is loaded once, under std::call_once).
#ifndef FUSETUNE_KERNELS_CUDA_NVML_CLOCK_H_
#define FUSETUNE_KERNELS_CUDA_NVML_CLOCK_H_

#include <string>

#include "fusetune/kernels/backend.h"

namespace fusetune::cuda {

// Maximum SM clock in MHz of the device with this PCI bus id (cudaDeviceGetPCIBusId form).
int NvmlMaxSmClockMhz(const std::string& pci_bus_id);

// That device's current SM clock, board power and clocks-event (throttle) reasons, with the
// GPU-idle reason cleared (it only says no kernel was running at the instant of the read).
// known = true when the SM clock could be read; power_mw and throttle_reasons stay 0 where
// the board or driver does not report them.
DeviceState NvmlDeviceState(const std::string& pci_bus_id);

}  // namespace fusetune::cuda

#endif  // FUSETUNE_KERNELS_CUDA_NVML_CLOCK_H_
