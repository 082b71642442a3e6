// The kernel bodies built for one instruction set (avx2); flags in CMakeLists.txt,
// chosen at run time by cpu_backend.cc.
#define FUSETUNE_CPU_ISA avx2
#define FUSETUNE_CPU_ISA_NAME "avx2"
#include "attention_kernels.inc"

namespace fusetune::cpu {
const CpuKernelTable& Avx2Kernels() { return avx2::Kernels(); }
}  // namespace fusetune::cpu
