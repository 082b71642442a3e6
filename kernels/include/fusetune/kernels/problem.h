// AttentionProblem: the shape of one attention call, independent of how it is computed.
//
// Memory layout (every backend, every variant): tokens-major, heads inner.
//   Q, O : [total_q][q_heads][head_dim]
//   K, V : [total_k][kv_heads][head_dim]
// where total_q = batch * q_len for a uniform batch, or cu_seqlens_q.back() for a varlen
// (packed) batch; likewise for K/V. Sequence b's tokens are rows
// [QueryStart(b), QueryStart(b) + QueryLen(b)). Query head h reads key/value head
// h / (q_heads / kv_heads) (GQA; MQA when kv_heads == 1).
//
// Masks:
//   * key padding: for a uniform batch, kv_valid_lens[b] (if given) hides keys >= that
//     length in sequence b (the rows still exist in memory);
//   * causal: bottom-right aligned as in FlashAttention-2: query i of a sequence with
//     q visible queries and k visible keys sees keys j <= i + (k - q). A query that sees no
//     key at all (possible when q > k, or k == 0) produces an all-zero output row.
//
// Thread-safety: a plain value type; const methods are safe to call concurrently.
#ifndef FUSETUNE_KERNELS_PROBLEM_H_
#define FUSETUNE_KERNELS_PROBLEM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fusetune {

// Storage type of Q, K, V and O in memory.
enum class DType { kFp32, kFp16, kBf16 };

// "fp32", "fp16", "bf16".
std::string_view DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(std::string_view name);
// Bytes per element of the storage type.
int DTypeBytes(DType dtype);

// Prefill: many queries per sequence. Decode: one query per sequence against a long KV cache.
enum class ProblemKind { kPrefill, kDecode };
std::string_view ProblemKindName(ProblemKind kind);
absl::StatusOr<ProblemKind> ParseProblemKind(std::string_view name);

// Supported head dimensions across the family (backends may support a subset; they say so
// in Backend::CanImplement).
inline constexpr int kMinHeadDim = 32;
inline constexpr int kMaxHeadDim = 256;
// Upper bounds that keep every derived size within int32/int64 arithmetic and memory sane.
inline constexpr int64_t kMaxBatch = 1 << 16;
inline constexpr int64_t kMaxHeads = 1 << 10;
inline constexpr int64_t kMaxSeqLen = 1 << 20;
inline constexpr int64_t kMaxTotalElements = int64_t{1} << 34;  // per tensor
// Largest softmax scale: kernels compute exp2 with the factor scale * log2(e), which must be a
// finite float (FLT_MAX / log2(e) is about 2.36e38). Validate() refuses larger scales.
inline constexpr float kMaxSoftmaxScale = 2e38f;

struct AttentionProblem {
  ProblemKind kind = ProblemKind::kPrefill;
  int batch = 1;
  int q_heads = 1;
  int kv_heads = 1;  // must divide q_heads
  // Uniform batch: every sequence has q_len queries and kv_len keys.
  // Varlen batch: the maximum over sequences (informational; the lengths come from cu_seqlens).
  int q_len = 0;
  int kv_len = 0;
  // Varlen (packed) batch: prefix sums of per-sequence lengths, batch + 1 entries starting at
  // 0, non-decreasing. Both empty for a uniform batch; both set for varlen.
  std::vector<int32_t> cu_seqlens_q;
  std::vector<int32_t> cu_seqlens_k;
  // Key padding for a uniform batch: batch entries, each in [0, kv_len]. Empty = no padding.
  std::vector<int32_t> kv_valid_lens;
  int head_dim = 64;
  bool causal = false;
  DType dtype = DType::kFp32;
  // Softmax scale; 0 means 1/sqrt(head_dim). At most kMaxSoftmaxScale.
  float softmax_scale = 0.0f;
  // Paged KV cache block size in tokens for decode; 0 = contiguous KV.
  int page_block_size = 0;

  // Checks every field and their consistency; InvalidArgument with a message naming the
  // offending field otherwise. Never crashes on any field values.
  absl::Status Validate() const;

  bool is_varlen() const { return !cu_seqlens_q.empty(); }
  float EffectiveScale() const;
  int heads_per_kv() const { return q_heads / kv_heads; }

  // Per-sequence geometry (valid only after Validate() succeeded; b in [0, batch)).
  int64_t QueryStart(int b) const;
  int64_t KeyStart(int b) const;
  int QueryLen(int b) const;
  // Number of keys stored for sequence b (rows in memory).
  int KeyLen(int b) const;
  // Number of keys visible to sequence b (KeyLen minus key padding).
  int VisibleKeyLen(int b) const;
  // Number of keys visible to query `i` (0-based within its sequence b): the causal and
  // padding masks in one place, so every backend and the reference agree. Keys [0, result)
  // are visible; causal masks are bottom-right aligned (query i sees keys j <= i + k - q).
  int VisibleKeysForQuery(int b, int i) const;
  // Index of the sequence that global query row `token` belongs to (binary search over
  // cu_seqlens for varlen problems; empty sequences are skipped). Token in [0, TotalQueries()).
  int SequenceOfQueryToken(int64_t token) const;
  int64_t TotalQueries() const;
  int64_t TotalKeys() const;
  // Element counts of the tensors in the layout above.
  int64_t QElements() const { return TotalQueries() * q_heads * head_dim; }
  int64_t KVElements() const { return TotalKeys() * kv_heads * head_dim; }
  int64_t OElements() const { return QElements(); }

  // Useful floating-point operations: 4 * d * (number of visible (query, key) pairs) summed
  // over query heads. For a dense non-causal uniform problem that is 4*b*hq*q*k*d; a causal
  // square problem counts about half (the exact visible-pair count, not the 1/2 estimate).
  double Flops() const;

  // Canonical, human-readable key, e.g. prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32.
  // Varlen problems append /varlen-<hash of both length lists>, padded ones /kvpad-<hash>,
  // paged ones /page<N>, a non-default scale /scale<value>. Two problems with equal keys
  // compute the same function on the same input sizes.
  std::string Key() const;
  // Parses a key produced by Key() for problems without length lists (varlen/kvpad keys
  // carry only a hash, so they cannot be parsed back: InvalidArgument).
  static absl::StatusOr<AttentionProblem> FromKey(std::string_view key);
};

// The shapes of the seed article: batch 1, 12 heads, head_dim 64, S in {128..2048}, fp32,
// non-causal, q_len == kv_len == S.
std::vector<AttentionProblem> SeedPresetProblems();

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_PROBLEM_H_
