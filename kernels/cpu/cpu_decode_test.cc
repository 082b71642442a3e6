// The CPU backend on decode problems and paged KV caches: every variant against the fp64
// reference of the same attention on K/V gathered through the block table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"
#include "fusetune/kernels/split_kv.h"

namespace fusetune {
namespace {

using ::testing::HasSubstr;
using testing_util::Describe;
using testing_util::Inputs;
using testing_util::MaxAbsError;
using testing_util::RandomInputs;
using testing_util::RunBackend;
using testing_util::RunOptions;
using testing_util::Tolerance;

constexpr Variant kVariants[] = {Variant::kFused, Variant::kPartial, Variant::kMaterialized};

// A uniform decode batch: `q_len` new tokens per sequence against caches of `lens` keys.
AttentionProblem Decode(const std::vector<int32_t>& lens, int q_heads = 8, int kv_heads = 2, int q_len = 1,
                        int head_dim = 64, bool causal = false, DType dtype = DType::kFp32) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = static_cast<int>(lens.size());
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.q_len = q_len;
  p.kv_len = std::max(1, *std::max_element(lens.begin(), lens.end()));
  p.kv_valid_lens = lens;
  p.head_dim = head_dim;
  p.causal = causal;
  p.dtype = dtype;
  return p;
}

// The same problem over a paged cache of `page`-token pages and a pool with `spare_pages`
// pages no sequence uses.
AttentionProblem Paged(AttentionProblem p, int page, int spare_pages = 3, int shared_prefix_pages = 0) {
  p.page_block_size = page;
  p.shared_prefix_pages = shared_prefix_pages;
  p.kv_pool_pages = 0;
  p.kv_pool_pages = static_cast<int>(p.PagesNeeded()) + spare_pages;
  return p;
}

KernelConfig Config(Variant variant, int split_kv = 1, int bm = 16, int bs = 32, int threads = 2,
                    Precision precision = Precision::kFp32) {
  return testing_util::CpuConfig(variant, bm, bs, threads, precision, split_kv);
}

// A table whose pages are a random permutation of the pool: the shared prefix pages are the
// same for every sequence, each other page belongs to one sequence; entries past a
// sequence's pages hold a value outside the pool (they must never be read).
std::vector<int32_t> ShuffledTable(const AttentionProblem& p, uint64_t seed) {
  std::vector<int32_t> pages(static_cast<size_t>(p.PoolPages()));
  std::iota(pages.begin(), pages.end(), 0);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = pages.size(); i > 1; --i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(pages[i - 1], pages[x % i]);
  }
  std::vector<int32_t> table(static_cast<size_t>(p.BlockTableEntries()), 1 << 30);
  size_t next = static_cast<size_t>(p.shared_prefix_pages);
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.PagesOfSequence(b); ++i) {
      table[static_cast<size_t>(b) * p.BlockTableWidth() + i] =
          i < p.shared_prefix_pages ? pages[static_cast<size_t>(i)] : pages[next++];
    }
  }
  return table;
}

// NaN in every pool row no sequence reads (spare pages, rows past a cache length), so a
// kernel that reads one fails the comparison.
void PoisonUnreadRows(const AttentionProblem& p, const std::vector<int32_t>& table, Inputs* in) {
  const int64_t row = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  std::vector<bool> read(static_cast<size_t>(p.TotalKeys()), false);
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < p.VisibleKeyLen(b); ++j) {
      const int64_t page = table[static_cast<size_t>(b) * p.BlockTableWidth() + j / p.page_block_size];
      read[static_cast<size_t>(page * p.page_block_size + j % p.page_block_size)] = true;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t r = 0; r < read.size(); ++r) {
    if (read[r]) continue;
    std::fill_n(in->k.begin() + static_cast<int64_t>(r) * row, row, nan);
    std::fill_n(in->v.begin() + static_cast<int64_t>(r) * row, row, nan);
  }
}

// The fp64 reference of a problem (a paged one through its table) on its inputs.
std::vector<double> Reference(const AttentionProblem& p, const Inputs& in, const std::vector<int32_t>& table) {
  const KvScales scales = testing_util::ScalesOf(p, in);
  if (!p.is_paged()) {
    auto ref = ReferenceAttention(p, in.q, in.k, in.v, scales);
    EXPECT_TRUE(ref.ok()) << ref.status();
    return ref.ok() ? *ref : std::vector<double>{};
  }
  auto k = GatherPagedKV(p, in.k, table);
  auto v = GatherPagedKV(p, in.v, table);
  EXPECT_TRUE(k.ok() && v.ok()) << k.status() << v.status();
  if (!k.ok() || !v.ok()) return {};
  auto ref = ReferenceAttention(p.Unpaged(), in.q, *k, *v, scales);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return ref.ok() ? *ref : std::vector<double>{};
}

// Inputs of a problem; a paged one with its unread pool rows poisoned.
Inputs PoisonedInputs(const AttentionProblem& p, const std::vector<int32_t>& table, uint64_t seed) {
  Inputs in = RandomInputs(p, seed);
  if (p.is_paged()) PoisonUnreadRows(p, table, &in);
  return in;
}

// Runs `config` on every kernel build this host runs and compares with `ref`.
void ExpectRunMatches(const AttentionProblem& p, const KernelConfig& config, const Inputs& in,
                      const std::vector<int32_t>& table, const std::vector<double>& ref) {
  RunOptions options;
  options.block_table = table;
  for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
    SCOPED_TRACE(Describe(p, config) + " isa=" + isa);
    auto out = RunBackend(*backend, p, config, in, options);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_LE(MaxAbsError(*out, ref), Tolerance(config.precision, p.dtype));
  }
}

// Every variant, the fused one unsplit, split in 2 and 4 and planned at launch.
std::vector<KernelConfig> EveryVariantAndSplit(int bm = 16, int bs = 32, int threads = 2,
                                               Precision precision = Precision::kFp32) {
  std::vector<KernelConfig> out;
  for (int split : {1, 2, 4, kAutoSplitKv}) out.push_back(Config(Variant::kFused, split, bm, bs, threads, precision));
  out.push_back(Config(Variant::kPartial, 1, bm, bs, threads, precision));
  out.push_back(Config(Variant::kMaterialized, 1, bm, bs, threads, precision));
  return out;
}

void ExpectEveryConfigMatches(const AttentionProblem& p, const std::vector<int32_t>& table,
                              const std::vector<KernelConfig>& configs, uint64_t seed = 1) {
  const Inputs in = PoisonedInputs(p, table, seed);
  const std::vector<double> ref = Reference(p, in, table);
  for (const KernelConfig& c : configs) ExpectRunMatches(p, c, in, table, ref);
}

TEST(CpuDecode, ShuffledPagesOfEverySizeMatchTheReference) {
  // Cache lengths that are not multiples of any page size, one shorter than a page.
  const AttentionProblem contiguous = Decode({300, 1, 157});
  for (int page : {1, 3, 16, 64, 256}) {
    const AttentionProblem p = Paged(contiguous, page);
    ASSERT_TRUE(p.Validate().ok()) << p.Validate();
    ExpectEveryConfigMatches(p, ShuffledTable(p, page), EveryVariantAndSplit(), page);
  }
}

TEST(CpuDecode, PagesInPoolOrderMatchTheReference) {
  // Consecutive pages let the fused kernel read fp32 tiles in place across page borders.
  const AttentionProblem p = Paged(Decode({130, 77}), 16, 0);
  std::vector<int32_t> table(static_cast<size_t>(p.BlockTableEntries()));
  std::iota(table.begin(), table.end(), 0);
  ASSERT_TRUE(ValidateBlockTable(p, table.data(), static_cast<int64_t>(table.size())).ok());
  ExpectEveryConfigMatches(p, table, EveryVariantAndSplit(16, 64));
}

TEST(CpuDecode, EmptyAndLengthOneCachesGiveZerosAndTheirValueRow) {
  for (bool paged : {false, true}) {
    for (bool causal : {false, true}) {
      for (int q_len : {1, 3}) {
        AttentionProblem p = Decode({0, 1, 0, 5}, 4, 2, q_len, 64, causal);
        if (paged) p = Paged(p, 3);
        const std::vector<int32_t> table = paged ? ShuffledTable(p, 5) : std::vector<int32_t>{};
        const Inputs in = PoisonedInputs(p, table, 3);
        const std::vector<double> ref = Reference(p, in, table);
        RunOptions options;
        options.block_table = table;
        auto backend = CreateCpuBackend();
        for (const KernelConfig& c : EveryVariantAndSplit()) {
          SCOPED_TRACE(Describe(p, c));
          auto out = RunBackend(*backend, p, c, in, options);
          ASSERT_TRUE(out.ok()) << out.status();
          EXPECT_LE(MaxAbsError(*out, ref), Tolerance(c.precision, p.dtype));
          // Sequences 0 and 2 see no key: exactly zeros, not NaN from the poisoned pool.
          const int64_t rows = static_cast<int64_t>(q_len) * p.q_heads * p.head_dim;
          for (int64_t i = 0; i < rows; ++i) ASSERT_EQ((*out)[i], 0.0f) << i;
          for (int64_t i = 2 * rows; i < 3 * rows; ++i) ASSERT_EQ((*out)[i], 0.0f) << i;
        }
      }
    }
  }
}

TEST(CpuDecode, ImbalancedBatchSplitsTheLongSequence) {
  const AttentionProblem contiguous = Decode({2000, 3, 40, 1}, 4, 1);
  for (bool paged : {false, true}) {
    const AttentionProblem p = paged ? Paged(contiguous, 16) : contiguous;
    const std::vector<int32_t> table = paged ? ShuffledTable(p, 9) : std::vector<int32_t>{};
    std::vector<KernelConfig> configs = EveryVariantAndSplit(16, 64);
    configs.push_back(Config(Variant::kFused, 8, 16, 128));
    configs.push_back(Config(Variant::kFused, 64, 16, 16));  // more splits than 3 keys: empty splits
    ExpectEveryConfigMatches(p, table, configs);
  }
}

TEST(CpuDecode, PlannedSplitsFollowChooseSplitKvAndMatchTheReference) {
  // One sequence, one KV head, eight workers: the planner splits (into a count that is not a
  // power of two), which the launch must honour exactly.
  const AttentionProblem p = Paged(Decode({2000}, 4, 1), 16);
  ASSERT_EQ(ChooseSplitKv(p, 8), 6);
  ExpectEveryConfigMatches(p, ShuffledTable(p, 4), {Config(Variant::kFused, kAutoSplitKv, 16, 64, 8)});
}

TEST(CpuDecode, PagesSharedBetweenSequencesMatchTheReference) {
  // A shared prefix of two 16-token pages in every sequence's table.
  const AttentionProblem prefix = Paged(Decode({70, 32, 45}), 16, 1, 2);
  ASSERT_TRUE(prefix.Validate().ok()) << prefix.Validate();
  ExpectEveryConfigMatches(prefix, ShuffledTable(prefix, 2), EveryVariantAndSplit());
  // A hand-made table: sequences 0 and 1 share a middle page, sequence 2 reads one page
  // twice, page 0 is unused.
  AttentionProblem p = Decode({40, 33, 48}, 4, 2);
  p.page_block_size = 16;
  p.kv_pool_pages = 6;
  const std::vector<int32_t> table = {3, 5, 1, 2, 5, 4, 4, 2, 4};
  ASSERT_TRUE(ValidateBlockTable(p, table.data(), static_cast<int64_t>(table.size())).ok());
  ExpectEveryConfigMatches(p, table, EveryVariantAndSplit());
}

// GQA (32 query heads on 8 KV heads) and MQA (32 on 1), 1..16 new tokens causal or not, every
// storage dtype, head_dim 64 and 128, contiguous and paged, every variant and split.
class CpuDecodeShapes : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(CpuDecodeShapes, MatchTheReference) {
  const auto [dtype, head_dim] = GetParam();
  const Precision precision = dtype == DType::kFp32 ? Precision::kFp32
                              : dtype == DType::kFp16 ? Precision::kFp16
                                                      : Precision::kBf16;
  // (new tokens, causal); one token is the same causal or not.
  const std::pair<int, bool> tokens[] = {{1, false}, {5, true}, {16, true}, {16, false}};
  for (int kv_heads : {8, 1}) {
    for (const auto& [q_len, causal] : tokens) {
      const AttentionProblem contiguous = Decode({45, 77}, 32, kv_heads, q_len, head_dim, causal, dtype);
      for (bool paged : {false, true}) {
        const AttentionProblem p = paged ? Paged(contiguous, 16) : contiguous;
        const std::vector<int32_t> table = paged ? ShuffledTable(p, q_len) : std::vector<int32_t>{};
        // block_m 16 splits an MQA group (32 heads x tokens) into many row blocks; 64 fewer.
        ExpectEveryConfigMatches(p, table, EveryVariantAndSplit(q_len == 5 ? 64 : 16, 32, 2, precision), q_len);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndHeadDims, CpuDecodeShapes,
                         ::testing::Combine(::testing::Values(DType::kFp32, DType::kFp16, DType::kBf16),
                                            ::testing::Values(64, 128)),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_d" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(CpuDecode, VarlenPagedBatchMatchesTheReference) {
  AttentionProblem p;
  p.kind = ProblemKind::kDecode;
  p.batch = 4;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.cu_seqlens_q = {0, 1, 1, 5, 7};  // a sequence without new tokens
  p.cu_seqlens_k = {0, 50, 51, 51, 140};
  p.q_len = 4;
  p.kv_len = 89;
  p.causal = true;
  p = Paged(p, 7);
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  ExpectEveryConfigMatches(p, ShuffledTable(p, 8), EveryVariantAndSplit());
}

TEST(CpuDecode, PrefillOverASharedPagedPrefixMatchesTheReference) {
  // Prefix caching: 20 new tokens per sequence after a shared 32-token prefix.
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.q_len = 20;
  p.kv_len = 52;
  p.causal = true;
  p = Paged(p, 16, 2, 2);
  ASSERT_TRUE(p.Validate().ok()) << p.Validate();
  std::vector<KernelConfig> configs;
  for (Variant v : kVariants) configs.push_back(Config(v, 1, 16, 16));
  configs.push_back(Config(Variant::kFused, kAutoSplitKv, 32, 16));  // planned: 1 for prefill
  ExpectEveryConfigMatches(p, ShuffledTable(p, 6), configs);
  // Only decode splits its keys.
  const absl::Status split = CreateCpuBackend()->CanImplement(p, Config(Variant::kFused, 2));
  EXPECT_EQ(split.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(split.message(), HasSubstr("split_kv must be 1 for prefill"));
}

// A run on a table the backend must refuse: InvalidArgument naming the problem, O untouched.
void ExpectTableRefused(const AttentionProblem& p, const std::vector<int32_t>& table, const char* message) {
  auto backend = CreateCpuBackend();
  const size_t elem = static_cast<size_t>(DTypeBytes(p.dtype));
  auto q = backend->Allocate(static_cast<size_t>(p.QElements()) * elem);
  auto k = backend->Allocate(static_cast<size_t>(std::max<int64_t>(p.KVElements(), 1)) * elem);
  auto v = backend->Allocate(static_cast<size_t>(std::max<int64_t>(p.KVElements(), 1)) * elem);
  const size_t o_bytes = static_cast<size_t>(p.OElements()) * elem;
  auto o = backend->Allocate(o_bytes);
  ASSERT_TRUE(q.ok() && k.ok() && v.ok() && o.ok());
  for (DeviceMemory* m : {&*q, &*k, &*v}) ASSERT_TRUE(backend->Fill(m->data(), 0, m->bytes()).ok());
  ASSERT_TRUE(backend->Fill(o->data(), 0xAB, o_bytes).ok());
  AttentionBuffers buffers{q->data(), k->data(), v->data(), o->data(), table.data()};
  for (Variant variant : kVariants) {
    for (int split : {1, 4}) {
      if (variant != Variant::kFused && split != 1) continue;
      const absl::Status s = backend->Run(p, Config(variant, split), buffers);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << VariantName(variant) << " " << s;
      EXPECT_THAT(s.message(), HasSubstr(message));
    }
  }
  const auto* bytes = static_cast<const uint8_t*>(o->data());
  for (size_t i = 0; i < o_bytes; ++i) ASSERT_EQ(bytes[i], 0xAB) << "O byte " << i << " was written";
}

TEST(CpuDecode, InvalidBlockTablesAreInvalidArgumentAndLeaveTheOutputUntouched) {
  const AttentionProblem p = Paged(Decode({40, 17}), 16, 0);  // 3 + 2 pages, pool of 5
  ASSERT_EQ(p.PoolPages(), 5);
  std::vector<int32_t> table = {0, 1, 2, 3, 4, 99};  // width 3; the last entry is never read
  ASSERT_TRUE(ValidateBlockTable(p, table.data(), static_cast<int64_t>(table.size())).ok());
  std::vector<int32_t> outside = table;
  outside[4] = 5;  // one past the pool
  ExpectTableRefused(p, outside, "block_table[1][1] = 5");
  std::vector<int32_t> negative = table;
  negative[1] = -1;
  ExpectTableRefused(p, negative, "block_table[0][1] = -1");
  // A table row narrower than a sequence's pages: the problem itself is refused.
  AttentionProblem narrow = p;
  narrow.block_table_width = 2;
  const std::vector<int32_t> short_table = {0, 1, 3, 4};
  ExpectTableRefused(narrow, short_table, "needs 3");
  // A paged problem without a table.
  auto backend = CreateCpuBackend();
  auto mem = backend->Allocate(1 << 16);
  ASSERT_TRUE(mem.ok());
  AttentionBuffers none{mem->data(), mem->data(), mem->data(), mem->data(), nullptr};
  EXPECT_EQ(backend->Run(p, Config(Variant::kFused), none).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuDecode, CandidateConfigsSplitTheFusedVariantOnly) {
  auto backend = CreateCpuBackend();
  const AttentionProblem p = Paged(Decode({70, 33}, 8, 2, 2, 64, true, DType::kBf16), 16);
  const std::vector<KernelConfig> candidates = backend->CandidateConfigs(p);
  ASSERT_FALSE(candidates.empty());
  EXPECT_TRUE(std::is_sorted(candidates.begin(), candidates.end(), ConfigOrderLess));
  std::set<int> fused_splits, block_m;
  for (const KernelConfig& c : candidates) {
    ASSERT_TRUE(backend->CanImplement(p, c).ok()) << c.Key();
    block_m.insert(c.block_m);
    if (c.variant == Variant::kFused) {
      fused_splits.insert(c.split_kv);
    } else {
      EXPECT_EQ(c.split_kv, 1) << c.Key();
    }
  }
  EXPECT_EQ(fused_splits, (std::set<int>{kAutoSplitKv, 1, 2, 4, 8}));
  // 4 heads per KV group x 2 tokens = 8 task rows: one 16-row tile holds them.
  EXPECT_EQ(block_m, (std::set<int>{16}));
  // Every candidate runs and is correct.
  const std::vector<int32_t> table = ShuffledTable(p, 3);
  ExpectEveryConfigMatches(p, table, candidates);
}

// ---------------------------------------------------------------------------------------
// K/V stored as FP8 e4m3 with per-KV-head scales.

AttentionProblem E4m3(AttentionProblem p, DType dtype = DType::kFp16) {
  p.dtype = dtype;
  p.kv_storage = KvStorage::kE4m3;
  return p;
}

// The fp32 configs and those computing in the query's own type.
std::vector<KernelConfig> E4m3Configs(DType dtype, int bm = 16, int bs = 32) {
  std::vector<KernelConfig> out = EveryVariantAndSplit(bm, bs);
  const Precision own = dtype == DType::kFp16 ? Precision::kFp16 : Precision::kBf16;
  for (const KernelConfig& c : EveryVariantAndSplit(bm, bs, 2, own)) out.push_back(c);
  return out;
}

// Every element within `tol` of the reference scaled by the largest |V| of its KV head (the
// output is a convex combination of that head's values), and NaN exactly where it is NaN.
void ExpectMatchesPerHead(const AttentionProblem& p, const Inputs& in, const std::vector<float>& out,
                          const std::vector<double>& ref, double tol) {
  ASSERT_EQ(out.size(), ref.size());
  std::vector<double> v_max(static_cast<size_t>(p.kv_heads), 0.0);
  for (size_t i = 0; i < in.v.size(); ++i) {
    const size_t h = (i / static_cast<size_t>(p.head_dim)) % static_cast<size_t>(p.kv_heads);
    if (std::isfinite(in.v[i])) v_max[h] = std::max(v_max[h], std::fabs(in.v[i] * static_cast<double>(in.v_scale[h])));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const int head = static_cast<int>((i / static_cast<size_t>(p.head_dim)) % static_cast<size_t>(p.q_heads));
    const double bound = tol * std::max(1e-30, v_max[static_cast<size_t>(head / p.heads_per_kv())]);
    ASSERT_EQ(std::isnan(out[i]), std::isnan(ref[i])) << i << " out " << out[i] << " ref " << ref[i];
    if (!std::isnan(ref[i])) ASSERT_LE(std::fabs(out[i] - ref[i]), bound) << i << " out " << out[i] << " ref " << ref[i];
  }
}

void ExpectE4m3ConfigsMatch(const AttentionProblem& p, const std::vector<int32_t>& table, const Inputs& in,
                            const std::vector<KernelConfig>& configs) {
  const std::vector<double> ref = Reference(p, in, table);
  RunOptions options;
  options.block_table = table;
  for (const KernelConfig& c : configs) {
    for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
      SCOPED_TRACE(Describe(p, c) + " isa=" + isa);
      auto out = RunBackend(*backend, p, c, in, options);
      ASSERT_TRUE(out.ok()) << out.status();
      ExpectMatchesPerHead(p, in, *out, ref, Tolerance(c.precision, p.dtype));
    }
  }
}

TEST(CpuE4m3, DecodeContiguousAndShuffledPagesMatchTheReference) {
  // GQA 32/8 and 8/2, odd cache lengths (one shorter than a page, one empty), 1 and 5 new
  // tokens causal, fp16 and bf16 queries, every variant, split and both precisions.
  for (DType dtype : {DType::kFp16, DType::kBf16}) {
    for (const auto& [q_heads, kv_heads, q_len] : {std::tuple{32, 8, 1}, std::tuple{8, 2, 5}}) {
      const AttentionProblem contiguous = E4m3(Decode({157, 1, 0, 300}, q_heads, kv_heads, q_len, 64, true), dtype);
      for (int page : {0, 3, 16}) {
        const AttentionProblem p = page == 0 ? contiguous : Paged(contiguous, page);
        ASSERT_TRUE(p.Validate().ok()) << p.Validate();
        const std::vector<int32_t> table = p.is_paged() ? ShuffledTable(p, page) : std::vector<int32_t>{};
        // Unread pool rows hold NaN bytes (0x7f): a kernel reading one fails.
        ExpectE4m3ConfigsMatch(p, table, PoisonedInputs(p, table, page + 1), E4m3Configs(dtype));
      }
    }
  }
}

TEST(CpuE4m3, PrefillAndVarlenMatchTheReference) {
  AttentionProblem prefill;
  prefill.batch = 2;
  prefill.q_heads = 6;
  prefill.kv_heads = 2;
  prefill.q_len = 37;
  prefill.kv_len = 53;
  prefill.head_dim = 80;
  prefill.causal = true;
  prefill = E4m3(prefill, DType::kBf16);
  std::vector<KernelConfig> unsplit;
  for (Variant v : kVariants) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) unsplit.push_back(Config(v, 1, 16, 16, 2, precision));
  }
  ExpectE4m3ConfigsMatch(prefill, {}, RandomInputs(prefill, 3), unsplit);
  AttentionProblem varlen;
  varlen.kind = ProblemKind::kDecode;
  varlen.batch = 4;
  varlen.q_heads = 8;
  varlen.kv_heads = 2;
  varlen.cu_seqlens_q = {0, 1, 1, 5, 7};
  varlen.cu_seqlens_k = {0, 50, 51, 51, 140};
  varlen.q_len = 4;
  varlen.kv_len = 89;
  varlen.causal = true;
  varlen = E4m3(Paged(varlen, 7));
  ASSERT_TRUE(varlen.Validate().ok()) << varlen.Validate();
  const std::vector<int32_t> table = ShuffledTable(varlen, 8);
  ExpectE4m3ConfigsMatch(varlen, table, PoisonedInputs(varlen, table, 8), E4m3Configs(DType::kFp16));
}

TEST(CpuE4m3, NaNBytesReachTheRowsOfTheirHeadAsInTheReference) {
  AttentionProblem p = E4m3(Paged(Decode({40, 33}, 8, 2, 2, 64, true), 16));
  const std::vector<int32_t> table = ShuffledTable(p, 4);
  Inputs in = PoisonedInputs(p, table, 5);
  // Key 7 of sequence 0, KV head 1: a NaN K byte; key 20 of sequence 1, KV head 0: a NaN V byte.
  const int64_t row = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  in.k[static_cast<size_t>((table[0] * 16 + 7) * row + p.head_dim + 3)] = nan;
  in.v[static_cast<size_t>((table[static_cast<size_t>(p.BlockTableWidth()) + 1] * 16 + 4) * row + 5)] = nan;
  const std::vector<double> ref = Reference(p, in, table);
  int nan_rows = 0;
  for (size_t i = 0; i < ref.size(); i += static_cast<size_t>(p.head_dim)) nan_rows += std::isnan(ref[i + 5]) ? 1 : 0;
  ASSERT_GT(nan_rows, 0);
  ASSERT_LT(static_cast<size_t>(nan_rows), ref.size() / p.head_dim);
  ExpectE4m3ConfigsMatch(p, table, in, E4m3Configs(DType::kFp16));
}

TEST(CpuE4m3, ZeroScalesAndAHeadOfHugeRangeMatchTheReference) {
  const AttentionProblem p = E4m3(Decode({45, 77}, 8, 4, 3, 64, true), DType::kBf16);
  Inputs in;
  in.q = testing_util::Uniform(p.QElements(), -2.0f, 2.0f, 11);
  in.k = testing_util::Uniform(p.KVElements(), -1.0f, 1.0f, 12);
  in.v = testing_util::Uniform(p.KVElements(), -1.0f, 1.0f, 13);
  // KV head 3: keys up to 6 (sharp logits) and values up to 3e4 next to heads of +-1.
  for (size_t i = 0; i < in.k.size(); ++i) {
    if ((i / 64) % 4 == 3) {
      in.k[i] *= 6.0f;
      in.v[i] *= 3e4f;
    }
  }
  RoundToDType(p.dtype, in.q);
  RoundToDType(p.dtype, in.k);
  RoundToDType(p.dtype, in.v);
  testing_util::QuantizeKV(p, &in);
  ASSERT_GT(in.v_scale[3], 50.0f);
  in.k_scale[1] = 0.0f;  // every visible key of head 1 weighs the same (masked ones none)
  in.v_scale[2] = 0.0f;  // head 2's outputs are zeros
  ExpectE4m3ConfigsMatch(p, {}, in, E4m3Configs(DType::kBf16));
}

// A run the backend must refuse: InvalidArgument naming `message`, O untouched.
void ExpectScalesRefused(const AttentionProblem& p, const float* k_scale, const float* v_scale, const char* message) {
  auto backend = CreateCpuBackend();
  auto q = backend->Allocate(static_cast<size_t>(p.QElements()) * 2);
  auto kv = backend->Allocate(static_cast<size_t>(p.KVElements()) * 2);
  const size_t o_bytes = static_cast<size_t>(p.OElements()) * 2;
  auto o = backend->Allocate(o_bytes);
  ASSERT_TRUE(q.ok() && kv.ok() && o.ok());
  ASSERT_TRUE(backend->Fill(q->data(), 0, q->bytes()).ok());
  ASSERT_TRUE(backend->Fill(kv->data(), 0, kv->bytes()).ok());
  ASSERT_TRUE(backend->Fill(o->data(), 0xAB, o_bytes).ok());
  AttentionBuffers buffers{q->data(), kv->data(), kv->data(), o->data()};
  buffers.k_scale = k_scale;
  buffers.v_scale = v_scale;
  for (Variant variant : kVariants) {
    const absl::Status run = backend->Run(p, Config(variant), buffers);
    EXPECT_EQ(run.code(), absl::StatusCode::kInvalidArgument) << VariantName(variant) << " " << run;
    EXPECT_THAT(run.message(), HasSubstr(message));
    TimingOptions timing;
    timing.warmup = 0;
    timing.repeats = 3;
    const absl::Status time = backend->Time(p, Config(variant), buffers, timing).status();
    EXPECT_EQ(time.code(), absl::StatusCode::kInvalidArgument) << VariantName(variant) << " " << time;
  }
  const auto* bytes = static_cast<const uint8_t*>(o->data());
  for (size_t i = 0; i < o_bytes; ++i) ASSERT_EQ(bytes[i], 0xAB) << "O byte " << i << " was written";
}

TEST(CpuE4m3, BadOrMissingScalesAreInvalidArgumentAndLeaveTheOutputUntouched) {
  const AttentionProblem p = E4m3(Decode({40, 17}, 4, 2));
  const float good[2] = {0.01f, 0.02f};
  const float nan_scale[2] = {0.01f, std::numeric_limits<float>::quiet_NaN()};
  const float negative[2] = {-0.5f, 0.02f};
  const float inf_scale[2] = {std::numeric_limits<float>::infinity(), 0.02f};
  const float huge[2] = {0.01f, 3e38f};  // times 1/sqrt(64) is fine, but not for k
  ExpectScalesRefused(p, good, nan_scale, "v_scale[1]");
  ExpectScalesRefused(p, negative, good, "k_scale[0]");
  ExpectScalesRefused(p, inf_scale, good, "k_scale[0]");
  AttentionProblem large_scale = p;
  large_scale.softmax_scale = 1e10f;
  ExpectScalesRefused(large_scale, huge, good, "exceeds");
  ExpectScalesRefused(p, nullptr, good, "k_scale");
  ExpectScalesRefused(p, good, nullptr, "v_scale");
  // Scales given to a problem whose K/V are not quantised are refused as well.
  AttentionProblem plain = p;
  plain.kv_storage = KvStorage::kDType;
  ExpectScalesRefused(plain, good, good, "not quantised");
}

TEST(CpuE4m3, CandidateConfigsAllRunAndMatchTheReference) {
  auto backend = CreateCpuBackend();
  const AttentionProblem p = E4m3(Paged(Decode({70, 33}, 8, 2, 2, 64, true, DType::kBf16), 16), DType::kBf16);
  const std::vector<KernelConfig> candidates = backend->CandidateConfigs(p);
  ASSERT_FALSE(candidates.empty());
  const std::vector<int32_t> table = ShuffledTable(p, 3);
  const Inputs in = PoisonedInputs(p, table, 2);
  const std::vector<double> ref = Reference(p, in, table);
  RunOptions options;
  options.block_table = table;
  for (const KernelConfig& c : candidates) {
    SCOPED_TRACE(Describe(p, c));
    auto out = RunBackend(*backend, p, c, in, options);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectMatchesPerHead(p, in, *out, ref, Tolerance(c.precision, p.dtype));
  }
}

// Scratch in a caller's arena (Backend::UseScratchArena): every scratch buffer a launch has
// (per-worker tiles, split partials, the S/P workspace, a gathered paged cache), each case
// below using at least one of them.
struct ArenaCase {
  AttentionProblem problem;
  KernelConfig config;
};
std::vector<ArenaCase> ArenaCases() {
  AttentionProblem prefill;
  prefill.batch = 2;
  prefill.q_heads = 4;
  prefill.kv_heads = 2;
  prefill.q_len = 67;
  prefill.kv_len = 129;
  prefill.head_dim = 64;
  prefill.causal = true;
  const AttentionProblem decode = Decode({300, 17, 1, 512}, 8, 2, 2, 64, true);
  const AttentionProblem paged = Paged(decode, 16);
  return {{prefill, Config(Variant::kFused, 1, 32, 64, 2)},    {prefill, Config(Variant::kPartial, 1, 32, 32, 2)},
          {prefill, Config(Variant::kMaterialized, 1, 64, 32, 1)}, {decode, Config(Variant::kFused, 4)},
          {decode, Config(Variant::kFused, kAutoSplitKv, 16, 64, 3)}, {paged, Config(Variant::kFused, 2)},
          {paged, Config(Variant::kMaterialized)}};
}

// A case's inputs of `seed`, a paged one's unread pool rows poisoned, and its block table.
struct CaseInputs {
  std::vector<int32_t> table;
  Inputs in;
  RunOptions options;
};
CaseInputs InputsOf(const ArenaCase& c, uint64_t seed) {
  CaseInputs ci;
  if (c.problem.is_paged()) ci.table = ShuffledTable(c.problem, seed);
  ci.in = PoisonedInputs(c.problem, ci.table, seed);
  ci.options.block_table = ci.table;
  return ci;
}

TEST(CpuScratchArena, OutputsAreBitForBitThoseOfTheBackendsOwnScratch) {
  auto own = CreateCpuBackend();
  auto in_arena = CreateCpuBackend();
  for (const ArenaCase& c : ArenaCases()) {
    SCOPED_TRACE(Describe(c.problem, c.config));
    const CaseInputs ci = InputsOf(c, 5);
    auto expected = RunBackend(*own, c.problem, c.config, ci.in, ci.options);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_LE(MaxAbsError(*expected, Reference(c.problem, ci.in, ci.table)),
              Tolerance(c.config.precision, c.problem.dtype));

    absl::StatusOr<size_t> bytes = in_arena->ScratchBytes(c.problem, c.config);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_GT(*bytes, 0u);
    auto arena = in_arena->Allocate(*bytes);
    ASSERT_TRUE(arena.ok());
    // Contents are undefined at each launch: NaN everywhere must not reach O.
    ASSERT_TRUE(in_arena->Fill(arena->data(), 0xFF, arena->bytes()).ok());
    ASSERT_TRUE(in_arena->UseScratchArena(arena->data(), arena->bytes()).ok());
    auto got = RunBackend(*in_arena, c.problem, c.config, ci.in, ci.options);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), expected->size());
    EXPECT_EQ(std::memcmp(got->data(), expected->data(), got->size() * sizeof(float)), 0);
    ASSERT_TRUE(in_arena->UseScratchArena(nullptr, 0).ok());
  }
}

TEST(CpuScratchArena, TwoBackendsTakingTurnsInOneArenaEachGetTheirOwnResults) {
  // As two builds measured side by side: one arena, launches alternating, each finding the
  // other's leftovers.
  const std::vector<ArenaCase> cases = ArenaCases();
  auto first = CreateCpuBackend();
  auto second = CreateCpuBackend();
  size_t bytes = 0;
  for (const ArenaCase& c : cases) bytes = std::max(bytes, *first->ScratchBytes(c.problem, c.config));
  auto arena = first->Allocate(bytes);
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE(first->UseScratchArena(arena->data(), bytes).ok());
  ASSERT_TRUE(second->UseScratchArena(arena->data(), bytes).ok());
  for (size_t i = 0; i < cases.size(); ++i) {
    // The two run different cases back to back.
    for (const ArenaCase* c : {&cases[i], &cases[(i + 3) % cases.size()]}) {
      SCOPED_TRACE(Describe(c->problem, c->config));
      const CaseInputs ci = InputsOf(*c, 6 + i);
      Backend& backend = c == &cases[i] ? *first : *second;
      auto out = RunBackend(backend, c->problem, c->config, ci.in, ci.options);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_LE(MaxAbsError(*out, Reference(c->problem, ci.in, ci.table)),
                Tolerance(c->config.precision, c->problem.dtype));
    }
  }
}

TEST(CpuScratchArena, AnArenaTooSmallIsRefusedUntilTheBackendGoesBackToItsOwn) {
  auto backend = CreateCpuBackend();
  const ArenaCase c = ArenaCases()[2];  // materialized: tiles and the S/P workspace
  absl::StatusOr<size_t> bytes = backend->ScratchBytes(c.problem, c.config);
  ASSERT_TRUE(bytes.ok());
  auto arena = backend->Allocate(*bytes);
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE(backend->UseScratchArena(arena->data(), *bytes - 64).ok());
  const Inputs in = RandomInputs(c.problem, 7);
  auto out = RunBackend(*backend, c.problem, c.config, in);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(out.status().message(), HasSubstr("scratch arena"));
  // Back on its own memory it runs.
  ASSERT_TRUE(backend->UseScratchArena(nullptr, 0).ok());
  EXPECT_TRUE(RunBackend(*backend, c.problem, c.config, in).ok());
}

TEST(CpuScratchArena, ScratchBytesGrowsWithTheWorkspaceAndRefusesWhatCannotRun) {
  auto backend = CreateCpuBackend();
  const ArenaCase c = ArenaCases()[0];
  const size_t fused = *backend->ScratchBytes(c.problem, Config(Variant::kFused, 1, 32, 32, 2));
  const size_t fused_more_threads = *backend->ScratchBytes(c.problem, Config(Variant::kFused, 1, 32, 32, 4));
  const size_t materialized = *backend->ScratchBytes(c.problem, Config(Variant::kMaterialized, 1, 32, 32, 2));
  // One tile set per worker, beside the launch's tables (geometry, tasks: well under 2 KiB here).
  EXPECT_NEAR(static_cast<double>(fused_more_threads), 2.0 * fused, 2048.0);
  // The S/P workspace: every query row's visible keys, fp32.
  EXPECT_GE(materialized, fused + static_cast<size_t>(c.problem.q_heads) * c.problem.TotalQueries() * 4);
  KernelConfig unsupported = Config(Variant::kFused, 1, 32, 32, 2);
  unsupported.block_s = 48;
  EXPECT_EQ(backend->ScratchBytes(c.problem, unsupported).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(CpuScratchArena, AMisalignedArenaIsInvalidAndNullMeansOwnMemory) {
  auto backend = CreateCpuBackend();
  auto arena = backend->Allocate(1 << 16);
  ASSERT_TRUE(arena.ok());
  absl::Status misaligned = backend->UseScratchArena(static_cast<char*>(arena->data()) + 8, 1024);
  EXPECT_EQ(misaligned.code(), absl::StatusCode::kInvalidArgument);
  // The question "does it take an arena" is UseScratchArena(nullptr, 0): OK here.
  EXPECT_TRUE(backend->UseScratchArena(nullptr, 0).ok());
}

// Worker threads lent by another backend (Backend::LendWorkers, UseWorkers).
struct CountingPool {
  WorkerPool inner;
  int calls = 0;
  int workers_asked = 0;  // the most workers a launch asked for
  static void ParallelFor(void* self, int workers, int64_t n, void (*body)(void*, int64_t, int), void* context) {
    auto* pool = static_cast<CountingPool*>(self);
    ++pool->calls;
    pool->workers_asked = std::max(pool->workers_asked, workers);
    pool->inner.parallel_for(pool->inner.context, workers, n, body, context);
  }
  WorkerPool AsPool() { return WorkerPool{this, &ParallelFor}; }
};

TEST(CpuWorkers, TasksRunOnLentThreadsWithTheOwnThreadsResults) {
  auto lender = CreateCpuBackend();
  auto own = CreateCpuBackend();
  auto borrower = CreateCpuBackend();
  absl::StatusOr<WorkerPool> lent = lender->LendWorkers();
  ASSERT_TRUE(lent.ok()) << lent.status();
  CountingPool counting{*lent};
  const WorkerPool pool = counting.AsPool();
  ASSERT_TRUE(borrower->UseWorkers(&pool).ok());
  for (const ArenaCase& c : ArenaCases()) {
    SCOPED_TRACE(Describe(c.problem, c.config));
    const CaseInputs ci = InputsOf(c, 8);
    auto expected = RunBackend(*own, c.problem, c.config, ci.in, ci.options);
    const int calls_before = counting.calls;
    counting.workers_asked = 0;
    auto got = RunBackend(*borrower, c.problem, c.config, ci.in, ci.options);
    ASSERT_TRUE(expected.ok() && got.ok());
    EXPECT_GT(counting.calls, calls_before) << "the launch ran on the lent pool";
    EXPECT_LE(counting.workers_asked, c.config.threads);
    EXPECT_EQ(std::memcmp(got->data(), expected->data(), got->size() * sizeof(float)), 0);
  }
  // Back on its own threads: the lent pool is no longer called.
  ASSERT_TRUE(borrower->UseWorkers(nullptr).ok());
  const int calls = counting.calls;
  const ArenaCase c = ArenaCases()[0];
  ASSERT_TRUE(RunBackend(*borrower, c.problem, c.config, RandomInputs(c.problem, 9)).ok());
  EXPECT_EQ(counting.calls, calls);
  WorkerPool broken;
  EXPECT_EQ(borrower->UseWorkers(&broken).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fusetune
