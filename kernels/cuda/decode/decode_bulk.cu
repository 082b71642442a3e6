// The bulk-loading twins of the tensor-core decode instances, Q and O in fp16 or bf16
// (decode_kernel.cuh's bulk table; sm_90 only).
#include <vector>

#include "decode_kernel.cuh"

namespace fusetune::cuda::decode {

DecodeInstanceList DecodeBulkInstances() {
  static const std::vector<DecodeInstance>* const all = [] {
    auto* v = new std::vector<DecodeInstance>();
    for (DecodeInstanceList list : {DecodeBulkTable<__half>(), DecodeBulkTable<gpu::Bf16>()}) {
      v->insert(v->end(), list.data, list.data + list.size);
    }
    return v;
  }();
  return {all->data(), static_cast<int>(all->size())};
}

}  // namespace fusetune::cuda::decode
