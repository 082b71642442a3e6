#include "fusetune/tuner/runner.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <limits>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"
#include "internal.h"

namespace fusetune {
namespace {

using tuner_internal::Clock;
using tuner_internal::SecondsSince;

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64(uint64_t& state) { return Mix64(state += 0x9e3779b97f4a7c15ull); }

uint64_t HashString(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Runs body(begin, end) over [0, n) in contiguous chunks on up to the hardware's threads;
// small ranges stay on the calling thread.
template <typename Body>
void ParallelFor(int64_t n, int64_t min_chunk, const Body& body) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t workers = std::clamp<int64_t>(n / std::max<int64_t>(min_chunk, 1), 1, hw);
  if (workers <= 1) {
    body(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t chunk = (n + workers - 1) / workers;
  for (int64_t w = 0; w < workers; ++w) {
    const int64_t begin = w * chunk, end = std::min(n, begin + chunk);
    if (begin >= end) break;
    threads.emplace_back([&body, begin, end] { body(begin, end); });
  }
  for (std::thread& t : threads) t.join();
}

// Uniform in [-1, 1], never exactly (or nearly) zero: an all-zero or sparse input would let
// a kernel that skips work pass verification. Counter-based (element i depends only on the
// seed and i), so it fills in parallel and gives the same tensor on every host.
float UniformAt(uint64_t seed, uint64_t i) {
  const double u = static_cast<double>(Mix64(seed + i * 0x9e3779b97f4a7c15ull) >> 11) * 0x1.0p-53;
  double v = 2.0 * u - 1.0;
  if (std::fabs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3;
  return static_cast<float>(v);
}

void FillUniform(std::vector<float>& values, uint64_t seed) {
  ParallelFor(static_cast<int64_t>(values.size()), int64_t{1} << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) values[static_cast<size_t>(i)] = UniformAt(seed, static_cast<uint64_t>(i));
  });
}

// Row of K/V memory holding key `pos` of sequence `b`: through the block table for a paged
// problem, the contiguous layout's row otherwise.
int64_t KeyRow(const AttentionProblem& p, std::span<const int32_t> table, int b, int pos) {
  if (!p.is_paged()) return p.KeyStart(b) + pos;
  const int page = p.page_block_size;
  return static_cast<int64_t>(table[static_cast<size_t>(static_cast<int64_t>(b) * p.BlockTableWidth() + pos / page)]) *
             page +
         pos % page;
}

// The adversarial inputs (see runner.h): in every head, query dim 0 is 1 (the rest small),
// key dim 0 grows with the key's position so every later key tile raises the running max,
// some keys are -inf in dim 0 (their scores are -inf: masked; the first quarter of each
// sequence up to 24 keys and every 7th), and values are large. A paged cache is written
// through its table; where sequences share a page the last one written wins, which the
// reference (gathered afterwards) sees as well.
void MakeAdversarial(const AttentionProblem& p, std::span<const int32_t> table, std::vector<float>& q,
                     std::vector<float>& k, std::vector<float>& v) {
  const int d = p.head_dim;
  const double scale = std::fabs(static_cast<double>(p.EffectiveScale()));
  // Logits reach ~12: e^12 between the first and last key, far past fp16's range.
  const float growth = static_cast<float>(std::min(1000.0, scale > 0 ? 12.0 / scale : 1000.0));
  for (size_t i = 0; i < q.size(); ++i) q[i] = (i % static_cast<size_t>(d) == 0) ? 1.0f : 0.25f * q[i];
  for (float& x : v) x *= 64.0f;
  for (int b = 0; b < p.batch; ++b) {
    // A paged sequence owns only its visible keys' pages; the table says nothing past them.
    const int len = p.is_paged() ? p.VisibleKeyLen(b) : p.KeyLen(b);
    const int masked_prefix = std::min(24, len / 4);
    for (int pos = 0; pos < len; ++pos) {
      const bool masked = pos < masked_prefix || pos % 7 == 5;
      const float dim0 = masked ? -std::numeric_limits<float>::infinity()
                                : growth * static_cast<float>(pos + 1) / static_cast<float>(len);
      const int64_t row = KeyRow(p, table, b, pos) * p.kv_heads;
      for (int h = 0; h < p.kv_heads; ++h) k[static_cast<size_t>((row + h) * d)] = dim0;
    }
  }
}

// Query tokens to verify in a large problem: first and last of each sequence (while they
// fit), the rest drawn at random, deduplicated and sorted.
std::vector<int64_t> SampledTokens(const AttentionProblem& problem, int count, uint64_t state) {
  std::set<int64_t> tokens;
  const int64_t total = problem.TotalQueries();
  for (int b = 0; b < problem.batch && static_cast<int>(tokens.size()) + 2 <= count; ++b) {
    const int len = problem.QueryLen(b);
    if (len == 0) continue;
    tokens.insert(problem.QueryStart(b));
    tokens.insert(problem.QueryStart(b) + len - 1);
  }
  const int want = static_cast<int>(std::min<int64_t>(count, total));
  while (static_cast<int>(tokens.size()) < want) {
    tokens.insert(static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(total)));
  }
  return {tokens.begin(), tokens.end()};
}

// Index of the first non-finite element of raw storage (NaN/Inf: exponent all ones), or -1;
// `how_many` gets their count. Scanned on the host's threads: a large output is tens of MB.
int64_t FirstNonFinite(DType dtype, const uint8_t* data, int64_t count, int64_t* how_many) {
  std::atomic<int64_t> first{-1}, bad{0};
  auto scan = [&](auto word, auto exponent_mask) {
    using W = decltype(word);
    ParallelFor(count, int64_t{1} << 21, [&](int64_t b, int64_t e) {
      int64_t local_first = -1, local_bad = 0;
      for (int64_t i = b; i < e; ++i) {
        W w;
        std::memcpy(&w, data + i * static_cast<int64_t>(sizeof(W)), sizeof(W));
        if ((w & exponent_mask) == exponent_mask) {
          if (local_first < 0) local_first = i;
          ++local_bad;
        }
      }
      if (local_bad == 0) return;
      bad += local_bad;
      int64_t seen = first.load();
      while ((seen < 0 || local_first < seen) && !first.compare_exchange_weak(seen, local_first)) {
      }
    });
  };
  switch (dtype) {
    case DType::kFp32: scan(uint32_t{0}, uint32_t{0x7f800000u}); break;
    case DType::kFp16: scan(uint16_t{0}, uint16_t{0x7c00u}); break;
    case DType::kBf16: scan(uint16_t{0}, uint16_t{0x7f80u}); break;
  }
  *how_many = bad.load();
  return first.load();
}

struct Verification {
  bool passed = false;
  std::string message;
  double max_abs_error = 0;
  double max_rel_error = 0;
  // K/V stored as e4m3: max_rel_error's metric against the reference of the unquantised K/V.
  double unquantised_rel_error = 0;
  int64_t checked = 0;
};

}  // namespace

// One problem's inputs, on the device, and the fp64 reference of the checked rows: made
// once per problem, reused by every config.
struct InputSet {
  std::string name;  // "random", "adversarial"
  DeviceMemory q, k, v;
  DeviceMemory block_table;  // paged problems only
  DeviceMemory k_scale, v_scale;  // K/V stored as e4m3 only: kv_heads fp32 each
  std::vector<double> ref;  // [token of `tokens`][q_heads][head_dim]
  double max_ref = 0;
  double logit_bound = 0;
  // K/V stored as e4m3, random set only: the reference of the same rows on the K/V before
  // quantisation (the problem with kv_storage dtype), what the format costs.
  std::vector<double> unquantised_ref;
  double unquantised_max_ref = 0;
};

class Runner::ProblemInputs {
 public:
  std::string problem_key;
  std::vector<int64_t> tokens;  // checked query tokens, sorted
  std::vector<InputSet> sets;   // [0] random (timed), [1] adversarial (when enabled)
  DeviceMemory out;
  std::vector<uint8_t> out_host;
};

namespace {

// RoundToDType over the host's threads (tensors of a large problem hold ~10^8 elements).
void RoundInParallel(DType dtype, std::vector<float>& values) {
  ParallelFor(static_cast<int64_t>(values.size()), int64_t{1} << 20, [&](int64_t b, int64_t e) {
    RoundToDType(dtype, std::span<float>(values.data() + b, static_cast<size_t>(e - b)));
  });
}

absl::StatusOr<DeviceMemory> Upload(Backend& backend, DType dtype, const std::vector<float>& values) {
  const size_t esize = static_cast<size_t>(DTypeBytes(dtype));
  const size_t bytes = values.size() * esize;
  absl::StatusOr<DeviceMemory> mem = backend.Allocate(bytes);
  if (!mem.ok()) return mem.status();
  std::vector<uint8_t> staging(bytes);
  ParallelFor(static_cast<int64_t>(values.size()), int64_t{1} << 20, [&](int64_t b, int64_t e) {
    EncodeTensor(dtype, std::span<const float>(values.data() + b, static_cast<size_t>(e - b)),
                 staging.data() + static_cast<size_t>(b) * esize);
  });
  if (absl::Status s = backend.CopyToDevice(mem->data(), staging.data(), bytes); !s.ok()) return s;
  return mem;
}

// Uploads raw elements (a block table, e4m3 bytes, fp32 scales) as they are.
template <typename T>
absl::StatusOr<DeviceMemory> UploadRaw(Backend& backend, const std::vector<T>& values) {
  const size_t bytes = values.size() * sizeof(T);
  absl::StatusOr<DeviceMemory> mem = backend.Allocate(bytes);
  if (!mem.ok()) return mem.status();
  if (absl::Status s = backend.CopyToDevice(mem->data(), values.data(), bytes); !s.ok()) return s;
  return mem;
}

// K/V of an e4m3 problem: `values` (floats in the problem's dtype) quantised per KV head
// (QuantizeE4m3PerHead) and replaced by their e4m3 values, the bytes and scales uploaded.
absl::Status QuantizeAndUpload(Backend& backend, const AttentionProblem& problem, std::vector<float>& values,
                               DeviceMemory& bytes_out, DeviceMemory& scales_out, std::vector<float>& scales) {
  std::vector<uint8_t> bytes(values.size());
  scales.assign(static_cast<size_t>(problem.kv_heads), 1.0f);
  QuantizeE4m3PerHead(values, problem.kv_heads, problem.head_dim, bytes, scales);
  ParallelFor(static_cast<int64_t>(values.size()), int64_t{1} << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) values[static_cast<size_t>(i)] = E4m3ToFloat(bytes[static_cast<size_t>(i)]);
  });
  absl::StatusOr<DeviceMemory> d_bytes = UploadRaw(backend, bytes);
  if (!d_bytes.ok()) return d_bytes.status();
  absl::StatusOr<DeviceMemory> d_scales = UploadRaw(backend, scales);
  if (!d_scales.ok()) return d_scales.status();
  bytes_out = *std::move(d_bytes);
  scales_out = *std::move(d_scales);
  return absl::OkStatus();
}

// Uploads the set's tensors as the kernel reads them (and the block table of a paged problem).
// K/V stored as e4m3 are quantised first: k and v then hold the e4m3 values, `scales` the K
// and V scales.
absl::Status UploadSet(Backend& backend, const AttentionProblem& problem, const std::vector<float>& q,
                       std::vector<float>& k, std::vector<float>& v, const std::vector<int32_t>& table,
                       InputSet& set, std::vector<float> (&scales)[2]) {
  absl::StatusOr<DeviceMemory> dq = Upload(backend, problem.dtype, q);
  if (!dq.ok()) return dq.status();
  set.q = *std::move(dq);
  if (problem.is_kv_quantized()) {
    if (absl::Status s = QuantizeAndUpload(backend, problem, k, set.k, set.k_scale, scales[0]); !s.ok()) return s;
    if (absl::Status s = QuantizeAndUpload(backend, problem, v, set.v, set.v_scale, scales[1]); !s.ok()) return s;
  } else {
    absl::StatusOr<DeviceMemory> dk = Upload(backend, problem.dtype, k);
    if (!dk.ok()) return dk.status();
    absl::StatusOr<DeviceMemory> dv = Upload(backend, problem.dtype, v);
    if (!dv.ok()) return dv.status();
    set.k = *std::move(dk);
    set.v = *std::move(dv);
  }
  if (!problem.is_paged()) return absl::OkStatus();
  absl::StatusOr<DeviceMemory> dt = UploadRaw(backend, table);
  if (!dt.ok()) return dt.status();
  set.block_table = *std::move(dt);
  return absl::OkStatus();
}

// Replaces the paged pools `k` and `v` by their keys gathered through `table` in the layout of
// problem.Unpaged() (one tensor at a time: a pool is not needed once gathered).
absl::Status GatherInPlace(const AttentionProblem& problem, const std::vector<int32_t>& table, std::vector<float>& k,
                           std::vector<float>& v) {
  for (std::vector<float>* tensor : {&k, &v}) {
    absl::StatusOr<std::vector<float>> gathered = GatherPagedKV(problem, *tensor, table);
    if (!gathered.ok()) {
      return absl::InternalError(absl::StrCat("gathering the paged K/V failed: ", gathered.status().message()));
    }
    *tensor = *std::move(gathered);
  }
  return absl::OkStatus();
}

// The fp64 reference of the rows of `tokens` ([token][q_heads][head_dim]) and its largest |x|.
absl::Status ReferenceRows(const AttentionProblem& flat, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const KvScales& scales, const std::vector<int64_t>& tokens,
                           std::vector<double>& ref, double& max_ref) {
  const int heads = flat.q_heads, d = flat.head_dim;
  ref.assign(tokens.size() * static_cast<size_t>(heads) * static_cast<size_t>(d), 0.0);
  std::vector<absl::Status> failures(tokens.size() * static_cast<size_t>(heads));
  // Each (token, head) row costs ~4·keys·d flops; spread the rows over the host's threads.
  ParallelFor(static_cast<int64_t>(failures.size()), 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const size_t ti = static_cast<size_t>(r / heads);
      const int h = static_cast<int>(r % heads);
      std::span<double> row(ref.data() + static_cast<size_t>(r) * d, static_cast<size_t>(d));
      failures[static_cast<size_t>(r)] = ReferenceAttentionRow(flat, q, k, v, tokens[ti], h, row, scales);
    }
  });
  for (const absl::Status& s : failures) {
    if (!s.ok()) return absl::InternalError(absl::StrCat("the fp64 reference failed: ", s.message()));
  }
  max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::fabs(x));
  return absl::OkStatus();
}

absl::StatusOr<InputSet> MakeInputSet(Backend& backend, const AttentionProblem& problem, std::string name,
                                      uint64_t seed, bool adversarial, const std::vector<int64_t>& tokens) {
  InputSet set;
  set.name = std::move(name);
  std::vector<int32_t> table;
  if (problem.is_paged()) table = GenerateBlockTable(problem, Mix64(seed ^ 4));
  // K and V as the kernel sees them: the pool of a paged problem.
  std::vector<float> q(static_cast<size_t>(problem.QElements()));
  std::vector<float> k(static_cast<size_t>(problem.KVElements()));
  std::vector<float> v(static_cast<size_t>(problem.KVElements()));
  FillUniform(q, Mix64(seed ^ 1));
  FillUniform(k, Mix64(seed ^ 2));
  FillUniform(v, Mix64(seed ^ 3));
  if (adversarial) MakeAdversarial(problem, table, q, k, v);
  RoundInParallel(problem.dtype, q);
  RoundInParallel(problem.dtype, k);
  RoundInParallel(problem.dtype, v);
  // What the format costs is measured on the random set: its K/V before quantisation.
  const bool unquantised_check = problem.is_kv_quantized() && !adversarial;
  std::vector<float> k_plain, v_plain;
  if (unquantised_check) {
    k_plain = k;
    v_plain = v;
  }

  std::vector<float> scales[2];
  if (absl::Status s = UploadSet(backend, problem, q, k, v, table, set, scales); !s.ok()) return s;
  const KvScales kv_scales = problem.is_kv_quantized() ? KvScales{scales[0], scales[1]} : KvScales{};
  // The reference of a paged problem is that of its contiguous twin on K/V gathered through
  // the same table.
  const AttentionProblem flat = problem.Unpaged();
  if (problem.is_paged()) {
    if (absl::Status s = GatherInPlace(problem, table, k, v); !s.ok()) return s;
    if (unquantised_check) {
      if (absl::Status s = GatherInPlace(problem, table, k_plain, v_plain); !s.ok()) return s;
    }
  }
  set.logit_bound = LogitBound(flat, q, k, kv_scales);
  if (absl::Status s = ReferenceRows(flat, q, k, v, kv_scales, tokens, set.ref, set.max_ref); !s.ok()) return s;
  if (unquantised_check) {
    AttentionProblem plain = flat;
    plain.kv_storage = KvStorage::kDType;
    if (absl::Status s = ReferenceRows(plain, q, k_plain, v_plain, {}, tokens, set.unquantised_ref,
                                       set.unquantised_max_ref);
        !s.ok()) {
      return s;
    }
  }
  return set;
}

// The set's tensors (and block table) with `out` as the output.
AttentionBuffers BuffersOf(const InputSet& set, const DeviceMemory& out) {
  AttentionBuffers buffers{set.q.data(), set.k.data(), set.v.data(), out.data(),
                           static_cast<const int32_t*>(set.block_table.data())};
  buffers.k_scale = static_cast<const float*>(set.k_scale.data());
  buffers.v_scale = static_cast<const float*>(set.v_scale.data());
  return buffers;
}

// Checks the output in `host` (raw storage, the whole tensor) against the set's reference.
Verification Verify(const AttentionProblem& problem, const KernelConfig& config,
                    const std::vector<int64_t>& tokens, const InputSet& set,
                    const std::vector<uint8_t>& host) {
  Verification r;
  const int d = problem.head_dim;
  const int heads = problem.q_heads;
  // 1. NaN/Inf anywhere: also catches elements the kernel never wrote (poisoned NaN).
  int64_t bad = 0;
  const int64_t first_bad = FirstNonFinite(problem.dtype, host.data(), problem.OElements(), &bad);
  if (bad > 0) {
    const int64_t row = first_bad / d;
    r.message = absl::StrCat(bad, " output element(s) are NaN/Inf (unwritten or overflowed); first at token ",
                             row / heads, " head ", row % heads, " dim ", first_bad % d);
    return r;
  }
  // 2. The checked rows against the fp64 reference.
  const size_t row_elems = static_cast<size_t>(heads) * static_cast<size_t>(d);
  const size_t esize = static_cast<size_t>(DTypeBytes(problem.dtype));
  std::vector<float> out(row_elems);
  const double denom = std::max(set.max_ref, 1e-30);  // all-zero reference: absolute floor
  const bool unquantised = !set.unquantised_ref.empty();
  int64_t worst = -1;
  double unquantised_abs = 0;
  for (size_t ti = 0; ti < tokens.size(); ++ti) {
    const size_t base = static_cast<size_t>(tokens[ti]) * row_elems;
    DecodeTensor(problem.dtype, host.data() + base * esize, row_elems, out.data());
    for (size_t e = 0; e < row_elems; ++e) {
      const double err = std::fabs(static_cast<double>(out[e]) - set.ref[ti * row_elems + e]);
      if (err > r.max_abs_error) {
        r.max_abs_error = err;
        worst = static_cast<int64_t>(base + e);
      }
      if (unquantised) {
        unquantised_abs =
            std::max(unquantised_abs, std::fabs(static_cast<double>(out[e]) - set.unquantised_ref[ti * row_elems + e]));
      }
    }
  }
  r.checked = static_cast<int64_t>(set.ref.size());
  r.max_rel_error = set.max_ref > 0 ? r.max_abs_error / denom : (r.max_abs_error > 0 ? INFINITY : 0.0);
  if (unquantised) {
    r.unquantised_rel_error = set.unquantised_max_ref > 0 ? unquantised_abs / set.unquantised_max_ref
                                                          : (unquantised_abs > 0 ? INFINITY : 0.0);
  }
  const double tol = ToleranceFor(config.precision, problem.dtype, set.logit_bound, problem.head_dim);
  if (!(r.max_rel_error <= tol)) {
    const int64_t row = worst / d;
    r.message = absl::StrCat("max error ", r.max_abs_error, " = ", r.max_rel_error, " of max|ref| ", set.max_ref,
                             " exceeds tolerance ", tol, " (worst at token ", row / heads, " head ", row % heads,
                             " dim ", worst % d, ")");
    return r;
  }
  r.passed = true;
  return r;
}

// The outcome of a backend error: a stop (signal or budget) says nothing about the config;
// running out of memory is the host's or device's limit, not a launch failure.
TrialOutcome OutcomeOfError(const absl::Status& s, TrialOutcome otherwise) {
  if (StopToken::IsStop(s)) return TrialOutcome::kInterrupted;
  if (absl::IsResourceExhausted(s)) return TrialOutcome::kResourceExhausted;
  return otherwise;
}

// The message of a trial that ran out of host memory: what the problem's inputs need.
std::string OutOfHostMemory(const AttentionProblem& problem, const RunnerOptions& options, const std::exception& e) {
  const MemoryNeed need = MeasurementMemory(problem, options);
  return absl::StrCat("out of host memory (", e.what(), "): measuring ", problem.Key(), " needs about ",
                      FormatBytes(need.host_bytes), " of host and ", FormatBytes(need.device_bytes),
                      " of device memory");
}

// A trial's identity, before anything is measured.
Trial NewTrial(const std::string& problem_key, const KernelConfig& config, int64_t run_id, int attempt,
               TrialStage stage) {
  Trial t;
  t.run_id = run_id;
  t.problem_key = problem_key;
  t.config_key = config.Key();
  t.attempt = attempt;
  t.stage = stage;
  t.trial_id = TrialId(run_id, problem_key, t.config_key, attempt, stage);
  t.created_unix_ms = NowUnixMs();
  return t;
}

SampleBlock ToBlock(const TimingSamples& timing) {
  SampleBlock b;
  b.samples = static_cast<int>(timing.micros.size());
  b.median_us = Quantile(timing.micros, 0.5);
  b.before = timing.before;
  b.after = timing.after;
  b.unsteady = DeviceStateMoved(timing.before, timing.after);
  b.graphed = timing.graphed;
  return b;
}

}  // namespace

std::vector<int32_t> GenerateBlockTable(const AttentionProblem& problem, uint64_t seed) {
  if (!problem.is_paged() || !problem.Validate().ok()) return {};
  const int64_t pool = problem.PoolPages();
  const int width = problem.BlockTableWidth();
  const int prefix = problem.shared_prefix_pages;
  // A seeded Fisher-Yates shuffle of the pool: the n-th distinct page the sequences need is
  // physical[n % pool], so consecutive logical pages are scattered over the pool.
  std::vector<int32_t> physical(static_cast<size_t>(pool));
  std::iota(physical.begin(), physical.end(), 0);
  uint64_t state = Mix64(seed);
  for (size_t i = physical.size(); i > 1; --i) std::swap(physical[i - 1], physical[SplitMix64(state) % i]);
  std::vector<int32_t> table(static_cast<size_t>(problem.BlockTableEntries()), physical.back());
  int64_t next = prefix;  // pages [0, prefix) of the shuffle are the shared prefix
  for (int b = 0; b < problem.batch; ++b) {
    int32_t* row = table.data() + static_cast<int64_t>(b) * width;
    for (int i = 0; i < problem.PagesOfSequence(b); ++i) {
      row[i] = physical[static_cast<size_t>((i < prefix ? i : next++) % pool)];
    }
  }
  return table;
}

MemoryNeed MeasurementMemory(const AttentionProblem& problem, const RunnerOptions& options) {
  MemoryNeed need;
  if (!problem.Validate().ok()) return need;
  const int64_t esize = DTypeBytes(problem.dtype);
  const int64_t kv_esize = problem.KVElementBytes();
  const int64_t q = problem.QElements(), kv = problem.KVElements(), o = problem.OElements();
  const int64_t kv_unpaged = problem.Unpaged().KVElements();
  const int64_t sets = options.adversarial_check ? 2 : 1;
  const int64_t table = problem.is_paged() ? problem.BlockTableEntries() * int64_t{4} : 0;
  const int64_t scales = problem.is_kv_quantized() ? 2 * problem.kv_heads * int64_t{4} : 0;
  need.device_bytes = sets * (q * esize + 2 * kv * kv_esize + table + scales) + o * esize;
  const int64_t rows = o <= options.full_check_max_elements
                           ? problem.TotalQueries()
                           : std::min<int64_t>(problem.TotalQueries(), options.sampled_rows);
  // Making a set: q, k and v as floats (a paged pool's K/V gathered one tensor at a time), one
  // tensor's staging in the storage dtype; then the output's host copy and the reference rows.
  // K/V stored as e4m3: the random set also keeps K/V before quantisation as floats and the
  // reference rows of those.
  const bool quantized = problem.is_kv_quantized();
  need.host_bytes = 4 * (q + 2 * std::max(kv, kv_unpaged)) + (problem.is_paged() ? 4 * kv_unpaged : 0) +
                    esize * std::max(q, kv) + o * esize +
                    (sets + (quantized ? 1 : 0)) * rows * problem.q_heads * problem.head_dim * int64_t{8} +
                    (quantized ? 4 * 2 * std::max(kv, kv_unpaged) : 0);
  return need;
}

int64_t HostMemoryAvailableBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  int64_t available = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : std::numeric_limits<int64_t>::max();
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    // What the process has mapped already counts against the limit.
    int64_t mapped = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
      long size_pages = 0;
      if (std::fscanf(statm, "%ld", &size_pages) == 1 && page_size > 0) mapped = int64_t{size_pages} * page_size;
      std::fclose(statm);
    }
    available = std::min<int64_t>(available, std::max<int64_t>(0, static_cast<int64_t>(limit.rlim_cur) - mapped));
  }
  return available;
}

absl::Status CheckMemoryFits(const AttentionProblem& problem, const DeviceInfo& device, const RunnerOptions& options) {
  const MemoryNeed need = MeasurementMemory(problem, options);
  const int64_t host = HostMemoryAvailableBytes();
  const bool device_is_host = device.backend == "cpu";
  const int64_t host_need = need.host_bytes + (device_is_host ? need.device_bytes : 0);
  if (host_need > host) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "problem ", problem.Key(), " needs about ", FormatBytes(host_need), " of host memory for its inputs, output and ",
        "fp64 reference rows; this process can take ", FormatBytes(host),
        " (physical memory, or what the address-space limit leaves)"));
  }
  if (!device_is_host && device.memory_bytes > 0 && need.device_bytes > device.memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("problem ", problem.Key(), " needs about ",
                                                     FormatBytes(need.device_bytes), " of device memory for its ",
                                                     "inputs and output; ", device.name, " has ",
                                                     FormatBytes(device.memory_bytes)));
  }
  return absl::OkStatus();
}

double Quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + (samples[hi] - samples[lo]) * frac;
}

Runner::Runner(Backend& backend, RunnerOptions options) : backend_(backend), options_(std::move(options)) {}
// The token may point at the caller's cancel flag: the backend outlives the runner, so it
// must not keep it.
Runner::~Runner() { backend_.SetStopToken(StopToken()); }

absl::StatusOr<Runner::ProblemInputs*> Runner::InputsFor(const AttentionProblem& problem) {
  const std::string key = problem.Key();
  if (inputs_ != nullptr && inputs_->problem_key == key) return inputs_.get();
  inputs_.reset();  // free the previous problem's device memory first
  const auto start = Clock::now();
  auto inputs = std::make_unique<ProblemInputs>();
  inputs->problem_key = key;
  const uint64_t seed = HashString(key, Mix64(options_.seed));
  if (problem.OElements() <= options_.full_check_max_elements) {
    inputs->tokens.resize(static_cast<size_t>(problem.TotalQueries()));
    std::iota(inputs->tokens.begin(), inputs->tokens.end(), int64_t{0});
  } else {
    inputs->tokens = SampledTokens(problem, options_.sampled_rows, seed);
  }
  absl::StatusOr<InputSet> random = MakeInputSet(backend_, problem, "random", seed, false, inputs->tokens);
  if (!random.ok()) return random.status();
  inputs->sets.push_back(*std::move(random));
  if (options_.adversarial_check) {
    absl::StatusOr<InputSet> adversarial =
        MakeInputSet(backend_, problem, "adversarial", Mix64(seed + 1), true, inputs->tokens);
    if (!adversarial.ok()) return adversarial.status();
    inputs->sets.push_back(*std::move(adversarial));
  }
  const size_t o_bytes = static_cast<size_t>(problem.OElements()) * static_cast<size_t>(DTypeBytes(problem.dtype));
  absl::StatusOr<DeviceMemory> out = backend_.Allocate(o_bytes);
  if (!out.ok()) return out.status();
  inputs->out = *std::move(out);
  inputs->out_host.resize(o_bytes);
  inputs_ = std::move(inputs);
  prepare_seconds_ = SecondsSince(start);
  return inputs_.get();
}

absl::Status Runner::PrepareInputs(const AttentionProblem& problem) {
  if (absl::Status s = problem.Validate(); !s.ok()) return s;
  try {
    return InputsFor(problem).status();
  } catch (const std::exception& e) {  // as in Measure: a throw from the backend is an error, not an end
    return absl::InternalError(Cat("preparing the problem's inputs threw: ", e.what()));
  }
}

Trial Runner::Measure(const AttentionProblem& problem, const KernelConfig& config, int64_t run_id,
                      int attempt) {
  return Measure(problem, config, options_.timing, run_id, attempt);
}

Trial Runner::Measure(const AttentionProblem& problem, const KernelConfig& config, const TimingOptions& timing_options,
                      int64_t run_id, int attempt, TrialStage stage) {
  auto start = Clock::now();
  Trial t = NewTrial(problem.Key(), config, run_id, attempt, stage);
  auto finish = [&t, &start](TrialOutcome outcome, std::string message) {
    t.outcome = outcome;
    t.message = std::move(message);
    t.wall_seconds = SecondsSince(start);
    return t;
  };
  // A backend error's outcome: a stop is no verdict on the config, memory is the host's.
  auto failed = [&finish](TrialOutcome otherwise, const absl::Status& s, std::string_view what) {
    return finish(OutcomeOfError(s, otherwise), Cat(what, s.ToString()));
  };

  if (absl::Status s = problem.Validate(); !s.ok()) {
    return finish(TrialOutcome::kUnsupported, absl::StrCat("invalid problem: ", s.message()));
  }
  t.flops = problem.Flops();
  if (absl::Status s = config.Validate(); !s.ok()) {
    return finish(TrialOutcome::kUnsupported, absl::StrCat("invalid config: ", s.message()));
  }
  // Everything below talks to the backend: a throw from it (bad_alloc, a third-party
  // library) becomes this trial's outcome instead of ending the sweep.
  try {
    if (absl::Status s = backend_.CanImplement(problem, config); !s.ok()) {
      return finish(TrialOutcome::kUnsupported, std::string(s.ToString()));
    }
    const bool fresh = inputs_ == nullptr || inputs_->problem_key != t.problem_key;
    absl::StatusOr<ProblemInputs*> prepared = InputsFor(problem);
    if (!prepared.ok()) {
      return failed(TrialOutcome::kLaunchFailed, prepared.status(), "preparing the problem's inputs failed: ");
    }
    // The problem's one-time preparation is not this trial's cost.
    if (fresh) start += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(prepare_seconds_));
    ProblemInputs& in = **prepared;
    const size_t o_bytes = in.out_host.size();
    for (size_t si = 0; si < in.sets.size(); ++si) {
      const InputSet& set = in.sets[si];
      const std::string where = si == 0 ? "" : absl::StrCat("on the ", set.name, " inputs: ");
      if (absl::Status s = backend_.Fill(in.out.data(), 0xFF, o_bytes); !s.ok()) {
        return finish(TrialOutcome::kLaunchFailed, absl::StrCat("poisoning the output failed: ", s.ToString()));
      }
      const AttentionBuffers buffers = BuffersOf(set, in.out);
      const auto run_start = Clock::now();
      if (absl::Status s = backend_.Run(problem, config, buffers); !s.ok()) {
        return failed(TrialOutcome::kLaunchFailed, s, where);
      }
      const double run_seconds = SecondsSince(run_start);
      if (options_.trial_time_limit_seconds > 0 && run_seconds > options_.trial_time_limit_seconds) {
        return finish(TrialOutcome::kTimedOut,
                      absl::StrCat("one run took ", run_seconds, " s, over the per-trial limit of ",
                                   options_.trial_time_limit_seconds, " s"));
      }
      if (absl::Status s = backend_.CopyToHost(in.out_host.data(), in.out.data(), o_bytes); !s.ok()) {
        return finish(TrialOutcome::kLaunchFailed, absl::StrCat("download failed: ", s.ToString()));
      }
      Verification check = Verify(problem, config, in.tokens, set, in.out_host);
      if (si == 0) {  // the errors recorded are those of the random inputs, the timed ones
        t.max_abs_error = check.max_abs_error;
        t.max_rel_error = check.max_rel_error;
        t.unquantised_rel_error = check.unquantised_rel_error;
        t.checked_elements = check.checked;
      }
      if (!check.passed) return finish(TrialOutcome::kVerifyFailed, absl::StrCat(where, check.message));
    }

    const InputSet& timed = in.sets.front();
    const AttentionBuffers buffers = BuffersOf(timed, in.out);
    absl::StatusOr<TimingSamples> timing = backend_.Time(problem, config, buffers, timing_options);
    if (!timing.ok()) return failed(TrialOutcome::kLaunchFailed, timing.status(), "timing failed: ");
    if (timing->micros.empty()) return finish(TrialOutcome::kLaunchFailed, "timing returned no samples");
    t.samples_us = timing->micros;
    t.blocks.push_back(ToBlock(*timing));
    t.sm_clock_mhz = timing->sm_clock_mhz;
    t.median_us = Quantile(t.samples_us, 0.5);
    t.p10_us = Quantile(t.samples_us, 0.1);
    t.p90_us = Quantile(t.samples_us, 0.9);
    return finish(TrialOutcome::kOk, "");
  } catch (const std::bad_alloc& e) {
    return finish(TrialOutcome::kResourceExhausted, OutOfHostMemory(problem, options_, e));
  } catch (const std::exception& e) {
    return finish(TrialOutcome::kLaunchFailed, absl::StrCat("exception from the backend: ", e.what()));
  } catch (...) {
    return finish(TrialOutcome::kLaunchFailed, "unknown exception from the backend");
  }
}

std::vector<Trial> Runner::MeasureRounds(const AttentionProblem& problem, std::span<const KernelConfig> configs,
                                         int rounds, const TimingOptions& block, uint64_t order_seed, int64_t run_id,
                                         TrialStage stage, int attempt, double max_seconds,
                                         const std::atomic<bool>* cancel) {
  const auto start = Clock::now();
  std::vector<Trial> trials;
  const std::string problem_key = problem.Key();
  for (const KernelConfig& c : configs) {
    trials.push_back(NewTrial(problem_key, c, run_id, attempt, stage));
    trials.back().flops = problem.Flops();
  }
  auto fail = [](Trial& t, TrialOutcome outcome, std::string message) {
    if (t.outcome != TrialOutcome::kOk) return;  // the first failure is the one kept
    t.outcome = outcome;
    t.message = std::move(message);
  };
  absl::StatusOr<ProblemInputs*> prepared = absl::UnknownError("not prepared");
  try {
    prepared = InputsFor(problem);
  } catch (const std::bad_alloc& e) {
    for (Trial& t : trials) fail(t, TrialOutcome::kResourceExhausted, OutOfHostMemory(problem, options_, e));
    return trials;
  }
  if (!prepared.ok()) {
    for (Trial& t : trials) {
      fail(t, OutcomeOfError(prepared.status(), TrialOutcome::kLaunchFailed),
           absl::StrCat("preparing the problem's inputs failed: ", prepared.status().ToString()));
    }
    return trials;
  }
  const InputSet& timed = (*prepared)->sets.front();
  const AttentionBuffers buffers = BuffersOf(timed, (*prepared)->out);
  std::vector<size_t> order(configs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  int done = 0;
  absl::Status stopped;  // the backend's stop status when a block was cut short
  for (int r = 0; r < rounds && stopped.ok(); ++r) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) break;
    if (max_seconds > 0 && done >= 3 && SecondsSince(start) > max_seconds) break;
    // A fresh order each round (Fisher-Yates on our own generator: same on every host), so
    // no config always follows the same neighbour or always runs first.
    uint64_t state = Mix64(order_seed + static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[SplitMix64(state) % i]);
    for (size_t idx : order) {
      Trial& t = trials[idx];
      if (t.outcome != TrialOutcome::kOk) continue;
      try {
        absl::StatusOr<TimingSamples> timing = backend_.Time(problem, configs[idx], buffers, block);
        if (StopToken::IsStop(timing.status())) {
          stopped = timing.status();  // the round is incomplete: it is dropped below
          break;
        }
        if (!timing.ok()) {
          fail(t, absl::IsUnimplemented(timing.status()) || absl::IsFailedPrecondition(timing.status())
                      ? TrialOutcome::kUnsupported
                      : TrialOutcome::kLaunchFailed,
               absl::StrCat("timing failed in round ", r + 1, ": ", timing.status().ToString()));
          continue;
        }
        if (timing->micros.empty()) {
          fail(t, TrialOutcome::kLaunchFailed, "timing returned no samples");
          continue;
        }
        t.blocks.push_back(ToBlock(*timing));
        t.samples_us.push_back(t.blocks.back().median_us);
        t.sm_clock_mhz = timing->sm_clock_mhz;
      } catch (const std::bad_alloc& e) {
        fail(t, TrialOutcome::kResourceExhausted, OutOfHostMemory(problem, options_, e));
      } catch (const std::exception& e) {
        fail(t, TrialOutcome::kLaunchFailed, absl::StrCat("exception from the backend: ", e.what()));
      } catch (...) {
        fail(t, TrialOutcome::kLaunchFailed, "unknown exception from the backend");
      }
    }
    if (stopped.ok()) ++done;
  }
  // Rounds pair up by index: a round cut short by a stop is dropped from every trial.
  for (Trial& t : trials) {
    if (t.blocks.size() > static_cast<size_t>(done)) {
      t.blocks.resize(static_cast<size_t>(done));
      t.samples_us.resize(static_cast<size_t>(done));
    }
  }
  const double share = configs.empty() ? 0 : SecondsSince(start) / static_cast<double>(configs.size());
  for (Trial& t : trials) {
    t.wall_seconds = share;
    if (t.outcome == TrialOutcome::kOk && t.samples_us.empty()) {
      if (!stopped.ok()) {
        fail(t, TrialOutcome::kInterrupted, absl::StrCat("interrupted before the first round ended: ", stopped.message()));
      } else {
        fail(t, TrialOutcome::kLaunchFailed, "no round was measured (cancelled before the first)");
      }
    }
    if (t.outcome != TrialOutcome::kOk) {
      t.samples_us.clear();
      t.blocks.clear();
      continue;
    }
    t.median_us = Quantile(t.samples_us, 0.5);
    t.p10_us = Quantile(t.samples_us, 0.1);
    t.p90_us = Quantile(t.samples_us, 0.9);
  }
  return trials;
}

}  // namespace fusetune
