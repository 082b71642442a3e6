// The fp64 reference attention: the oracle every backend's output is checked against.
//
// Computes softmax(scale * Q K^T + mask) V in double precision from float inputs (the
// caller passes inputs already rounded to the storage dtype, so the reference sees exactly
// what the kernel sees). Masks and layout as documented in problem.h; a query row that
// sees no key yields zeros. Non-finite scores (from Inf/NaN inputs): a -inf score gives its
// key weight 0 (like a mask), so a row whose visible scores are all -inf is zeros; a NaN or
// +inf score makes the whole row NaN.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_KERNELS_REFERENCE_H_
#define FUSETUNE_KERNELS_REFERENCE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {

// The scales of K/V stored as e4m3 (KvStorage::kE4m3): kv_heads each. The reference's k and v
// are then the e4m3 values themselves (E4m3ToFloat of the bytes, exact in float), and key j of
// KV head h stands for k * k[h] (value: v * v[h]), applied in double. Empty for any other
// problem.
struct KvScales {
  std::span<const float> k;
  std::span<const float> v;
};

// One output row: query token `token` (global row in [0, TotalQueries())), query head
// `head`. Writes head_dim doubles to `out`. InvalidArgument for an invalid problem, a
// token/head out of range, spans whose sizes do not match the problem, or scales missing for
// (or given to) a problem with K/V stored as e4m3.
absl::Status ReferenceAttentionRow(const AttentionProblem& problem, std::span<const float> q,
                                   std::span<const float> k, std::span<const float> v,
                                   int64_t token, int head, std::span<double> out,
                                   const KvScales& scales = {});

// The whole output, [total_q][q_heads][head_dim]. Same errors as above. Both take contiguous
// K/V: a paged problem is InvalidArgument (compute the reference of problem.Unpaged() on
// GatherPagedKV's tensors).
absl::StatusOr<std::vector<double>> ReferenceAttention(const AttentionProblem& problem,
                                                       std::span<const float> q,
                                                       std::span<const float> k,
                                                       std::span<const float> v,
                                                       const KvScales& scales = {});

// K or V of the paged problem `problem` gathered through its block table into the contiguous
// layout of problem.Unpaged(): [total_k][kv_heads][head_dim] with, for a uniform batch,
// kv_len rows per sequence (rows past a sequence's cache length are zero). `pool` is the
// paged tensor ([PoolPages()][page_block_size][kv_heads][head_dim]). InvalidArgument for a
// contiguous problem, a pool of the wrong size, or a table ValidateBlockTable refuses.
absl::StatusOr<std::vector<float>> GatherPagedKV(const AttentionProblem& problem, std::span<const float> pool,
                                                 std::span<const int32_t> block_table);

// Largest allowed |out - ref| / max|ref| for a precision and storage dtype on the tuner runner's own
// inputs (uniform in [-1, 1], scale 1/sqrt(head_dim)): the larger of
//   precision of the products: fp32 1e-4, tf32 5e-3, fp16 1e-2, bf16 3e-2
//   rounding of the stored output: fp32 0, fp16 2e-3, bf16 1.6e-2 (a few ulps of max|ref|)
// A dropped online-softmax rescale or an off-by-one mask gives errors of order 1e-1..1.
double ToleranceFor(Precision precision, DType dtype);

// Bound on every logit |scale * q.k| of the inputs: scale * max ||q row|| * max ||k row||
// (Cauchy-Schwarz; non-finite elements are skipped). On inputs in [-1, 1] with the default
// scale it is at most sqrt(head_dim). For K/V stored as e4m3, `k` holds the e4m3 values and
// each K row's norm is multiplied by its head's scale (scales.k) when they are given.
double LogitBound(const AttentionProblem& problem, const std::vector<float>& q,
                  const std::vector<float>& k, const KvScales& scales = {});

// The tolerance for inputs whose logits are bounded by `logit_bound`. Rounding the product
// operands to a mantissa with unit roundoff u (tf32 and fp16 2^-11, bf16 2^-8, fp32 2^-24)
// perturbs each logit by at most about 2u * |scale| * sum|q||k| <= 2u * logit_bound, and to
// first order the softmax output moves in proportion to that perturbation. The fixed
// tolerance above holds up to the bound of the runner's inputs, sqrt(head_dim); beyond it the
// tolerance grows by logit_bound / sqrt(head_dim), so a correct kernel on large-magnitude
// inputs (e.g. an exact TF32 emulation at |x| <= 4) is not failed, while on the runner's
// inputs nothing is looser than before.
double ToleranceFor(Precision precision, DType dtype, double logit_bound, int head_dim);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_REFERENCE_H_
