// Internals of the CPU backend exposed for its tests and benchmarks: building the backend
// on a chosen instruction set instead of the best one, so every kernel build is tested on
// any host that can run it.
#ifndef FUSETUNE_KERNELS_CPU_CPU_BACKEND_INTERNAL_H_
#define FUSETUNE_KERNELS_CPU_CPU_BACKEND_INTERNAL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fusetune/kernels/backend.h"

namespace fusetune::cpu {

// Kernel builds this host can run, best first (e.g. {"avx512", "avx2", "generic"}).
std::vector<std::string> RunnableKernelIsas();

// The CPU backend on kernel build `isa`; nullptr when this host cannot run it.
std::unique_ptr<Backend> CreateCpuBackendForIsa(std::string_view isa);

}  // namespace fusetune::cpu

#endif  // FUSETUNE_KERNELS_CPU_CPU_BACKEND_INTERNAL_H_
