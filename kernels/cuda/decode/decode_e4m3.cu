// The tensor-core decode instances over e4m3 K/V, Q and O in fp16 or bf16 (decode_kernel.cuh's
// e4m3 table).
#include <vector>

#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

DecodeInstanceList DecodeE4m3Instances() {
  static const std::vector<DecodeInstance>* const all = [] {
    auto* v = new std::vector<DecodeInstance>();
    for (DecodeInstanceList list : {DecodeE4m3Table<__half>(), DecodeE4m3Table<gpu::Bf16>()}) {
      v->insert(v->end(), list.data, list.data + list.size);
    }
    return v;
  }();
  return {all->data(), static_cast<int>(all->size())};
}

}  // namespace fusetune::cuda::decode
