// Exact-fp32 SIMT instantiations for fp32 storage (the seed article's shapes).
//
// EXPLORATION BUILD: for head_dim 64 each config key has up to three kernels (the row-major
// SimtTraits kernel and two outer-product layouts), picked per process by the environment
// variable FUSETUNE_SIMT_VARIANT (0, 1 = default, 2) so that one device call times them all.
#include <algorithm>
#include <cstdlib>

#include "fused_simt.cuh"

namespace fusetune::cuda::fused {
namespace {

int SimtVariant() {
  static const int v = [] {
    const char* e = std::getenv("FUSETUNE_SIMT_VARIANT");
    return e != nullptr ? std::atoi(e) : 1;
  }();
  return v;
}

template <class L, class A, class B>
cudaError_t LaunchChoice(const FusedKernelArgs& a, cudaStream_t s) {
  switch (SimtVariant()) {
    case 0: return LaunchSimt<L>(a, s);
    case 2: return LaunchSimtOuter<B>(a, s);
    default: return LaunchSimtOuter<A>(a, s);
  }
}

template <int BM, int BS, int W, int ST, int TXA, int GA, int TXB, int GB>
FusedInstance Choice() {
  using L = SimtTraits<float, 64, BM, BS, W, ST>;
  using A = SimtOuterTraits<float, 64, BM, BS, W, ST, TXA, GA>;
  using B = SimtOuterTraits<float, 64, BM, BS, W, ST, TXB, GB>;
  const int smem = std::max({L::kSmemBytes, A::kSmemBytes, B::kSmemBytes});
  return FusedInstance{64, StorageCode::kFp32, PrecisionCode::kFp32, BM, BS, 32 * W, ST, smem,
                       &LaunchChoice<L, A, B>};
}

}  // namespace

FusedInstanceList SimtFp32StorageInstances() {
  static const FusedInstance kInstances[] = {
      // head_dim 64: block_m, block_s, warps, stages; (lanes, groups) of variants 1 and 2
      Choice<64, 64, 4, 1, 8, 2, 16, 1>(),  Choice<64, 64, 4, 2, 8, 2, 16, 1>(),
      Choice<64, 64, 2, 1, 8, 1, 8, 1>(),   Choice<64, 64, 2, 2, 8, 1, 8, 1>(),
      Choice<64, 64, 8, 2, 8, 2, 16, 1>(),  Choice<64, 64, 8, 1, 8, 2, 16, 1>(),
      Choice<64, 32, 4, 1, 8, 1, 8, 1>(),   Choice<64, 32, 4, 2, 8, 1, 8, 1>(),
      Choice<128, 64, 8, 1, 8, 2, 16, 1>(), Choice<128, 64, 8, 2, 8, 2, 16, 1>(),
      Choice<128, 64, 4, 1, 8, 1, 8, 1>(),
      Choice<128, 32, 8, 1, 8, 1, 8, 1>(),  Choice<128, 32, 8, 2, 8, 1, 8, 1>(),
      Choice<32, 64, 2, 1, 16, 1, 16, 1>(), Choice<32, 64, 4, 1, 8, 2, 8, 2>(),
      // head_dim 128
      SimtInstance<float, 128, 64, 32, 4, 1>(),  SimtInstance<float, 128, 64, 32, 4, 2>(),
      SimtInstance<float, 128, 64, 64, 4, 1>(),  SimtInstance<float, 128, 64, 64, 4, 2>(),
      SimtInstance<float, 128, 64, 32, 8, 1>(),  SimtInstance<float, 128, 64, 32, 8, 2>(),
      SimtInstance<float, 128, 32, 32, 4, 1>(),  SimtInstance<float, 128, 32, 32, 4, 2>(),
  };
  return {kInstances, static_cast<int>(sizeof(kInstances) / sizeof(kInstances[0]))};
}

}  // namespace fusetune::cuda::fused
