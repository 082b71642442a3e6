// The exact-fp32 (SIMT) decode instances (decode_kernel.cuh's table).
#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

// The exact-fp32 table (fp32 storage).
DecodeInstanceList DecodeFp32Instances() {
  static const DecodeInstance kInstances[] = {
      // head_dim, block_m, block_s, warps, stages
      DecodeSimtInstance<float, 64, 16, 32, 4, 2>(),  DecodeSimtInstance<float, 64, 16, 64, 4, 2>(),
      DecodeSimtInstance<float, 64, 16, 32, 4, 3>(),  DecodeSimtInstance<float, 128, 16, 32, 4, 2>(),
      DecodeSimtInstance<float, 128, 16, 64, 4, 2>(), DecodeSimtInstance<float, 128, 16, 32, 4, 3>(),
  };
  return DecodeListOf(kInstances);
}

}  // namespace fusetune::cuda::decode
