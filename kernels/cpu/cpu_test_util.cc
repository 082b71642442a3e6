#include "cpu_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cpu_backend_internal.h"
#include "fusetune/kernels/dtype.h"

namespace fusetune::testing_util {

std::vector<float> Uniform(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (auto& f : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = lo + (hi - lo) * static_cast<float>((x >> 40) & 0xFFFFFF) / static_cast<float>(1 << 24);
  }
  return out;
}

Inputs RandomInputs(const AttentionProblem& problem, uint64_t seed) {
  Inputs in;
  in.q = Uniform(problem.QElements(), -2.0f, 2.0f, seed);
  in.k = Uniform(problem.KVElements(), -1.0f, 1.0f, seed + 101);
  in.v = Uniform(problem.KVElements(), -1.0f, 1.0f, seed + 202);
  RoundToDType(problem.dtype, in.q);
  RoundToDType(problem.dtype, in.k);
  RoundToDType(problem.dtype, in.v);
  if (problem.is_kv_quantized()) QuantizeKV(problem, &in);
  return in;
}

void QuantizeKV(const AttentionProblem& problem, Inputs* in) {
  for (auto [values, scales] : {std::pair{&in->k, &in->k_scale}, std::pair{&in->v, &in->v_scale}}) {
    std::vector<uint8_t> bytes(values->size());
    scales->assign(static_cast<size_t>(problem.kv_heads), 0.0f);
    QuantizeE4m3PerHead(*values, problem.kv_heads, problem.head_dim, bytes, *scales);
    for (size_t i = 0; i < bytes.size(); ++i) (*values)[i] = E4m3ToFloat(bytes[i]);
  }
}

KvScales ScalesOf(const AttentionProblem& problem, const Inputs& in) {
  if (!problem.is_kv_quantized()) return {};
  return KvScales{in.k_scale, in.v_scale};
}

absl::StatusOr<std::vector<float>> RunBackend(Backend& backend, const AttentionProblem& problem,
                                              const KernelConfig& config, const Inputs& in,
                                              const RunOptions& options) {
  const size_t elem = static_cast<size_t>(DTypeBytes(problem.dtype));
  const int64_t kv_row = static_cast<int64_t>(problem.kv_heads) * problem.head_dim;
  std::vector<float> k = in.k, v = in.v;
  k.resize(k.size() + options.extra_kv_rows * kv_row, options.kv_tail_value);
  v.resize(v.size() + options.extra_kv_rows * kv_row, options.kv_tail_value);

  auto upload = [&](const std::vector<float>& host, bool kv = false) -> absl::StatusOr<DeviceMemory> {
    std::vector<uint8_t> bytes;
    if (kv && problem.is_kv_quantized()) {
      for (float x : host) bytes.push_back(FloatToE4m3(x));  // e4m3 values: exact
    } else {
      bytes.resize(host.size() * elem);
      EncodeTensor(problem.dtype, host, bytes.data());
    }
    auto mem = backend.Allocate(bytes.size());
    if (!mem.ok()) return mem.status();
    if (auto s = backend.CopyToDevice(mem->data(), bytes.data(), bytes.size()); !s.ok()) return s;
    return mem;
  };
  auto qd = upload(in.q);
  if (!qd.ok()) return qd.status();
  auto kd = upload(k, true);
  if (!kd.ok()) return kd.status();
  auto vd = upload(v, true);
  if (!vd.ok()) return vd.status();
  const size_t o_bytes = static_cast<size_t>(problem.OElements()) * elem;
  auto od = backend.Allocate(o_bytes);
  if (!od.ok()) return od.status();
  if (auto s = backend.Fill(od->data(), options.output_poison, o_bytes); !s.ok()) return s;
  AttentionBuffers buffers{qd->data(), kd->data(), vd->data(), od->data()};
  DeviceMemory k_scale, v_scale;
  if (problem.is_kv_quantized()) {
    for (auto [host, mem] : {std::pair{&in.k_scale, &k_scale}, std::pair{&in.v_scale, &v_scale}}) {
      const size_t bytes = host->size() * sizeof(float);  // fp32 scales
      auto m = backend.Allocate(bytes);
      if (!m.ok()) return m.status();
      if (auto s = backend.CopyToDevice(m->data(), host->data(), bytes); !s.ok()) return s;
      *mem = *std::move(m);
    }
    buffers.k_scale = static_cast<const float*>(k_scale.data());
    buffers.v_scale = static_cast<const float*>(v_scale.data());
  }
  DeviceMemory table;
  if (problem.is_paged()) {
    const size_t table_bytes = options.block_table.size() * sizeof(int32_t);
    auto mem = backend.Allocate(table_bytes);
    if (!mem.ok()) return mem.status();
    table = *std::move(mem);
    if (auto s = backend.CopyToDevice(table.data(), options.block_table.data(), table_bytes); !s.ok()) return s;
    buffers.block_table = static_cast<const int32_t*>(table.data());
  }
  if (auto s = backend.Run(problem, config, buffers); !s.ok()) return s;
  std::vector<uint8_t> bytes(o_bytes);
  if (auto s = backend.CopyToHost(bytes.data(), od->data(), o_bytes); !s.ok()) return s;
  std::vector<float> out(static_cast<size_t>(problem.OElements()));
  DecodeTensor(problem.dtype, bytes.data(), out.size(), out.data());
  return out;
}

double MaxAbsError(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - ref[i]));
  }
  return worst;
}

double Tolerance(Precision precision, DType storage) {
  double t = 1e-5;
  switch (precision) {
    case Precision::kFp32: t = 1e-5; break;
    case Precision::kTf32: t = 2e-3; break;
    case Precision::kFp16: t = 5e-3; break;
    case Precision::kBf16: t = 3e-2; break;
  }
  if (storage == DType::kFp16) t = std::max(t, 1e-3);
  if (storage == DType::kBf16) t = std::max(t, 8e-3);
  return t;
}

std::string Describe(const AttentionProblem& problem, const KernelConfig& config) {
  return absl::StrCat(problem.Key(), " ", config.Key());
}

KernelConfig CpuConfig(Variant variant, int block_m, int block_s, int threads, Precision precision, int split_kv) {
  KernelConfig c;
  c.variant = variant;
  c.block_m = block_m;
  c.block_s = block_s;
  c.threads = threads;
  c.precision = precision;
  c.split_kv = split_kv;
  return c;
}

std::vector<IsaBackend> BackendsForEveryIsa() {
  std::vector<IsaBackend> out;
  for (const std::string& isa : cpu::RunnableKernelIsas()) {
    out.push_back(IsaBackend{isa, cpu::CreateCpuBackendForIsa(isa)});
  }
  return out;
}

}  // namespace fusetune::testing_util
