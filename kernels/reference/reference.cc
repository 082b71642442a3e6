#include "fusetune/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

absl::Status CheckSpans(const AttentionProblem& problem, size_t q, size_t k, size_t v, const KvScales& scales) {
  if (problem.is_kv_quantized()) {
    if (static_cast<int64_t>(scales.k.size()) != problem.kv_heads ||
        static_cast<int64_t>(scales.v.size()) != problem.kv_heads) {
      return absl::InvalidArgumentError(absl::StrCat("K/V stored as e4m3 need kv_heads (", problem.kv_heads,
                                                     ") scales each for K and V; got ", scales.k.size(), " and ",
                                                     scales.v.size()));
    }
  } else if (!scales.k.empty() || !scales.v.empty()) {
    return absl::InvalidArgumentError("K/V scales belong to a problem whose K/V are stored as e4m3");
  }
  if (problem.is_paged()) {
    return absl::InvalidArgumentError(
        "the reference takes contiguous K/V: gather a paged cache through its block table first (GatherPagedKV)");
  }
  if (static_cast<int64_t>(q) != problem.QElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("q has ", q, " elements, the problem needs ", problem.QElements()));
  }
  if (static_cast<int64_t>(k) != problem.KVElements() ||
      static_cast<int64_t>(v) != problem.KVElements()) {
    return absl::InvalidArgumentError(absl::StrCat("k/v have ", k, "/", v,
                                                   " elements, the problem needs ",
                                                   problem.KVElements()));
  }
  return absl::OkStatus();
}

// One row without argument checks. `scores` is scratch of at least kv_len doubles.
void ComputeRow(const AttentionProblem& p, const float* q, const float* k, const float* v, const KvScales& kv_scales,
                int64_t token, int head, double* out, std::vector<double>& scores) {
  const int d = p.head_dim;
  const int b = p.SequenceOfQueryToken(token);
  const int i = static_cast<int>(token - p.QueryStart(b));
  const int visible = p.VisibleKeysForQuery(b, i);
  std::fill(out, out + d, 0.0);
  if (visible <= 0) return;  // a row that sees no key is defined as zeros

  const int kv_head = head / p.heads_per_kv();
  const bool quantized = p.is_kv_quantized();
  const double scale = static_cast<double>(p.EffectiveScale()) *
                       (quantized ? static_cast<double>(kv_scales.k[static_cast<size_t>(kv_head)]) : 1.0);
  const double v_scale = quantized ? static_cast<double>(kv_scales.v[static_cast<size_t>(kv_head)]) : 1.0;
  const float* q_row = q + (token * p.q_heads + head) * static_cast<int64_t>(d);
  const int64_t key_start = p.KeyStart(b);
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * d;
  scores.resize(static_cast<size_t>(visible));
  double max_score = -std::numeric_limits<double>::infinity();
  bool saw_nan = false;
  for (int j = 0; j < visible; ++j) {
    const float* k_row = k + (key_start + j) * kv_stride + static_cast<int64_t>(kv_head) * d;
    double dot = 0.0;
    for (int x = 0; x < d; ++x) dot += static_cast<double>(q_row[x]) * k_row[x];
    scores[j] = dot * scale;
    if (std::isnan(scores[j])) saw_nan = true;
    max_score = std::max(max_score, scores[j]);
  }
  if (saw_nan || max_score == std::numeric_limits<double>::infinity()) {
    // NaN in, NaN out (never a silently plausible number). +Inf scores make the softmax
    // undefined as well.
    std::fill(out, out + d, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  // A -inf score gives its key weight 0, as a mask does; when every visible score is -inf no
  // key contributes and the row is zeros, as for a row that sees no key.
  if (max_score == -std::numeric_limits<double>::infinity()) return;
  double sum = 0.0;
  for (int j = 0; j < visible; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int j = 0; j < visible; ++j) {
    const float* v_row = v + (key_start + j) * kv_stride + static_cast<int64_t>(kv_head) * d;
    const double w = scores[j] / sum * v_scale;
    for (int x = 0; x < d; ++x) out[x] += w * v_row[x];
  }
}

}  // namespace

absl::Status ReferenceAttentionRow(const AttentionProblem& problem, std::span<const float> q,
                                   std::span<const float> k, std::span<const float> v,
                                   int64_t token, int head, std::span<double> out, const KvScales& scales) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (auto s = CheckSpans(problem, q.size(), k.size(), v.size(), scales); !s.ok()) return s;
  if (token < 0 || token >= problem.TotalQueries()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " out of range [0, ",
                                                   problem.TotalQueries(), ")"));
  }
  if (head < 0 || head >= problem.q_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("head ", head, " out of range [0, ", problem.q_heads, ")"));
  }
  if (static_cast<int64_t>(out.size()) != problem.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("out has ", out.size(), " elements, head_dim is ", problem.head_dim));
  }
  std::vector<double> scores;
  ComputeRow(problem, q.data(), k.data(), v.data(), scales, token, head, out.data(), scores);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> ReferenceAttention(const AttentionProblem& problem,
                                                       std::span<const float> q,
                                                       std::span<const float> k,
                                                       std::span<const float> v, const KvScales& scales) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (auto s = CheckSpans(problem, q.size(), k.size(), v.size(), scales); !s.ok()) return s;
  std::vector<double> out(static_cast<size_t>(problem.OElements()));
  std::vector<double> scores;
  const int d = problem.head_dim;
  for (int64_t t = 0; t < problem.TotalQueries(); ++t) {
    for (int h = 0; h < problem.q_heads; ++h) {
      ComputeRow(problem, q.data(), k.data(), v.data(), scales, t, h,
                 out.data() + (t * problem.q_heads + h) * static_cast<int64_t>(d), scores);
    }
  }
  return out;
}

absl::StatusOr<std::vector<float>> GatherPagedKV(const AttentionProblem& problem, std::span<const float> pool,
                                                 std::span<const int32_t> block_table) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (!problem.is_paged()) return absl::InvalidArgumentError("GatherPagedKV needs a paged problem");
  if (static_cast<int64_t>(pool.size()) != problem.KVElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pool has ", pool.size(), " elements, the problem needs ", problem.KVElements()));
  }
  if (auto s = ValidateBlockTable(problem, block_table.data(), static_cast<int64_t>(block_table.size())); !s.ok()) {
    return s;
  }
  const AttentionProblem flat = problem.Unpaged();
  const int64_t row = static_cast<int64_t>(problem.kv_heads) * problem.head_dim;
  const int page = problem.page_block_size;
  std::vector<float> out(static_cast<size_t>(flat.KVElements()), 0.0f);
  for (int b = 0; b < problem.batch; ++b) {
    const int64_t start = flat.KeyStart(b);
    for (int j = 0; j < problem.VisibleKeyLen(b); ++j) {
      const int64_t physical = block_table[static_cast<size_t>(static_cast<int64_t>(b) * problem.BlockTableWidth() + j / page)];
      std::copy_n(pool.data() + (physical * page + j % page) * row, row, out.data() + (start + j) * row);
    }
  }
  return out;
}

namespace {

// The two parts of ToleranceFor's fixed tolerance: the products' precision and the stored
// output's rounding.
double ProductTolerance(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return 1e-4;
    case Precision::kTf32: return 5e-3;
    case Precision::kFp16: return 1e-2;
    case Precision::kBf16: return 3e-2;
  }
  return 1e-4;
}

double StorageTolerance(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return 0;
    case DType::kFp16: return 2e-3;
    case DType::kBf16: return 1.6e-2;
  }
  return 0;
}

}  // namespace

double ToleranceFor(Precision precision, DType dtype) {
  return std::max(ProductTolerance(precision), StorageTolerance(dtype));
}

namespace {

// Largest 2-norm of a head_dim-long row of `x` (tokens-major, heads inner), skipping
// non-finite elements (padding rows may hold anything); with `head_scales` (one per head of
// `heads`) each row's norm is multiplied by its head's scale.
double MaxRowNorm(const std::vector<float>& x, int head_dim, std::span<const float> head_scales = {}, int heads = 1) {
  double worst = 0;
  size_t index = 0;
  for (size_t row = 0; row + static_cast<size_t>(head_dim) <= x.size(); row += static_cast<size_t>(head_dim), ++index) {
    double sum = 0;
    for (int e = 0; e < head_dim; ++e) {
      const double value = x[row + static_cast<size_t>(e)];
      if (std::isfinite(value)) sum += value * value;
    }
    if (!head_scales.empty()) {
      const double scale = head_scales[index % static_cast<size_t>(heads)];
      sum *= scale * scale;
    }
    worst = std::max(worst, sum);
  }
  return std::sqrt(worst);
}

}  // namespace

double LogitBound(const AttentionProblem& problem, const std::vector<float>& q,
                  const std::vector<float>& k, const KvScales& scales) {
  const int d = problem.head_dim;
  if (d <= 0) return 0;
  const bool scaled = problem.is_kv_quantized() && static_cast<int64_t>(scales.k.size()) == problem.kv_heads;
  return static_cast<double>(problem.EffectiveScale()) * MaxRowNorm(q, d) *
         MaxRowNorm(k, d, scaled ? scales.k : std::span<const float>{}, problem.kv_heads);
}

double ToleranceFor(Precision precision, DType dtype, double logit_bound, int head_dim) {
  const double calibrated_bound = std::sqrt(static_cast<double>(std::max(head_dim, 1)));
  if (!(logit_bound > calibrated_bound)) return ToleranceFor(precision, dtype);  // NaN too
  // Only the products' part grows with the logits; the output's rounding does not.
  return std::max(ProductTolerance(precision) * (logit_bound / calibrated_bound),
                  StorageTolerance(dtype));
}

}  // namespace fusetune
