// Exact-fp32 SIMT instantiations for fp32 storage (the seed article's shapes).
//
// head_dim 64 uses the outer-product kernel (SimtOuterInstance<..., lanes, key groups,
// options>); for each (block_m, block_s, warps, stages) the layout kept is the faster of the two
// measured on the H200 (docs/perf.md, "CUDA fused kernel, exact fp32 (SIMT), outer-product
// layout"), the options streamed K/V copies and PV FMA order the fastest measured for that
// config (docs/perf.md, "..., round 2"; configs that are nowhere best keep none), and lazy
// rescaling where it measured faster (docs/perf.md, "..., lazy rescaling"). head_dim 128
// keeps the row-major kernel.
#include "fused_simt.cuh"

namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused {

FusedInstanceList SimtFp32StorageInstances() {
  constexpr int kCopiesAndPvOrder = kSimtStreamCopies | kSimtPvValueOuter;
  static const FusedInstance kInstances[] = {
      // head_dim 64: block_m, block_s, warps, stages, lanes per row group, key groups
      SimtOuterInstance<float, 64, 64, 64, 4, 1, 16, 1, kSimtPvValueOuter | kSimtLazyRescale>(),  // S = 2048 best
      SimtOuterInstance<float, 64, 64, 64, 4, 2, 8, 2, kSimtStreamCopies | kSimtLazyRescale>(),  // S = 512 best
      SimtOuterInstance<float, 64, 64, 64, 2, 1, 8, 1>(),    // 8 x 8 tiles, 2 warps
      SimtOuterInstance<float, 64, 64, 64, 2, 2, 8, 1>(),
      SimtOuterInstance<float, 64, 64, 64, 8, 1, 8, 2, kSimtStreamCopies | kSimtLazyRescale>(),
      SimtOuterInstance<float, 64, 64, 64, 8, 2, 8, 2, kSimtStreamCopies>(),
      SimtOuterInstance<float, 64, 64, 32, 4, 1, 8, 1, kCopiesAndPvOrder>(),
      SimtOuterInstance<float, 64, 64, 32, 4, 2, 8, 1, kCopiesAndPvOrder>(),
      SimtOuterInstance<float, 64, 128, 64, 8, 1, 8, 2, kSimtLazyRescale>(),
      SimtOuterInstance<float, 64, 128, 64, 8, 2, 8, 2>(),
      SimtOuterInstance<float, 64, 128, 64, 4, 1, 8, 1>(),
      SimtOuterInstance<float, 64, 128, 32, 8, 1, 8, 1, kSimtLazyRescale>(),
      SimtOuterInstance<float, 64, 128, 32, 8, 2, 8, 1, kSimtLazyRescale>(),
      SimtOuterInstance<float, 64, 32, 64, 2, 1, 16, 1>(),
      SimtOuterInstance<float, 64, 32, 64, 4, 1, 8, 2>(),    // S = 128, 256, 1024 best
      // head_dim 128
      SimtInstance<float, 128, 64, 32, 4, 1>(),  SimtInstance<float, 128, 64, 32, 4, 2>(),
      SimtInstance<float, 128, 64, 64, 4, 1>(),  SimtInstance<float, 128, 64, 64, 4, 2>(),
      SimtInstance<float, 128, 64, 32, 8, 1>(),  SimtInstance<float, 128, 64, 32, 8, 2>(),
      SimtInstance<float, 128, 32, 32, 4, 1>(),  SimtInstance<float, 128, 32, 32, 4, 2>(),
  };
  return ListOf(kInstances);
}

}  // namespace fusetune::FUSETUNE_GPU_NAMESPACE::fused
