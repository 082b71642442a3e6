#include "fused/fused_tensor_map.h"

namespace fusetune::cuda::fused {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn LookupEncoder() {
  static const EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    // 12000: the ABI of cuTensorMapEncodeTiled as introduced in CUDA 12.0.
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      return nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

}  // namespace

cudaError_t EncodeRowTileMap(CUtensorMap* map, const void* base, StorageCode storage,
                             int head_dim, int heads, int64_t rows, int64_t row_stride,
                             int64_t head_stride, int box_rows) {
  const EncodeTiledFn encode = LookupEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  CUtensorMapDataType type;
  switch (storage) {
    case StorageCode::kFp16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case StorageCode::kBf16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    default: return cudaErrorNotSupported;
  }
  if (rows <= 0 || heads <= 0 || head_dim % 64 != 0 || box_rows <= 0 || box_rows > 256) {
    return cudaErrorInvalidValue;
  }
  constexpr int64_t kElem = 2;
  // Innermost first: head_dim columns, heads, rows.
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride * kElem),
                                 static_cast<cuuint64_t>(row_stride * kElem)};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};  // 64 x 2 B = one swizzle row
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace fusetune::cuda::fused
