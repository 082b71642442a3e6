// Non-x86 hosts: only the portable build of the kernel bodies exists; the AVX tables alias it.
#include "attention_cpu_params.h"

namespace fusetune::cpu {
const CpuKernelTable& Avx2Kernels() { return GenericKernels(); }
const CpuKernelTable& Avx512Kernels() { return GenericKernels(); }
}  // namespace fusetune::cpu
