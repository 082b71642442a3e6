#include "fusetune/tuner/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <set>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/reference.h"

namespace fusetune {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashString(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Uniform in [-1, 1], never exactly (or nearly) zero: an all-zero or sparse input would let
// a kernel that skips work pass verification.
void FillRandom(std::vector<float>& values, uint64_t& state) {
  for (float& x : values) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    double v = 2.0 * u - 1.0;
    if (std::fabs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3;
    x = static_cast<float>(v);
  }
}

// Query tokens to verify in a large problem: first and last of each sequence (while they
// fit), the rest drawn at random, deduplicated and sorted.
std::vector<int64_t> SampledTokens(const AttentionProblem& problem, int count, uint64_t& state) {
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

struct Verification {
  bool passed = false;
  std::string message;
  double max_abs_error = 0;
  double max_rel_error = 0;
  int64_t checked = 0;
};

Verification Verify(const AttentionProblem& problem, const KernelConfig& config,
                    const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& out,
                    const RunnerOptions& options, uint64_t& state) {
  Verification r;
  const int d = problem.head_dim;
  const int heads = problem.q_heads;
  // 1. NaN/Inf anywhere: also catches elements the kernel never wrote (poisoned NaN).
  int64_t bad = 0, first_bad = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      if (first_bad < 0) first_bad = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad > 0) {
    const int64_t row = first_bad / d;
    r.message = absl::StrCat(bad, " output element(s) are NaN/Inf (unwritten or overflowed); first at token ",
                             row / heads, " head ", row % heads, " dim ", first_bad % d);
    return r;
  }
  // 2. Compare against the fp64 reference.
  std::vector<int64_t> tokens;
  if (problem.OElements() <= options.full_check_max_elements) {
    tokens.resize(static_cast<size_t>(problem.TotalQueries()));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i);
  } else {
    tokens = SampledTokens(problem, options.sampled_rows, state);
  }
  std::vector<double> ref(static_cast<size_t>(tokens.size()) * heads * d);
  for (size_t ti = 0; ti < tokens.size(); ++ti) {
    for (int h = 0; h < heads; ++h) {
      std::span<double> row(ref.data() + (ti * heads + h) * d, static_cast<size_t>(d));
      absl::Status s = ReferenceAttentionRow(problem, q, k, v, tokens[ti], h, row);
      if (!s.ok()) {
        r.message = absl::StrCat("reference failed: ", s.message());
        return r;
      }
    }
  }
  double max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::fabs(x));
  // All-zero reference (every row fully masked): compare absolutely against a tiny floor.
  const double denom = std::max(max_ref, 1e-30);
  int64_t worst = -1;
  for (size_t ti = 0; ti < tokens.size(); ++ti) {
    const size_t base = static_cast<size_t>(tokens[ti]) * heads * d;
    for (int e = 0; e < heads * d; ++e) {
      const double err = std::fabs(static_cast<double>(out[base + e]) - ref[ti * heads * d + e]);
      if (err > r.max_abs_error) {
        r.max_abs_error = err;
        worst = static_cast<int64_t>(base + e);
      }
    }
  }
  r.checked = static_cast<int64_t>(ref.size());
  r.max_rel_error = max_ref > 0 ? r.max_abs_error / denom : (r.max_abs_error > 0 ? INFINITY : 0.0);
  const double tol =
      ToleranceFor(config.precision, problem.dtype, LogitBound(problem, q, k), problem.head_dim);
  if (!(r.max_rel_error <= tol)) {
    const int64_t row = worst / d;
    r.message = absl::StrCat("max error ", r.max_abs_error, " = ", r.max_rel_error,
                             " of max|ref| ", max_ref, " exceeds tolerance ", tol, " (worst at token ",
                             row / heads, " head ", row % heads, " dim ", worst % d, ")");
    return r;
  }
  r.passed = true;
  return r;
}

}  // namespace

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

Trial Runner::Measure(const AttentionProblem& problem, const KernelConfig& config, int64_t run_id,
                      int attempt) {
  Trial t;
  t.run_id = run_id;
  t.problem_key = problem.Key();
  t.config_key = config.Key();
  t.attempt = attempt;
  t.trial_id = TrialId(run_id, t.problem_key, t.config_key, attempt);
  t.created_unix_ms = NowUnixMs();
  auto finish = [&t](TrialOutcome outcome, std::string message) {
    t.outcome = outcome;
    t.message = std::move(message);
    return t;
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

    uint64_t state = HashString(t.config_key, HashString(t.problem_key, options_.seed)) ^
                     (static_cast<uint64_t>(attempt) * 0x9e3779b97f4a7c15ull);
    std::vector<float> q(static_cast<size_t>(problem.QElements()));
    std::vector<float> k(static_cast<size_t>(problem.KVElements()));
    std::vector<float> v(static_cast<size_t>(problem.KVElements()));
    FillRandom(q, state);
    FillRandom(k, state);
    FillRandom(v, state);
    RoundToDType(problem.dtype, q);
    RoundToDType(problem.dtype, k);
    RoundToDType(problem.dtype, v);

    const size_t esize = static_cast<size_t>(DTypeBytes(problem.dtype));
    const size_t q_bytes = q.size() * esize, kv_bytes = k.size() * esize, o_bytes = q_bytes;
    auto alloc = [&](size_t bytes) { return backend_.Allocate(bytes); };
    auto dq = alloc(q_bytes), dk = alloc(kv_bytes), dv = alloc(kv_bytes), dout = alloc(o_bytes);
    for (auto* m : {&dq, &dk, &dv, &dout}) {
      if (!m->ok()) return finish(TrialOutcome::kLaunchFailed, absl::StrCat("allocation failed: ", m->status().ToString()));
    }
    std::vector<uint8_t> staging(std::max(q_bytes, kv_bytes));
    auto upload = [&](const std::vector<float>& src, DeviceMemory& dst) {
      EncodeTensor(problem.dtype, src, staging.data());
      return backend_.CopyToDevice(dst.data(), staging.data(), src.size() * esize);
    };
    for (auto [src, dst] : {std::pair{&q, &*dq}, std::pair{&k, &*dk}, std::pair{&v, &*dv}}) {
      if (absl::Status s = upload(*src, *dst); !s.ok()) {
        return finish(TrialOutcome::kLaunchFailed, absl::StrCat("upload failed: ", s.ToString()));
      }
    }
    if (absl::Status s = backend_.Fill(dout->data(), 0xFF, o_bytes); !s.ok()) {
      return finish(TrialOutcome::kLaunchFailed, absl::StrCat("poisoning the output failed: ", s.ToString()));
    }
    AttentionBuffers buffers{dq->data(), dk->data(), dv->data(), dout->data()};

    const auto start = Clock::now();
    if (absl::Status s = backend_.Run(problem, config, buffers); !s.ok()) {
      return finish(TrialOutcome::kLaunchFailed, std::string(s.ToString()));
    }
    const double run_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (options_.trial_time_limit_seconds > 0 && run_seconds > options_.trial_time_limit_seconds) {
      return finish(TrialOutcome::kTimedOut,
                    absl::StrCat("one run took ", run_seconds, " s, over the per-trial limit of ",
                                 options_.trial_time_limit_seconds, " s"));
    }

    std::vector<uint8_t> out_bytes(o_bytes);
    if (absl::Status s = backend_.CopyToHost(out_bytes.data(), dout->data(), o_bytes); !s.ok()) {
      return finish(TrialOutcome::kLaunchFailed, absl::StrCat("download failed: ", s.ToString()));
    }
    std::vector<float> out(q.size());
    DecodeTensor(problem.dtype, out_bytes.data(), out.size(), out.data());
    Verification check = Verify(problem, config, q, k, v, out, options_, state);
    t.max_abs_error = check.max_abs_error;
    t.max_rel_error = check.max_rel_error;
    t.checked_elements = check.checked;
    if (!check.passed) return finish(TrialOutcome::kVerifyFailed, std::move(check.message));

    absl::StatusOr<TimingSamples> timing = backend_.Time(problem, config, buffers, options_.timing);
    if (!timing.ok()) {
      return finish(TrialOutcome::kLaunchFailed, absl::StrCat("timing failed: ", timing.status().ToString()));
    }
    if (timing->micros.empty()) {
      return finish(TrialOutcome::kLaunchFailed, "timing returned no samples");
    }
    t.samples_us = timing->micros;
    t.sm_clock_mhz = timing->sm_clock_mhz;
    t.median_us = Quantile(t.samples_us, 0.5);
    t.p10_us = Quantile(t.samples_us, 0.1);
    t.p90_us = Quantile(t.samples_us, 0.9);
    return finish(TrialOutcome::kOk, "");
  } catch (const std::exception& e) {
    return finish(TrialOutcome::kLaunchFailed, absl::StrCat("exception from the backend: ", e.what()));
  } catch (...) {
    return finish(TrialOutcome::kLaunchFailed, "unknown exception from the backend");
  }
}

}  // namespace fusetune
