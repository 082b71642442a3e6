// Twins of the decode preset's picks with one K/V pipeline per block (a barrier per tile) where
// the instances themselves run one per warp: the development driver times the two side by side
// (`decode_dev pair SHAPE NAME SPLITS NAME/block SPLITS`). Not part of the library.
#include <vector>

#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

DecodeInstanceList DecodeBlockPipelineInstances() {
  using Bf16 = gpu::Bf16;
  using E4m3 = uint8_t;
  static const DecodeInstance kInstances[] = {
      DecodeMmaInstance<Bf16, 128, 16, 128, 8, 3, Bf16, true>(),
      DecodeMmaInstance<Bf16, 128, 16, 64, 4, 3, Bf16, true>(),
      DecodeMmaInstance<Bf16, 128, 16, 64, 4, 4, Bf16, true>(),
      DecodeMmaInstance<Bf16, 128, 16, 256, 8, 3, E4m3, true>(),
      DecodeMmaInstance<Bf16, 128, 16, 128, 8, 3, E4m3, true>(),
  };
  return DecodeListOf(kInstances);
}

}  // namespace fusetune::cuda::decode
