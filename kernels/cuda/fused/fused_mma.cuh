// Fused attention forward on tensor cores with mma.sync (sm_80+; also the sm_90a build):
// fp16 and bf16 operands (m16n8k16) or tf32 operands from fp32 storage (m16n8k8). The
// running max m, sum l and the O accumulator stay in fp32 registers.
//
// Block: block_m query rows of one (sequence, head), `warps` warps, each owning
// block_m/warps rows (1 or 2 m16 tiles). Q is loaded once (cp.async) and kept in registers
// as A fragments (ldmatrix). Per K/V tile of block_s keys: S = Q K^T from ldmatrix'd K,
// mask only on diagonal/tail tiles, online softmax in registers (exp2 with scale*log2(e)
// folded into one FFMA), then O += P V with P taken straight from the S accumulators
// (fp16/bf16: the C layout of two n8 tiles is the A layout of one k16 step; tf32: quad
// shuffles) and V from ldmatrix.trans (tf32: conflict-free scalar loads). K/V tiles stream
// through `stages` cp.async buffers; rows are padded by 16 bytes so every ldmatrix phase hits
// 8 distinct 16-byte bank groups.
#ifndef FUSETUNE_KERNELS_CUDA_FUSED_FUSED_MMA_CUH_
#define FUSETUNE_KERNELS_CUDA_FUSED_FUSED_MMA_CUH_

#include <cmath>

#include "fused_common.cuh"

namespace fusetune::cuda::fused {

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ uint32_t RoundToTf32(uint32_t bits) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(bits)));
  return r;
}

// c += a * b for one m16n8 tile; k16 for 16-bit operands, k8 for tf32.
template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void Mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma<float>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                           uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T, int D, int BM, int BS, int W, int ST>
struct MmaTraits {
  using Storage = T;
  static constexpr int kHeadDim = D, kBlockM = BM, kBlockS = BS, kWarps = W, kStages = ST;
  static constexpr int kThreads = 32 * W;
  static constexpr int kRowsPerWarp = BM / W;
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr bool kTf32 = sizeof(T) == 4;
  static constexpr int kPitch = D + 16 / static_cast<int>(sizeof(T));  // +16 bytes per row
  static constexpr int kRowBytes = kPitch * static_cast<int>(sizeof(T));
  static constexpr int kQkSteps = D * static_cast<int>(sizeof(T)) / 32;  // 32 bytes of d each
  static constexpr int kNTiles = BS / 8;
  static constexpr int kDTiles = D / 8;
  static constexpr int kSmemBytes = (BM + 2 * ST * BS) * kRowBytes;
  // Q fragments stay in registers for the whole loop when they cost at most 32 registers;
  // otherwise (head_dim 128 with two m16 tiles, tf32 head_dim 128) they are re-read from
  // shared memory at every k-step, which keeps the kernel under 255 registers.
  static constexpr bool kQInRegisters = kMTiles * kQkSteps * 4 <= 32;
  // Small head_dim-64 blocks of 4 warps fit three per SM by shared memory; cap registers at
  // 168 so that registers do not cut that to two (measured: occupancy dominates there).
  static constexpr int kMinBlocksPerSm =
      (kThreads == 128 && kMTiles == 1 && D == 64 && 3 * (kSmemBytes + 1024) <= 228 * 1024) ? 3 : 1;
  static_assert(kRowsPerWarp % 16 == 0, "block_m / warps must be a multiple of 16");
  static_assert(BS % 16 == 0, "block_s must be a multiple of 16");
  static_assert(ST >= 1 && ST <= 4, "stages in [1, 4]");
};

template <typename T>
constexpr PrecisionCode MmaPrecisionOf() {
  if constexpr (sizeof(T) == 4) {
    return PrecisionCode::kTf32;
  } else if constexpr (StorageOf<T>() == StorageCode::kFp16) {
    return PrecisionCode::kFp16;
  } else {
    return PrecisionCode::kBf16;
  }
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocksPerSm)
    FusedMmaKernel(const FusedKernelArgs a) {
  using T = typename Tr::Storage;
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BS = Tr::kBlockS, ST = Tr::kStages;
  constexpr int NT = Tr::kThreads, P = Tr::kPitch, RB = Tr::kRowBytes;
  constexpr int MT = Tr::kMTiles, NTILES = Tr::kNTiles, DTILES = Tr::kDTiles;
  constexpr int QKS = Tr::kQkSteps;
  constexpr bool kTf32 = Tr::kTf32;

  extern __shared__ __align__(128) unsigned char mma_smem[];
  T* sQ = reinterpret_cast<T*>(mma_smem);
  T* sK = sQ + BM * P;
  T* sV = sK + ST * BS * P;

  QueryBlock<T> blk;
  if (!LocateQueryBlock<T, BM, BS>(a, blk)) return;
  const int n_tiles = blk.n_tiles, n_unmasked = blk.n_unmasked;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int gr = lane / 4, tc = lane % 4;  // mma fragment row group / column pair
  const int warp_row0 = warp * Tr::kRowsPerWarp;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));

  if (n_tiles == 0) {
    ZeroBlockOutput<T, D, NT>(blk, a.o_row_stride);
    return;
  }

  LoadTileAsync<T, BM, D, P, NT>(sQ, blk.q, a.q_row_stride, blk.q_rows, tid);
  CpAsyncCommit();
  const KvTileLoader<T, BS, D, P, NT, ST> kv{sK, sV, blk.k, blk.v, a.k_row_stride,
                                            a.v_row_stride, blk.g.k_vis, tid};
  kv.Prologue(n_tiles);

  int row_vis[MT][2];
  float m_run[MT][2], l_run[MT][2];
  float acc[MT][DTILES][4];
  constexpr bool kQRegs = Tr::kQInRegisters;
  uint32_t qf[MT][kQRegs ? QKS : 1][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_vis[mt][r] = VisibleKeys(blk.g, blk.causal, blk.m0 + warp_row0 + mt * 16 + gr + 8 * r);
      m_run[mt][r] = -INFINITY;
      l_run[mt][r] = 0.f;
    }
#pragma unroll
    for (int dt = 0; dt < DTILES; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
  }
  const float c_log2 = a.scale_log2;
  const uint32_t sQ_addr = SmemAddress(sQ);
  const uint32_t sK_addr = SmemAddress(sK);
  const uint32_t sV_addr = SmemAddress(sV);
  // ldmatrix lane addressing (bytes within a tile): A operand rows lane%16, +16 B for lanes 16+;
  // B operand (K rows) rows lane%8 + 8*(lane/16), +16 B for lanes 8-15 and 24-31.
  const uint32_t a_lane_off = (lane % 16) * RB + (lane / 16) * 16;
  const uint32_t b_lane_off = ((lane % 8) + 8 * (lane / 16)) * RB + ((lane / 8) % 2) * 16;
  // V (ldmatrix.trans): key rows lane%8 + 8*((lane/8)%2), +16 B (8 columns) for lanes 16+.
  const uint32_t v_lane_off = ((lane % 8) + 8 * ((lane / 8) % 2)) * RB + (lane / 16) * 16;

  for (int j = 0; j < n_tiles; ++j) {
    const int buf = j % ST;
    KvPipelineEnterTile<ST>(kv, j, n_tiles);
    if constexpr (kQRegs) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int ks = 0; ks < (kQRegs ? QKS : 1); ++ks) {
            LdMatrixX4(qf[mt][ks], sQ_addr + (warp_row0 + mt * 16) * RB + a_lane_off + ks * 32);
            if constexpr (kTf32) {
#pragma unroll
              for (int e = 0; e < 4; ++e) qf[mt][ks][e] = RoundToTf32(qf[mt][ks][e]);
            }
          }
      }
    }

    // S = Q K^T
    float s[MT][NTILES][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
    const uint32_t k_base = sK_addr + buf * BS * RB + b_lane_off;
#pragma unroll
    for (int ks = 0; ks < QKS; ++ks) {
      if constexpr (!kQRegs) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          LdMatrixX4(qf[mt][0], sQ_addr + (warp_row0 + mt * 16) * RB + a_lane_off + ks * 32);
          if constexpr (kTf32) {
#pragma unroll
            for (int e = 0; e < 4; ++e) qf[mt][0][e] = RoundToTf32(qf[mt][0][e]);
          }
        }
      }
      constexpr int kq = 0;
#pragma unroll
      for (int np = 0; np < NTILES / 2; ++np) {
        uint32_t kb[4];
        LdMatrixX4(kb, k_base + np * 16 * RB + ks * 32);
        if constexpr (kTf32) {
#pragma unroll
          for (int e = 0; e < 4; ++e) kb[e] = RoundToTf32(kb[e]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t(&qa)[4] = qf[mt][kQRegs ? ks : kq];
          Mma<T>(s[mt][2 * np], qa, kb[0], kb[1]);
          Mma<T>(s[mt][2 * np + 1], qa, kb[2], kb[3]);
        }
      }
    }

    if (j >= n_unmasked) {  // diagonal / padded tail tile
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = j * BS + nt * 8 + 2 * tc + (e % 2);
            if (key >= row_vis[mt][e / 2]) s[mt][nt][e] = -INFINITY;
          }
    }

    // Online softmax: row gr (e = 0,1) and gr+8 (e = 2,3); a row is spread over a lane quad.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float alpha = OnlineSoftmaxRow<2 * NTILES, 4>(
            [&](int n) -> float& { return s[mt][n / 2][2 * r + n % 2]; }, m_run[mt][r], l_run[mt][r],
            c_log2);
#pragma unroll
        for (int dt = 0; dt < DTILES; ++dt) {
          acc[mt][dt][2 * r] *= alpha;
          acc[mt][dt][2 * r + 1] *= alpha;
        }
      }

    KvPipelineBetweenProducts<ST>(kv, j, n_tiles);

    // O += P V
    const uint32_t v_tile = sV_addr + buf * BS * RB;
    if constexpr (!kTf32) {
#pragma unroll
      for (int kk = 0; kk < BS / 16; ++kk) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = PackPair<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = PackPair<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = PackPair<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = PackPair<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vb[4];
          LdMatrixX4Trans(vb, v_tile + kk * 16 * RB + v_lane_off + dp * 32);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma<T>(acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
            Mma<T>(acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
          }
        }
      }
    } else {
      const float* v_s = reinterpret_cast<const float*>(sV + buf * BS * P);
      const int src_lo = (lane & ~3) | (tc >> 1);
      const int src_hi = src_lo + 2;
      const bool odd = (tc & 1) != 0;
#pragma unroll
      for (int kk = 0; kk < NTILES; ++kk) {
        // C layout (row gr, cols 2tc, 2tc+1) -> A layout (row gr, cols tc and tc+4).
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float* c = s[mt][kk];
          const float x0 = __shfl_sync(0xffffffffu, c[0], src_lo);
          const float x1 = __shfl_sync(0xffffffffu, c[1], src_lo);
          const float x2 = __shfl_sync(0xffffffffu, c[2], src_lo);
          const float x3 = __shfl_sync(0xffffffffu, c[3], src_lo);
          const float y0 = __shfl_sync(0xffffffffu, c[0], src_hi);
          const float y1 = __shfl_sync(0xffffffffu, c[1], src_hi);
          const float y2 = __shfl_sync(0xffffffffu, c[2], src_hi);
          const float y3 = __shfl_sync(0xffffffffu, c[3], src_hi);
          pa[mt][0] = RoundToTf32(__float_as_uint(odd ? x1 : x0));
          pa[mt][1] = RoundToTf32(__float_as_uint(odd ? x3 : x2));
          pa[mt][2] = RoundToTf32(__float_as_uint(odd ? y1 : y0));
          pa[mt][3] = RoundToTf32(__float_as_uint(odd ? y3 : y2));
        }
#pragma unroll
        for (int dt = 0; dt < DTILES; ++dt) {
          const uint32_t b0 = RoundToTf32(__float_as_uint(v_s[(kk * 8 + tc) * P + dt * 8 + gr]));
          const uint32_t b1 = RoundToTf32(__float_as_uint(v_s[(kk * 8 + tc + 4) * P + dt * 8 + gr]));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) Mma<T>(acc[mt][dt], pa[mt], b0, b1);
        }
      }
    }
  }
  CpAsyncWait<0>();

  // Normalise and stage this warp's rows in its own part of sQ (no other warp reads them),
  // then write 16-byte chunks.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      T* row = sQ + (warp_row0 + mt * 16 + gr + 8 * r) * P;
#pragma unroll
      for (int dt = 0; dt < DTILES; ++dt)
        StorePair<T>(row + dt * 8 + 2 * tc, acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
    }
  __syncwarp();
#pragma unroll
  for (int c = lane; c < Tr::kRowsPerWarp * kChunksPerRow; c += 32) {
    const int r = warp_row0 + c / kChunksPerRow, col = (c % kChunksPerRow) * kElemsPerChunk;
    if (r < blk.q_rows) {
      *reinterpret_cast<uint4*>(blk.o + r * a.o_row_stride + col) =
          *reinterpret_cast<const uint4*>(sQ + r * P + col);
    }
  }
}

template <class Tr>
cudaError_t LaunchMma(const FusedKernelArgs& a, cudaStream_t stream) {
  auto kernel = FusedMmaKernel<Tr>;
  if (const cudaError_t e = SetSharedMemoryLimitOnce<FusedMmaKernel<Tr>>(Tr::kSmemBytes); e != cudaSuccess) {
    return e;
  }
  const dim3 grid(CeilDiv(a.q_len, Tr::kBlockM), a.q_heads, a.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

template <typename T, int D, int BM, int BS, int W, int ST>
FusedInstance MmaInstance() {
  using Tr = MmaTraits<T, D, BM, BS, W, ST>;
  return FusedInstance{D,  StorageOf<T>(), MmaPrecisionOf<T>(), BM, BS, Tr::kThreads, ST,
                       Tr::kSmemBytes, &LaunchMma<Tr>};
}


// The instance tables, one per head_dim, shared by the fp16 and bf16 files (each .cu
// instantiates one storage type, so the two compile in parallel).
template <typename T>
FusedInstanceList MmaD64Table() {
  static const FusedInstance kInstances[] = {
      // block_m, block_s, warps, stages
      MmaInstance<T, 64, 64, 64, 4, 1>(),   MmaInstance<T, 64, 64, 64, 4, 2>(),
      MmaInstance<T, 64, 64, 128, 4, 1>(),  MmaInstance<T, 64, 64, 128, 4, 2>(),
      MmaInstance<T, 64, 128, 64, 8, 1>(),  MmaInstance<T, 64, 128, 64, 8, 2>(),
      MmaInstance<T, 64, 128, 128, 8, 1>(), MmaInstance<T, 64, 128, 128, 8, 2>(),
      MmaInstance<T, 64, 128, 64, 4, 1>(),  MmaInstance<T, 64, 128, 64, 4, 2>(),
      // two m16 tiles per warp: half the K/V shared-memory reads per FLOP
      MmaInstance<T, 64, 64, 64, 2, 1>(),   MmaInstance<T, 64, 64, 64, 2, 2>(),
  };
  return ListOf(kInstances);
}

template <typename T>
FusedInstanceList MmaD128Table() {
  static const FusedInstance kInstances[] = {
      // block_m, block_s, warps, stages
      MmaInstance<T, 128, 64, 32, 4, 1>(),   MmaInstance<T, 128, 64, 32, 4, 2>(),
      MmaInstance<T, 128, 64, 64, 4, 1>(),   MmaInstance<T, 128, 64, 64, 4, 2>(),
      MmaInstance<T, 128, 128, 32, 8, 1>(),  MmaInstance<T, 128, 128, 32, 8, 2>(),
      MmaInstance<T, 128, 128, 64, 8, 1>(),  MmaInstance<T, 128, 128, 64, 8, 2>(),
      MmaInstance<T, 128, 128, 128, 8, 1>(), MmaInstance<T, 128, 128, 128, 8, 2>(),
      // two m16 tiles per warp (Q re-read from shared memory): half the K/V reads per FLOP
      MmaInstance<T, 128, 128, 64, 4, 2>(),  MmaInstance<T, 128, 128, 32, 4, 2>(),
  };
  return ListOf(kInstances);
}

}  // namespace fusetune::cuda::fused

#endif  // FUSETUNE_KERNELS_CUDA_FUSED_FUSED_MMA_CUH_
