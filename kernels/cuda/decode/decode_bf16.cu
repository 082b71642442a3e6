// The bf16 tensor-core decode instances (decode_kernel.cuh's table).
#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

DecodeInstanceList DecodeBf16Instances() { return DecodeMmaTable<gpu::Bf16>(); }

}  // namespace fusetune::cuda::decode
