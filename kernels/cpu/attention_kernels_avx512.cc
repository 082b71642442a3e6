// The kernel bodies built for one instruction set (avx512); flags in CMakeLists.txt,
// chosen at run time by cpu_backend.cc.
#define FUSETUNE_CPU_ISA avx512
#define FUSETUNE_CPU_ISA_NAME "avx512"
#define FUSETUNE_CPU_REGISTER_BLOCK 8
#include "attention_kernels.inc"

namespace fusetune::cpu {
const CpuKernelTable& Avx512Kernels() { return avx512::Kernels(); }
}  // namespace fusetune::cpu
