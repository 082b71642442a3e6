// The HIP materialized and partial variants' GEMMs (Debian 12 has no hipBLAS/rocBLAS): plain
// shared-memory tiled kernels over a GEMM group's (sequence, q head) entries, reading Q/K/V/O
// in problem.h's layout directly (GQA: q head h reads kv head h / heads_per_kv), with fp32
// accumulation. Host-callable launchers only (no absl), shared by hip_gemm.cu (hipcc) and the
// backend (C++ compiler).
//
// Every launcher is asynchronous on `stream` and returns the launch error (hipSuccess when
// accepted). Arguments are trusted: the backend validated them.
#ifndef FUSETUNE_KERNELS_HIP_HIP_GEMM_H_
#define FUSETUNE_KERNELS_HIP_HIP_GEMM_H_

#include <cstdint>

#include "../cuda/baseline_kernels.h"  // ElemType
#include "../gpu/gpu_runtime.h"

namespace fusetune::hip {

// One GEMM group (baseline_plan.h) in problem.h's token layout.
struct AttentionGemmArgs {
  const void* q = nullptr;  // [tokens][q_heads][head_dim], in_type
  const void* k = nullptr;  // [tokens][kv_heads][head_dim]
  const void* v = nullptr;
  void* o = nullptr;        // like q
  float* scores = nullptr;  // S, [entries][q_len][ld] fp32 (ScoresGemm)
  const void* probs = nullptr;  // P, [entries][q_len][ld], in_type (ProbsValueGemm)
  ElemType in_type = ElemType::kF32;
  int head_dim = 64;
  int q_heads = 1, kv_heads = 1;
  int64_t q_first_row = 0, k_first_row = 0;  // token rows of the group's first sequence
  int64_t q_seq_stride = 0, k_seq_stride = 0;
  int64_t entries = 0;  // sequences * q_heads
  int q_len = 0, k_len = 0, ld = 0;
};

// S[e][i][j] = Q_e[i] . K_e[j] for i < q_len, j < k_len (unscaled).
hipError_t LaunchScoresGemm(const AttentionGemmArgs& args, hipStream_t stream);
// O_e[i] = sum_{j < k_len} P[e][i][j] V_e[j], written in the storage type.
hipError_t LaunchProbsValueGemm(const AttentionGemmArgs& args, hipStream_t stream);

}  // namespace fusetune::hip

#endif  // FUSETUNE_KERNELS_HIP_HIP_GEMM_H_
