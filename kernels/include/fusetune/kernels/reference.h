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
#include "fusetune/kernels/problem.h"

namespace fusetune {

// One output row: query token `token` (global row in [0, TotalQueries())), query head
// `head`. Writes head_dim doubles to `out`. InvalidArgument for an invalid problem, a
// token/head out of range, or spans whose sizes do not match the problem.
absl::Status ReferenceAttentionRow(const AttentionProblem& problem, std::span<const float> q,
                                   std::span<const float> k, std::span<const float> v,
                                   int64_t token, int head, std::span<double> out);

// The whole output, [total_q][q_heads][head_dim]. Same errors as above.
absl::StatusOr<std::vector<double>> ReferenceAttention(const AttentionProblem& problem,
                                                       std::span<const float> q,
                                                       std::span<const float> k,
                                                       std::span<const float> v);

// Index of the sequence that global query row `token` belongs to (binary search over
// cu_seqlens for varlen problems). Requires a valid problem and token in range.
int SequenceOfQueryToken(const AttentionProblem& problem, int64_t token);

// Number of keys visible to query `i` (0-based within its sequence b): the causal and
// padding masks in one place, so every backend agrees. Keys [0, result) are visible.
int VisibleKeysForQuery(const AttentionProblem& problem, int b, int i);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_REFERENCE_H_
