// Tiled GEMMs of the HIP baselines (hip_gemm.h): 16 x 16 output tiles, one output per thread,
// 16-wide slices of the reduction staged in shared memory as fp32 (storage converted on load),
// every product an fp32 FMA. Plain and portable rather than fast: the baseline every speedup is
// measured against on a ROCm host without hipBLAS (with hipBLAS, the backend uses it instead).
#include "hip_gemm.h"

#include "../cuda/device_common.cuh"  // ToFloat / FromFloat

namespace fusetune::hip {
namespace {

constexpr int kTile = 16;
constexpr int kThreads = kTile * kTile;
constexpr unsigned kMaxGridZ = 65535;  // entries beyond it loop

struct EntryBases {
  int64_t q_row, k_row;  // token rows of the entry's first query and key
  int h, kvh;
};

__device__ __forceinline__ EntryBases LocateEntry(const AttentionGemmArgs& a, int64_t e) {
  EntryBases b;
  const int64_t seq = e / a.q_heads;
  b.h = static_cast<int>(e % a.q_heads);
  b.kvh = b.h / (a.q_heads / a.kv_heads);
  b.q_row = a.q_first_row + seq * a.q_seq_stride;
  b.k_row = a.k_first_row + seq * a.k_seq_stride;
  return b;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) ScoresGemmKernel(const AttentionGemmArgs a) {
  __shared__ float qs[kTile][kTile + 1];
  __shared__ float ks[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int i0 = blockIdx.y * kTile, j0 = blockIdx.x * kTile;
  const int d = a.head_dim;
  const int64_t q_stride = static_cast<int64_t>(a.q_heads) * d;
  const int64_t k_stride = static_cast<int64_t>(a.kv_heads) * d;
  for (int64_t e = blockIdx.z; e < a.entries; e += gridDim.z) {
    const EntryBases b = LocateEntry(a, e);
    const T* q = static_cast<const T*>(a.q) + b.q_row * q_stride + static_cast<int64_t>(b.h) * d;
    const T* k = static_cast<const T*>(a.k) + b.k_row * k_stride + static_cast<int64_t>(b.kvh) * d;
    float acc = 0.0f;
    for (int r0 = 0; r0 < d; r0 += kTile) {
      qs[ty][tx] = i0 + ty < a.q_len ? ToFloat<T>(q[(i0 + ty) * q_stride + r0 + tx]) : 0.0f;
      ks[ty][tx] = j0 + ty < a.k_len ? ToFloat<T>(k[(j0 + ty) * k_stride + r0 + tx]) : 0.0f;
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kTile; ++r) acc = fmaf(qs[ty][r], ks[tx][r], acc);
      __syncthreads();
    }
    if (i0 + ty < a.q_len && j0 + tx < a.k_len) {
      a.scores[(e * a.q_len + i0 + ty) * a.ld + j0 + tx] = acc;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) ProbsValueGemmKernel(const AttentionGemmArgs a) {
  __shared__ float ps[kTile][kTile + 1];
  __shared__ float vs[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int i0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int d = a.head_dim;
  const int64_t q_stride = static_cast<int64_t>(a.q_heads) * d;
  const int64_t k_stride = static_cast<int64_t>(a.kv_heads) * d;
  const T* probs = static_cast<const T*>(a.probs);
  for (int64_t e = blockIdx.z; e < a.entries; e += gridDim.z) {
    const EntryBases b = LocateEntry(a, e);
    const T* v = static_cast<const T*>(a.v) + b.k_row * k_stride + static_cast<int64_t>(b.kvh) * d;
    T* o = static_cast<T*>(a.o) + b.q_row * q_stride + static_cast<int64_t>(b.h) * d;
    const T* p = probs + e * a.q_len * static_cast<int64_t>(a.ld);
    float acc = 0.0f;
    for (int j0 = 0; j0 < a.k_len; j0 += kTile) {
      // Columns of P at or past k_len are never written: never read them.
      ps[ty][tx] = i0 + ty < a.q_len && j0 + tx < a.k_len
                       ? ToFloat<T>(p[(i0 + ty) * static_cast<int64_t>(a.ld) + j0 + tx])
                       : 0.0f;
      vs[ty][tx] = j0 + ty < a.k_len ? ToFloat<T>(v[(j0 + ty) * k_stride + c0 + tx]) : 0.0f;
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kTile; ++r) acc = fmaf(ps[ty][r], vs[r][tx], acc);
      __syncthreads();
    }
    if (i0 + ty < a.q_len) o[(i0 + ty) * q_stride + c0 + tx] = FromFloat<T>(acc);
  }
}

dim3 GridOf(int cols, const AttentionGemmArgs& a) {
  const int64_t z = a.entries < kMaxGridZ ? a.entries : kMaxGridZ;
  return dim3(static_cast<unsigned>((cols + kTile - 1) / kTile),
              static_cast<unsigned>((a.q_len + kTile - 1) / kTile), static_cast<unsigned>(z));
}

template <template <typename> class Launch>
hipError_t ByType(const AttentionGemmArgs& a, hipStream_t stream) {
  switch (a.in_type) {
    case ElemType::kF32: return Launch<float>::Run(a, stream);
    case ElemType::kF16: return Launch<gpu::Half>::Run(a, stream);
    case ElemType::kBf16: return Launch<gpu::Bf16>::Run(a, stream);
  }
  return hipErrorInvalidValue;
}

template <typename T>
struct ScoresLaunch {
  static hipError_t Run(const AttentionGemmArgs& a, hipStream_t stream) {
    hipLaunchKernelGGL(ScoresGemmKernel<T>, GridOf(a.k_len, a), dim3(kThreads), 0, stream, a);
    return hipGetLastError();
  }
};
template <typename T>
struct ProbsValueLaunch {
  static hipError_t Run(const AttentionGemmArgs& a, hipStream_t stream) {
    hipLaunchKernelGGL(ProbsValueGemmKernel<T>, GridOf(a.head_dim, a), dim3(kThreads), 0, stream, a);
    return hipGetLastError();
  }
};

bool Valid(const AttentionGemmArgs& a) {
  return a.head_dim % kTile == 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0;
}

}  // namespace

hipError_t LaunchScoresGemm(const AttentionGemmArgs& args, hipStream_t stream) {
  if (!Valid(args)) return hipErrorInvalidValue;
  if (args.entries == 0 || args.q_len == 0 || args.k_len == 0) return hipSuccess;
  return ByType<ScoresLaunch>(args, stream);
}

hipError_t LaunchProbsValueGemm(const AttentionGemmArgs& args, hipStream_t stream) {
  if (!Valid(args)) return hipErrorInvalidValue;
  if (args.entries == 0 || args.q_len == 0) return hipSuccess;
  return ByType<ProbsValueLaunch>(args, stream);
}

}  // namespace fusetune::hip
