// The kernel bodies built for one instruction set (generic); flags in CMakeLists.txt,
// chosen at run time by cpu_backend.cc.
#define FUSETUNE_CPU_ISA generic
#define FUSETUNE_CPU_ISA_NAME "generic"
#include "attention_kernels.inc"

namespace fusetune::cpu {
const CpuKernelTable& GenericKernels() { return generic::Kernels(); }
}  // namespace fusetune::cpu
