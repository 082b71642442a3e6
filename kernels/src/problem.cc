#include "fusetune/kernels/problem.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fusetune/base/strings.h"

namespace fusetune {
namespace {

// FNV-1a over the length lists: stable across runs and hosts (std::hash is not).
uint64_t HashLengths(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int32_t x) {
    for (int i = 0; i < 4; ++i) {
      h ^= static_cast<uint8_t>(x >> (8 * i));
      h *= 1099511628211ull;
    }
  };
  for (int32_t x : a) mix(x);
  mix(-1);
  for (int32_t x : b) mix(x);
  return h;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return std::string(buf, 12);
}

// The paged-cache field a key part names ("page", "pool", "bt", "prefix"), or "".
std::string_view PagedKeyField(std::string_view part) {
  for (std::string_view name : {"page", "pool", "bt", "prefix"}) {
    if (part.substr(0, name.size()) == name) return name;
  }
  return "";
}

absl::Status CheckPrefixSums(const std::vector<int32_t>& cu, int batch, const char* name) {
  if (static_cast<int64_t>(cu.size()) != static_cast<int64_t>(batch) + 1) {
    return absl::InvalidArgumentError(Cat(name, " must have batch + 1 = ", batch + 1,
                                                   " entries, got ", cu.size()));
  }
  if (cu[0] != 0) return absl::InvalidArgumentError(Cat(name, "[0] must be 0"));
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return absl::InvalidArgumentError(
          Cat(name, " must be non-decreasing (entry ", i, ")"));
    }
    if (cu[i] - cu[i - 1] > kMaxSeqLen) {
      return absl::InvalidArgumentError(
          Cat(name, ": sequence ", i - 1, " longer than ", kMaxSeqLen));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "fp32";
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::kFp32;
  if (name == "fp16" || name == "float16") return DType::kFp16;
  if (name == "bf16" || name == "bfloat16") return DType::kBf16;
  return absl::InvalidArgumentError(
      Cat("unknown dtype '", name, "' (expected fp32, fp16 or bf16)"));
}

int DTypeBytes(DType dtype) { return dtype == DType::kFp32 ? 4 : 2; }

std::string_view KvStorageName(KvStorage storage) { return storage == KvStorage::kE4m3 ? "e4m3" : "dtype"; }

absl::StatusOr<KvStorage> ParseKvStorage(std::string_view name) {
  if (name == "dtype") return KvStorage::kDType;
  if (name == "e4m3" || name == "fp8" || name == "fp8_e4m3") return KvStorage::kE4m3;
  return absl::InvalidArgumentError(Cat("unknown K/V storage '", name, "' (expected dtype or e4m3)"));
}

int AttentionProblem::KVElementBytes() const { return is_kv_quantized() ? 1 : DTypeBytes(dtype); }

std::string_view ProblemKindName(ProblemKind kind) {
  return kind == ProblemKind::kPrefill ? "prefill" : "decode";
}

absl::StatusOr<ProblemKind> ParseProblemKind(std::string_view name) {
  if (name == "prefill") return ProblemKind::kPrefill;
  if (name == "decode") return ProblemKind::kDecode;
  return absl::InvalidArgumentError(
      Cat("unknown problem kind '", name, "' (expected prefill or decode)"));
}

absl::Status AttentionProblem::Validate() const {
  if (batch < 1 || batch > kMaxBatch) {
    return absl::InvalidArgumentError(Cat("batch must be in [1, ", kMaxBatch, "], got ", batch));
  }
  if (q_heads < 1 || q_heads > kMaxHeads) {
    return absl::InvalidArgumentError(Cat("q_heads must be in [1, ", kMaxHeads, "], got ", q_heads));
  }
  if (kv_heads < 1 || kv_heads > q_heads) {
    return absl::InvalidArgumentError(
        Cat("kv_heads must be in [1, q_heads=", q_heads, "], got ", kv_heads));
  }
  if (q_heads % kv_heads != 0) {
    return absl::InvalidArgumentError(Cat("kv_heads (", kv_heads,
                                                   ") must divide q_heads (", q_heads, ")"));
  }
  if (head_dim < kMinHeadDim || head_dim > kMaxHeadDim || head_dim % 8 != 0) {
    return absl::InvalidArgumentError(Cat("head_dim must be a multiple of 8 in [",
                                                   kMinHeadDim, ", ", kMaxHeadDim, "], got ",
                                                   head_dim));
  }
  if (!std::isfinite(softmax_scale) || softmax_scale < 0.0f || softmax_scale > kMaxSoftmaxScale) {
    return absl::InvalidArgumentError(
        Cat("softmax_scale must be in [0, ", kMaxSoftmaxScale, "] (0 = 1/sqrt(d)), got ",
                      softmax_scale));
  }
  if (kv_storage != KvStorage::kDType && kv_storage != KvStorage::kE4m3) {
    return absl::InvalidArgumentError(Cat("kv_storage must be dtype or e4m3, got ", static_cast<int>(kv_storage)));
  }
  if (is_kv_quantized() && dtype == DType::kFp32) {
    return absl::InvalidArgumentError("K/V stored as e4m3 need Q and O in fp16 or bf16 (dtype fp32 given)");
  }
  if (page_block_size < 0 || page_block_size > kMaxPageBlockSize) {
    return absl::InvalidArgumentError(
        Cat("page_block_size must be in [1, ", kMaxPageBlockSize, "] (0 = contiguous K/V), got ", page_block_size));
  }
  if (!is_paged() && (kv_pool_pages != 0 || block_table_width != 0 || shared_prefix_pages != 0)) {
    return absl::InvalidArgumentError(
        "kv_pool_pages, block_table_width and shared_prefix_pages describe a paged cache: set page_block_size");
  }
  if (kv_pool_pages < 0 || block_table_width < 0 || shared_prefix_pages < 0) {
    return absl::InvalidArgumentError("kv_pool_pages, block_table_width and shared_prefix_pages must be >= 0");
  }
  if (q_len < 0 || q_len > kMaxSeqLen || kv_len < 0 || kv_len > kMaxSeqLen) {
    return absl::InvalidArgumentError(
        Cat("q_len and kv_len must be in [0, ", kMaxSeqLen, "]"));
  }
  if (cu_seqlens_q.empty() != cu_seqlens_k.empty()) {
    return absl::InvalidArgumentError("cu_seqlens_q and cu_seqlens_k must both be set or both empty");
  }
  if (is_varlen()) {
    if (!kv_valid_lens.empty()) {
      return absl::InvalidArgumentError(
          "kv_valid_lens applies to uniform batches; varlen batches express lengths in cu_seqlens_k");
    }
    if (auto s = CheckPrefixSums(cu_seqlens_q, batch, "cu_seqlens_q"); !s.ok()) return s;
    if (auto s = CheckPrefixSums(cu_seqlens_k, batch, "cu_seqlens_k"); !s.ok()) return s;
    if (cu_seqlens_q.back() < 1) {
      return absl::InvalidArgumentError("varlen batch has no query tokens at all");
    }
    int max_q = 0, max_k = 0;
    for (int b = 0; b < batch; ++b) {
      max_q = std::max(max_q, cu_seqlens_q[b + 1] - cu_seqlens_q[b]);
      max_k = std::max(max_k, cu_seqlens_k[b + 1] - cu_seqlens_k[b]);
    }
    if (max_q != q_len || max_k != kv_len) {
      return absl::InvalidArgumentError(Cat(
          "for varlen batches q_len/kv_len must equal the longest sequence (", max_q, "/",
          max_k, "), got ", q_len, "/", kv_len));
    }
  } else {
    if (q_len < 1) return absl::InvalidArgumentError("q_len must be >= 1");
    if (kv_len < 1) return absl::InvalidArgumentError("kv_len must be >= 1");
    if (!kv_valid_lens.empty()) {
      if (static_cast<int64_t>(kv_valid_lens.size()) != batch) {
        return absl::InvalidArgumentError(Cat(
            "kv_valid_lens must have batch = ", batch, " entries, got ", kv_valid_lens.size()));
      }
      for (size_t b = 0; b < kv_valid_lens.size(); ++b) {
        if (kv_valid_lens[b] < 0 || kv_valid_lens[b] > kv_len) {
          return absl::InvalidArgumentError(
              Cat("kv_valid_lens[", b, "] must be in [0, kv_len=", kv_len, "]"));
        }
      }
    }
  }
  // q_len is the longest sequence's count for varlen batches too (checked above).
  if (kind == ProblemKind::kDecode && q_len > 16) {
    return absl::InvalidArgumentError("decode problems have at most 16 queries per sequence");
  }
  if (is_paged()) {
    if (auto s = ValidatePagedGeometry(); !s.ok()) return s;
  }
  const int64_t tq = TotalQueries(), tk = TotalKeys();
  if (tq * q_heads * head_dim > kMaxTotalElements || tk * kv_heads * head_dim > kMaxTotalElements) {
    return absl::InvalidArgumentError("problem too large: a tensor exceeds 2^34 elements");
  }
  return absl::OkStatus();
}

float AttentionProblem::EffectiveScale() const {
  return softmax_scale > 0.0f ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t AttentionProblem::QueryStart(int b) const {
  return is_varlen() ? cu_seqlens_q[b] : static_cast<int64_t>(b) * q_len;
}
int64_t AttentionProblem::KeyStart(int b) const {
  return is_varlen() ? cu_seqlens_k[b] : static_cast<int64_t>(b) * kv_len;
}
int AttentionProblem::QueryLen(int b) const {
  return is_varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : q_len;
}
int AttentionProblem::KeyLen(int b) const {
  return is_varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : kv_len;
}
int AttentionProblem::VisibleKeyLen(int b) const {
  return kv_valid_lens.empty() ? KeyLen(b) : kv_valid_lens[b];
}

int AttentionProblem::SequenceOfQueryToken(int64_t token) const {
  if (!is_varlen()) return static_cast<int>(token / q_len);
  // The last b with cu[b] <= token; empty sequences (cu[b] == cu[b+1]) are skipped.
  const auto& cu = cu_seqlens_q;
  auto it = std::upper_bound(cu.begin(), cu.end(), token,
                             [](int64_t t, int32_t c) { return t < static_cast<int64_t>(c); });
  return static_cast<int>(it - cu.begin()) - 1;
}

int AttentionProblem::VisibleKeysForQuery(int b, int i) const {
  const int64_t k = VisibleKeyLen(b);
  if (!causal) return static_cast<int>(k);
  const int64_t q = QueryLen(b);
  // Bottom-right aligned: query i sees keys j <= i + (k - q).
  return static_cast<int>(std::clamp<int64_t>(i + k - q + 1, 0, k));
}
int64_t AttentionProblem::TotalQueries() const {
  return is_varlen() ? (cu_seqlens_q.empty() ? 0 : cu_seqlens_q.back())
                     : static_cast<int64_t>(batch) * q_len;
}
int64_t AttentionProblem::TotalKeys() const {
  if (is_paged()) return PoolPages() * page_block_size;
  return is_varlen() ? (cu_seqlens_k.empty() ? 0 : cu_seqlens_k.back())
                     : static_cast<int64_t>(batch) * kv_len;
}

int AttentionProblem::BlockTableWidth() const {
  if (!is_paged()) return 0;
  return block_table_width > 0 ? block_table_width : (kv_len + page_block_size - 1) / page_block_size;
}

int AttentionProblem::PagesOfSequence(int b) const {
  if (!is_paged()) return 0;
  return (VisibleKeyLen(b) + page_block_size - 1) / page_block_size;
}

int64_t AttentionProblem::PagesNeeded() const {
  if (!is_paged()) return 0;
  int64_t pages = shared_prefix_pages;
  for (int b = 0; b < batch; ++b) pages += PagesOfSequence(b) - shared_prefix_pages;
  return pages;
}

int64_t AttentionProblem::PoolPages() const {
  if (!is_paged()) return 0;
  return kv_pool_pages > 0 ? kv_pool_pages : PagesNeeded();
}

AttentionProblem AttentionProblem::Unpaged() const {
  AttentionProblem p = *this;
  p.page_block_size = 0;
  p.kv_pool_pages = 0;
  p.block_table_width = 0;
  p.shared_prefix_pages = 0;
  return p;
}

double AttentionProblem::KVBytesRead() const {
  double keys = 0;
  for (int b = 0; b < batch; ++b) keys += VisibleKeyLen(b);
  return 2.0 * keys * kv_heads * head_dim * KVElementBytes();
}

absl::Status AttentionProblem::ValidatePagedGeometry() const {
  int needed = 0;
  for (int b = 0; b < batch; ++b) {
    needed = std::max(needed, PagesOfSequence(b));
    if (static_cast<int64_t>(shared_prefix_pages) * page_block_size > VisibleKeyLen(b)) {
      return absl::InvalidArgumentError(Cat("shared_prefix_pages (", shared_prefix_pages, " pages of ", page_block_size,
                                            " tokens) is longer than sequence ", b, " (", VisibleKeyLen(b), " keys)"));
    }
  }
  const int64_t width = block_table_width > 0 ? block_table_width
                                              : (static_cast<int64_t>(kv_len) + page_block_size - 1) / page_block_size;
  if (width < needed) {
    return absl::InvalidArgumentError(Cat("the block table holds ", width, " pages per sequence, but a sequence needs ",
                                          needed, " (", page_block_size, "-token pages)"));
  }
  if (static_cast<int64_t>(batch) * width > kMaxTotalElements) {
    return absl::InvalidArgumentError("problem too large: the block table exceeds 2^34 entries");
  }
  if (PoolPages() < 1) return absl::InvalidArgumentError("a paged cache needs a pool of at least one page");
  if (PoolPages() > kMaxTotalElements / page_block_size) {
    return absl::InvalidArgumentError("problem too large: the page pool exceeds 2^34 tokens");
  }
  return absl::OkStatus();
}

absl::Status ValidateBlockTable(const AttentionProblem& problem, const int32_t* table, int64_t entries) {
  // The geometry below is only defined for a valid problem.
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (!problem.is_paged()) return absl::InvalidArgumentError("a block table belongs to a paged problem");
  if (entries != problem.BlockTableEntries()) {
    return absl::InvalidArgumentError(Cat("the block table has ", entries, " entries; the problem needs batch x ",
                                          problem.BlockTableWidth(), " = ", problem.BlockTableEntries()));
  }
  if (table == nullptr) return absl::InvalidArgumentError("block_table is a null pointer");
  const int64_t pool = problem.PoolPages();
  const int width = problem.BlockTableWidth();
  for (int b = 0; b < problem.batch; ++b) {
    const int pages = problem.PagesOfSequence(b);
    for (int i = 0; i < pages; ++i) {
      const int32_t page = table[static_cast<int64_t>(b) * width + i];
      if (page < 0 || page >= pool) {
        return absl::InvalidArgumentError(Cat("block_table[", b, "][", i, "] = ", page,
                                              " is not a page of the pool [0, ", pool, ")"));
      }
    }
  }
  return absl::OkStatus();
}

double AttentionProblem::Flops() const {
  double pairs = 0;
  for (int b = 0; b < batch; ++b) {
    const int q = QueryLen(b);
    const int k = VisibleKeyLen(b);
    if (!causal) {
      pairs += static_cast<double>(q) * k;
    } else {
      // Query i sees min(k, max(0, i + k - q + 1)) keys: sum it in closed form per range.
      for (int i = 0; i < q; ++i) pairs += VisibleKeysForQuery(b, i);
    }
  }
  return 4.0 * head_dim * q_heads * pairs;
}

std::string AttentionProblem::Key() const {
  std::string key = Cat(ProblemKindName(kind), "/b", batch, "/hq", q_heads, "/hkv",
                                 kv_heads, "/q", q_len, "/k", kv_len, "/d", head_dim, "/causal",
                                 causal ? 1 : 0, "/", DTypeName(dtype));
  if (is_varlen()) absl::StrAppend(&key, "/varlen-", Hex(HashLengths(cu_seqlens_q, cu_seqlens_k)));
  if (!kv_valid_lens.empty()) absl::StrAppend(&key, "/kvpad-", Hex(HashLengths(kv_valid_lens, {})));
  if (is_paged()) {
    absl::StrAppend(&key, "/page", page_block_size);
    if (kv_pool_pages > 0) absl::StrAppend(&key, "/pool", kv_pool_pages);
    if (block_table_width > 0) absl::StrAppend(&key, "/bt", block_table_width);
    if (shared_prefix_pages > 0) absl::StrAppend(&key, "/prefix", shared_prefix_pages);
  }
  if (softmax_scale > 0.0f) absl::StrAppend(&key, "/scale", softmax_scale);
  if (is_kv_quantized()) absl::StrAppend(&key, "/kv", ToAbsl(KvStorageName(kv_storage)));
  return key;
}

absl::StatusOr<AttentionProblem> AttentionProblem::FromKey(std::string_view key) {
  std::vector<std::string> parts = absl::StrSplit(ToAbsl(key), '/');
  if (parts.size() < 9) {
    return absl::InvalidArgumentError(Cat("malformed problem key '", key, "'"));
  }
  AttentionProblem p;
  auto kind = ParseProblemKind(parts[0]);
  if (!kind.ok()) return kind.status();
  p.kind = *kind;
  auto field = [&](std::string_view part, std::string_view prefix, int* out) -> bool {
    if (part.substr(0, prefix.size()) != prefix) return false;
    return absl::SimpleAtoi(ToAbsl(part.substr(prefix.size())), out);
  };
  int causal = 0;
  if (!field(parts[1], "b", &p.batch) || !field(parts[2], "hq", &p.q_heads) ||
      !field(parts[3], "hkv", &p.kv_heads) || !field(parts[4], "q", &p.q_len) ||
      !field(parts[5], "k", &p.kv_len) || !field(parts[6], "d", &p.head_dim) ||
      !field(parts[7], "causal", &causal) || (causal != 0 && causal != 1)) {
    return absl::InvalidArgumentError(Cat("malformed problem key '", key, "'"));
  }
  p.causal = causal == 1;
  auto dtype = ParseDType(parts[8]);
  if (!dtype.ok()) return dtype.status();
  p.dtype = *dtype;
  for (size_t i = 9; i < parts.size(); ++i) {
    std::string_view part = parts[i];
    if (part == "kve4m3") {
      p.kv_storage = KvStorage::kE4m3;
    } else if (part.substr(0, 5) == "scale") {
      if (!absl::SimpleAtof(ToAbsl(part.substr(5)), &p.softmax_scale)) {
        return absl::InvalidArgumentError(Cat("bad scale in key '", key, "'"));
      }
    } else if (const std::string_view name = PagedKeyField(part); !name.empty()) {
      int* target = name == "page"   ? &p.page_block_size
                    : name == "pool" ? &p.kv_pool_pages
                    : name == "bt"   ? &p.block_table_width
                                     : &p.shared_prefix_pages;
      // Key() writes these fields only when positive: "page0" names no problem it produces.
      if (!field(part, name, target) || *target < 1) {
        return absl::InvalidArgumentError(Cat("bad paged-cache field '", part, "' in key '", key, "'"));
      }
    } else {
      return absl::InvalidArgumentError(Cat(
          "key '", key, "' names length lists by hash only (", part,
          "); such problems cannot be rebuilt from the key"));
    }
  }
  if (auto s = p.Validate(); !s.ok()) return s;
  return p;
}

AttentionProblem SeedShape(int seq_len) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 12;
  p.kv_heads = 12;
  p.q_len = seq_len;
  p.kv_len = seq_len;
  p.head_dim = 64;
  p.causal = false;
  p.dtype = DType::kFp32;
  return p;
}

std::vector<AttentionProblem> SeedPresetProblems() {
  std::vector<AttentionProblem> out;
  for (int s : kSeedSeqLens) out.push_back(SeedShape(s));
  return out;
}

std::vector<AttentionProblem> DecodePresetProblems() {
  AttentionProblem serving;
  serving.kind = ProblemKind::kDecode;
  serving.batch = 16;
  serving.q_heads = 32;
  serving.kv_heads = 8;
  serving.q_len = 1;
  serving.head_dim = 128;
  serving.causal = true;
  serving.dtype = DType::kBf16;
  auto with = [&serving](int batch, int cache, int page) {
    AttentionProblem p = serving;
    p.batch = batch;
    p.kv_len = cache;
    p.page_block_size = page;
    return p;
  };
  std::vector<AttentionProblem> out = {with(16, 1024, 0), with(16, 8192, 0),  with(16, 32768, 0),
                                       with(1, 65536, 0), with(16, 8192, 16), with(16, 8192, 1)};
  constexpr int kPrefix = 8192, kNewTokens = 512, kPage = 16;
  AttentionProblem prefill = with(16, kPrefix + kNewTokens, 0);
  prefill.kind = ProblemKind::kPrefill;
  prefill.q_len = kNewTokens;
  out.push_back(prefill);
  prefill.page_block_size = kPage;
  prefill.shared_prefix_pages = kPrefix / kPage;
  out.push_back(prefill);
  // The same caches stored as FP8 e4m3 (half the bytes a decode step reads): b16 at 8K and
  // 32K contiguous, and 8K in pages of 16.
  for (AttentionProblem p : {with(16, 8192, 0), with(16, 32768, 0), with(16, 8192, 16)}) {
    p.kv_storage = KvStorage::kE4m3;
    out.push_back(p);
  }
  return out;
}

}  // namespace fusetune
