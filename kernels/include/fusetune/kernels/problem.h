// AttentionProblem: the shape of one attention call, independent of how it is computed.
//
// Memory layout (every backend, every variant): tokens-major, heads inner.
//   Q, O : [total_q][q_heads][head_dim]
//   K, V : [total_k][kv_heads][head_dim]            contiguous K/V
//   K, V : [PoolPages()][page_block_size][kv_heads][head_dim]   paged K/V (see below)
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

#include <array>
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

// Storage of K and V. kDType: the problem's dtype, like Q and O. kE4m3: FP8 e4m3 (OCP FP8:
// sign, 4 exponent bits of bias 7, 3 mantissa bits; largest finite 448, no infinities, 0x7f and
// 0xff are NaN) with one fp32 scale per KV head for K and one for V
// (AttentionBuffers::k_scale, v_scale): byte x of KV head h stands for E4m3ToFloat(x) *
// scale[h]. What serving engines keep to halve a decode step's memory traffic; Q and O stay in
// the problem's dtype, which must then be fp16 or bf16.
enum class KvStorage { kDType, kE4m3 };
// "dtype", "e4m3".
std::string_view KvStorageName(KvStorage storage);
absl::StatusOr<KvStorage> ParseKvStorage(std::string_view name);

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
// Largest page of a paged KV cache, in tokens.
inline constexpr int kMaxPageBlockSize = 256;

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
  // Storage of K and V (the key says /kve4m3 for kE4m3).
  KvStorage kv_storage = KvStorage::kDType;
  // Softmax scale; 0 means 1/sqrt(head_dim). At most kMaxSoftmaxScale.
  float softmax_scale = 0.0f;
  // Paged KV cache (prefill or decode, uniform or varlen batch), as vLLM keeps it:
  // page_block_size > 0 stores K and V in a shared pool of PoolPages() pages of
  // page_block_size tokens, and a block table (input data like Q: AttentionBuffers::
  // block_table, int32 [batch][BlockTableWidth()]) maps sequence b's logical key j to row
  // j % page_block_size of page block_table[b * BlockTableWidth() + j / page_block_size].
  // Sequence b's keys are its VisibleKeyLen(b) keys (kv_valid_lens are the cache lengths of
  // a uniform batch, cu_seqlens_k those of a varlen one); only the first PagesOfSequence(b)
  // entries of its row are read, and each must name a page of the pool (ValidateBlockTable).
  // Pages may be shared between sequences and appear in any order.
  int page_block_size = 0;      // tokens per page, in [1, kMaxPageBlockSize]; 0 = contiguous K/V
  int kv_pool_pages = 0;        // pages in the pool; 0 = PagesNeeded()
  int block_table_width = 0;    // entries per block-table row; 0 = ceil(kv_len / page_block_size)
  // Prefix caching: the first shared_prefix_pages logical pages of every sequence are the same
  // physical pages (a shared prompt prefix); each sequence must fill them. It describes the
  // tables the tuner generates for the shape (and so its memory traffic); a caller's table
  // may share pages in any way.
  int shared_prefix_pages = 0;

  // Checks every field and their consistency; InvalidArgument with a message naming the
  // offending field otherwise. Never crashes on any field values.
  absl::Status Validate() const;

  bool is_varlen() const { return !cu_seqlens_q.empty(); }
  bool is_paged() const { return page_block_size > 0; }
  float EffectiveScale() const;
  int heads_per_kv() const { return q_heads / kv_heads; }
  bool is_kv_quantized() const { return kv_storage == KvStorage::kE4m3; }
  // Bytes per element of K and V in memory: the dtype's, or 1 for e4m3.
  int KVElementBytes() const;

  // Per-sequence geometry (valid only after Validate() succeeded; b in [0, batch)).
  int64_t QueryStart(int b) const;
  int64_t KeyStart(int b) const;  // contiguous K/V only (a paged cache goes through the table)
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
  // Rows of K and V in memory: the contiguous layout's total_k, or PoolPages() *
  // page_block_size for a paged cache.
  int64_t TotalKeys() const;

  // Paged geometry (valid only after Validate() succeeded on a paged problem).
  // Entries per block-table row: block_table_width, or ceil(kv_len / page_block_size).
  int BlockTableWidth() const;
  // Pages sequence b's keys occupy: ceil(VisibleKeyLen(b) / page_block_size).
  int PagesOfSequence(int b) const;
  // Distinct pages the sequences need, the shared prefix counted once.
  int64_t PagesNeeded() const;
  // Pages in the pool: kv_pool_pages, or PagesNeeded().
  int64_t PoolPages() const;
  int64_t BlockTableEntries() const { return static_cast<int64_t>(batch) * BlockTableWidth(); }
  // The same attention over a contiguous K/V ([total_k][kv_heads][head_dim] as above): the
  // page fields cleared (kv_storage kept). The fp64 reference of a paged problem is that of its Unpaged()
  // problem on K/V gathered through the block table (GatherPagedKV in reference.h).
  AttentionProblem Unpaged() const;
  // Bytes of K and V a kernel must read at least: every visible key of every sequence once
  // per KV head (a decode kernel's bandwidth is this over its time).
  double KVBytesRead() const;
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
  // paged ones /page<N> (then /pool<N>, /bt<N>, /prefix<N> when set), a non-default scale
  // /scale<value>, K/V stored as e4m3 /kve4m3. Two problems with equal keys
  // compute the same function on the same input sizes.
  std::string Key() const;
  // Parses a key produced by Key() for problems without length lists (varlen/kvpad keys
  // carry only a hash, so they cannot be parsed back: InvalidArgument).
  static absl::StatusOr<AttentionProblem> FromKey(std::string_view key);

 private:
  absl::Status ValidatePagedGeometry() const;
};

// The seed shapes (the preset `seed`, the kernel benchmarks, the GPU comparison scripts
// through the C ABI's fusetune_seed_problems): batch 1, 12 heads, head_dim 64, fp32,
// non-causal, q_len == kv_len == S for each S of kSeedSeqLens.
inline constexpr std::array<int, 5> kSeedSeqLens = {128, 256, 512, 1024, 2048};
// The seed shape of sequence length `seq_len` (any length; the preset uses kSeedSeqLens).
AttentionProblem SeedShape(int seq_len);
// SeedShape of each of kSeedSeqLens, shortest first.
std::vector<AttentionProblem> SeedPresetProblems();

// Serving shapes against a KV cache: batch 16, 32 query heads, 8 KV heads, head_dim 128,
// bf16, causal: decode (one new token) at cache lengths 1024, 8192 and 32768 with contiguous
// K/V; batch 1 at 65536; paged with pages of 16 and of 1 token at 8192; and a prefill of 512
// new tokens over an 8192-token prefix (8704 keys), contiguous and paged (pages of 16, the
// 512 prefix pages shared by every sequence); then K/V stored as e4m3 (KvStorage::kE4m3) at
// 8192 and 32768 contiguous and at 8192 in pages of 16 (11 problems).
std::vector<AttentionProblem> DecodePresetProblems();

// OK when `table` is a valid block table of the paged problem `problem`: BlockTableEntries()
// entries, and every entry a sequence reads (the first PagesOfSequence(b) of row b) in
// [0, PoolPages()). InvalidArgument naming the first bad entry otherwise (a page outside the
// pool, a negative index, a table of the wrong size); entries past a sequence's pages are
// never read and may hold anything. Every backend checks a table before it reads K/V through
// it.
absl::Status ValidateBlockTable(const AttentionProblem& problem, const int32_t* table, int64_t entries);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_PROBLEM_H_
