// The fp16 tensor-core decode instances (decode_kernel.cuh's table).
#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

DecodeInstanceList DecodeFp16Instances() { return DecodeMmaTable<__half>(); }

}  // namespace fusetune::cuda::decode
