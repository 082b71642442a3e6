// What the CPU backend reports about its host (Backend::Describe) and the ISA it dispatches.
//
// Thread-safety: pure functions (read /proc and /sys).
#ifndef FUSETUNE_KERNELS_CPU_HOST_INFO_H_
#define FUSETUNE_KERNELS_CPU_HOST_INFO_H_

#include <cstdint>
#include <string>

#include "fusetune/kernels/backend.h"

namespace fusetune::cpu {

// Best instruction set the kernels are built for and this CPU runs: "avx512", "avx2" (with
// FMA) or "generic".
std::string BestKernelIsa();

// Last-level cache in bytes (L3, else L2); a conservative 32 MiB when unknown.
int64_t LastLevelCacheBytes();

// Describe() of the CPU backend; `kernel_isa` goes into the driver field.
DeviceInfo DescribeHost(const std::string& kernel_isa);

}  // namespace fusetune::cpu

#endif  // FUSETUNE_KERNELS_CPU_HOST_INFO_H_
