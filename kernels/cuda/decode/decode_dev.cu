// Development driver of the CUDA decode kernel family (llm.c dev/cuda style), built by nvcc
// alone from the kernel sources and this file — no absl or other third-party headers — so a GPU
// host compiles, checks and times the kernels in one step (build_dev.sh beside this file):
//
//   decode_dev check [problems] [seed] [small]  random problems against a plain fp64 CPU
//        reference gathered through the same block table: page sizes 1/3/16/64/256 and
//        contiguous caches (uniform with key padding, varlen), shuffled and shared tables, pools
//        larger than needed with unused rows NaN, cache lengths 0, 1, odd and not multiples of
//        the page, batches up to 64 with one long sequence, GQA 32/8, 8/1 (MQA) and others,
//        1-16 new tokens (bottom-right causal), fp16/bf16/fp32, e4m3 K/V with random per-head
//        scales (NaN bytes in unused rows), d64/d128, random splits, large logits. Output
//        poisoned (all ones) first: every element must be written. DECODE_CHECK_INSTANCES (name
//        substrings, comma-separated) limits the instances. `small`
//        keeps every problem tiny (for compute-sanitizer).
//   decode_dev one SHAPE INSTANCE SPLITS [launches]  one bench shape, instance and split, back to
//        back (for ncu), e.g. one b16-c8k bf16/d128/bm16/bs128/t256/st3 1
//   decode_dev pair SHAPE A SPLITS_A B SPLITS_B [rounds] [launches]  two instances (or splits)
//        on one bench shape, interleaved round by round in a random order: per-round time ratio
//        B / A, its median and range.
//   decode_dev readpattern [launches]  the contiguous decode shapes' K/V bytes read without
//        computing, contiguously by a full grid and per (sequence, KV head, split) block as the
//        decode kernels read them, at several block sizes and splits (DECODE_BENCH_SHAPES).
//   decode_dev bench [csv] [launches]  the decode preset's shapes: every instance x split
//        count, L2 flushed before every launch, CUDA events, median; K/V bytes / time in TB/s
//        beside a read-only kernel over the same bytes (the read ceiling of this run).
//        Environment: DECODE_BENCH_SHAPES (labels), DECODE_BENCH_INSTANCES (name substrings),
//        DECODE_BENCH_SPLITS (counts), comma-separated; DECODE_FLUSH=read flushes L2 by
//        reading 256 MiB instead of writing it.
//
// Exit code: 0 when every check passed, 1 on a failed check or CUDA error, 77 without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "../l2_flush.h"
#include "fusetune/base/median.h"
#include "decode_instance.h"

namespace {

using fusetune::cuda::decode::DecodeInstance;
using fusetune::cuda::decode::DecodeInstanceList;
using fusetune::cuda::decode::DecodeKernelArgs;
using fusetune::cuda::decode::DecodeStorage;

#define CUDA_OK(call)                                                                             \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__,      \
                   __LINE__, cudaGetErrorString(err_));                                           \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

const char* StorageName(DecodeStorage s) {
  switch (s) {
    case DecodeStorage::kFp32: return "fp32";
    case DecodeStorage::kFp16: return "fp16";
    case DecodeStorage::kBf16: return "bf16";
  }
  return "?";
}
int StorageBytes(DecodeStorage s) { return s == DecodeStorage::kFp32 ? 4 : 2; }

// e4m3 on the host (the CUDA headers' conversions: round to nearest even, saturating).
uint8_t ToE4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
float FromE4m3(uint8_t b) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3))); }

std::vector<DecodeInstance> AllInstances() {
  std::vector<DecodeInstance> v;
  for (DecodeInstanceList l : {fusetune::cuda::decode::DecodeFp32Instances(),
                               fusetune::cuda::decode::DecodeFp16Instances(),
                               fusetune::cuda::decode::DecodeBf16Instances(),
                               fusetune::cuda::decode::DecodeE4m3Instances()}) {
    v.insert(v.end(), l.data, l.data + l.size);
  }
  return v;
}

std::string InstanceName(const DecodeInstance& in) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%s/d%d/bm%d/bs%d/t%d/st%d", StorageName(in.storage), in.kv_e4m3 ? "-e4m3" : "",
                in.head_dim, in.block_m, in.block_s, in.threads, in.stages);
  return buf;
}

// Storage encoding (round to nearest even) and decoding on the host.
uint16_t ToHalfBits(float x) {
  __half h = __float2half_rn(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
uint16_t ToBf16Bits(float x) {
  __nv_bfloat16 h = __float2bfloat16_rn(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float FromBits(DecodeStorage s, const void* p, int64_t i) {
  if (s == DecodeStorage::kFp32) return static_cast<const float*>(p)[i];
  uint16_t b = static_cast<const uint16_t*>(p)[i];
  if (s == DecodeStorage::kFp16) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
  }
  __nv_bfloat16 h;
  std::memcpy(&h, &b, 2);
  return __bfloat162float(h);
}
// Stores x as storage type `s` at element i of `p`; returns the stored value as float.
float Store(DecodeStorage s, void* p, int64_t i, float x) {
  if (s == DecodeStorage::kFp32) {
    static_cast<float*>(p)[i] = x;
  } else {
    static_cast<uint16_t*>(p)[i] = s == DecodeStorage::kFp16 ? ToHalfBits(x) : ToBf16Bits(x);
  }
  return FromBits(s, p, i);
}

// One problem as the kernels see it, with host copies of every input.
struct DevProblem {
  DecodeStorage storage = DecodeStorage::kBf16;  // Q and O (and K/V unless e4m3)
  bool e4m3 = false;                              // K/V as e4m3 bytes with per-head scales
  std::vector<float> k_scale, v_scale;
  int d = 128, batch = 1, hq = 32, hkv = 8, causal = 0;
  float scale = 0;
  std::vector<int> q_lens, k_lens;  // per sequence: query tokens, visible keys
  bool varlen = false;              // cu_seqlens for Q and K; else uniform q_len, kv_len + padding
  int page = 0;                     // 0: contiguous
  int pool_pages = 0, table_width = 0;
  std::vector<int32_t> table;
  // derived
  int q_len = 0, kv_len = 0;
  int64_t total_q = 0, total_k_rows = 0;
  std::vector<int64_t> q_start, k_start;
  std::vector<uint8_t> q, k, v;  // storage bytes
  std::string label;

  int group() const { return hq / hkv; }
  int Visible(int b, int i) const {
    if (!causal) return k_lens[b];
    return std::max(0, std::min(k_lens[b], i + k_lens[b] - q_lens[b] + 1));
  }
  // Row (in K/V memory) of key j of sequence b.
  int64_t KeyRow(int b, int j) const {
    if (page > 0) return static_cast<int64_t>(table[static_cast<size_t>(b) * table_width + j / page]) * page + j % page;
    return k_start[b] + j;
  }
  double KvBytes() const {
    double keys = 0;
    for (int b = 0; b < batch; ++b) keys += k_lens[b];
    return 2.0 * keys * hkv * d * KvElemBytes();
  }
  int KvElemBytes() const { return e4m3 ? 1 : StorageBytes(storage); }
  // Stores x (a value of KV head (i / d) % hkv) at K/V element i; e4m3 divides by the scale.
  void StoreKv(std::vector<uint8_t>& t, const std::vector<float>& scales, int64_t i, float x) const {
    if (e4m3) {
      t[static_cast<size_t>(i)] = std::isnan(x) ? 0x7f : ToE4m3(x / scales[(i / d) % hkv]);
    } else {
      Store(storage, t.data(), i, x);
    }
  }
  // K/V element i as the kernel sees it before the scale (the e4m3 value itself).
  float KvValue(const std::vector<uint8_t>& t, int64_t i) const {
    return e4m3 ? FromE4m3(t[static_cast<size_t>(i)]) : FromBits(storage, t.data(), i);
  }
};

// Lays out Q/K/V (values uniform in [-amp, amp]; unused K/V rows NaN) and the table.
void Materialize(DevProblem& p, std::mt19937_64& rng, float amp, int shared_prefix_pages, bool poison = true) {
  const int B = p.batch;
  p.q_len = *std::max_element(p.q_lens.begin(), p.q_lens.end());
  p.kv_len = *std::max_element(p.k_lens.begin(), p.k_lens.end());
  p.q_start.assign(B, 0);
  p.k_start.assign(B, 0);
  int64_t tq = 0;
  for (int b = 0; b < B; ++b) {
    p.q_start[b] = p.varlen ? tq : static_cast<int64_t>(b) * p.q_len;
    tq += p.varlen ? p.q_lens[b] : p.q_len;
  }
  p.total_q = tq;
  if (!p.varlen) {
    for (int b = 0; b < B; ++b) p.q_lens[b] = p.q_len;  // uniform batch: every sequence has q_len queries
  }
  std::uniform_real_distribution<float> u(-amp, amp);
  const int eb = StorageBytes(p.storage);
  p.q.assign(static_cast<size_t>(p.total_q) * p.hq * p.d * eb, 0);
  for (int64_t i = 0; i < p.total_q * p.hq * p.d; ++i) Store(p.storage, p.q.data(), i, u(rng));
  if (p.page > 0) {
    p.table_width = 0;
    for (int b = 0; b < B; ++b) p.table_width = std::max(p.table_width, (p.k_lens[b] + p.page - 1) / p.page);
    p.table_width += rng() % 3;  // entries past a sequence's pages are never read
    int needed = shared_prefix_pages;
    for (int b = 0; b < B; ++b) needed += std::max(0, (p.k_lens[b] + p.page - 1) / p.page - shared_prefix_pages);
    p.pool_pages = needed + static_cast<int>(rng() % 7);
    std::vector<int32_t> perm(p.pool_pages);
    for (int i = 0; i < p.pool_pages; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    p.table.assign(static_cast<size_t>(B) * std::max(1, p.table_width), 0);
    for (auto& e : p.table) e = (rng() & 1) ? -7 : 1 << 30;  // garbage past the sequence's pages
    int next = shared_prefix_pages;
    for (int b = 0; b < B; ++b) {
      const int pages = (p.k_lens[b] + p.page - 1) / p.page;
      for (int j = 0; j < pages; ++j) {
        p.table[static_cast<size_t>(b) * p.table_width + j] = j < shared_prefix_pages ? perm[j] : perm[next++];
      }
    }
    p.total_k_rows = static_cast<int64_t>(p.pool_pages) * p.page;
  } else if (p.varlen) {
    int64_t tk = 0;
    for (int b = 0; b < B; ++b) {
      p.k_start[b] = tk;
      tk += p.k_lens[b];
    }
    p.total_k_rows = tk;
  } else {
    for (int b = 0; b < B; ++b) p.k_start[b] = static_cast<int64_t>(b) * p.kv_len;
    p.total_k_rows = static_cast<int64_t>(B) * p.kv_len;
  }
  const int64_t kv_elems = std::max<int64_t>(1, p.total_k_rows) * p.hkv * p.d;
  p.k.assign(static_cast<size_t>(kv_elems) * p.KvElemBytes(), 0);
  p.v.assign(static_cast<size_t>(kv_elems) * p.KvElemBytes(), 0);
  if (p.e4m3) {  // per-head scales around amp / 448, some far from it (values saturate or go subnormal)
    const float factors[] = {1.0f, 0.6f, 3.0f, 40.0f, 1.0f / 64};
    p.k_scale.resize(p.hkv);
    p.v_scale.resize(p.hkv);
    for (int h = 0; h < p.hkv; ++h) {
      p.k_scale[h] = amp / 448.0f * factors[rng() % 5];
      p.v_scale[h] = amp / 448.0f * factors[rng() % 5];
    }
  }
  if (!poison) {  // timing only: random values everywhere, from a cheap generator
    uint64_t x = rng() | 1;
    for (int64_t i = 0; i < kv_elems; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      if (p.e4m3) {  // any byte but the two NaNs
        const uint8_t a = static_cast<uint8_t>(x), b = static_cast<uint8_t>(x >> 8);
        p.k[static_cast<size_t>(i)] = (a & 0x7f) == 0x7f ? 0 : a;
        p.v[static_cast<size_t>(i)] = (b & 0x7f) == 0x7f ? 0 : b;
        continue;
      }
      const float a = static_cast<float>(x & 0xffff) / 32768.0f - 1.0f;
      const float b = static_cast<float>((x >> 16) & 0xffff) / 32768.0f - 1.0f;
      Store(p.storage, p.k.data(), i, a);
      Store(p.storage, p.v.data(), i, b);
    }
    return;
  }
  for (int64_t i = 0; i < kv_elems; ++i) {  // NaN everywhere first: unused rows stay NaN
    p.StoreKv(p.k, p.k_scale, i, NAN);
    p.StoreKv(p.v, p.v_scale, i, NAN);
  }
  // Shared prefix pages hold the same values for every sequence: written once per row.
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < p.k_lens[b]; ++j) {
      const int64_t row = p.KeyRow(b, j);
      const bool shared_written = p.page > 0 && j / p.page < shared_prefix_pages && b > 0;
      if (shared_written) continue;
      for (int64_t e = 0; e < static_cast<int64_t>(p.hkv) * p.d; ++e) {
        p.StoreKv(p.k, p.k_scale, row * p.hkv * p.d + e, u(rng));
        p.StoreKv(p.v, p.v_scale, row * p.hkv * p.d + e, u(rng));
      }
    }
  }
}

// fp64 reference of every (token, head) row; also the logit bound scale*max|q|*max|k|.
std::vector<float> Decoded(DecodeStorage s, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / StorageBytes(s));
  for (size_t i = 0; i < out.size(); ++i) out[i] = FromBits(s, bytes.data(), static_cast<int64_t>(i));
  return out;
}

std::vector<float> DecodedKv(const DevProblem& p, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / p.KvElemBytes());
  for (size_t i = 0; i < out.size(); ++i) out[i] = p.KvValue(bytes, static_cast<int64_t>(i));
  return out;
}

std::vector<double> Reference(const DevProblem& p, double* logit_bound) {
  const int d = p.d, g = p.group();
  const std::vector<float> qf = Decoded(p.storage, p.q), kf = DecodedKv(p, p.k), vf = DecodedKv(p, p.v);
  auto k_scale = [&](int h) { return p.e4m3 ? static_cast<double>(p.k_scale[h]) : 1.0; };
  auto v_scale = [&](int h) { return p.e4m3 ? static_cast<double>(p.v_scale[h]) : 1.0; };
  std::vector<double> out(static_cast<size_t>(p.total_q) * p.hq * d, 0.0);
  const double scale = p.scale;
  double max_q = 0, max_k = 0;
  for (int64_t t = 0; t < p.total_q * p.hq; ++t) {
    double s = 0;
    for (int e = 0; e < d; ++e) {
      const double x = qf[t * d + e];
      s += x * x;
    }
    max_q = std::max(max_q, s);
  }
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.k_lens[b]; ++j)
      for (int h = 0; h < p.hkv; ++h) {
        double s = 0;
        for (int e = 0; e < d; ++e) {
          const double x = kf[(p.KeyRow(b, j) * p.hkv + h) * d + e] * k_scale(h);
          s += x * x;
        }
        max_k = std::max(max_k, s);
      }
  *logit_bound = std::fabs(scale) * std::sqrt(max_q) * std::sqrt(max_k);
  auto work = [&](int b0, int step) {
    std::vector<double> sc, qv(d);
    for (int b = b0; b < p.batch; b += step) {
      for (int i = 0; i < p.q_lens[b]; ++i) {
        const int n = p.Visible(b, i);
        for (int h = 0; h < p.hq; ++h) {
          const int kvh = h / g;
          const int64_t qrow = (p.q_start[b] + i) * p.hq + h;
          for (int e = 0; e < d; ++e) qv[e] = qf[qrow * d + e];
          sc.assign(n, 0.0);
          double mx = -INFINITY;
          for (int j = 0; j < n; ++j) {
            const int64_t krow = (p.KeyRow(b, j) * p.hkv + kvh) * d;
            double s = 0;
            for (int e = 0; e < d; ++e) s += qv[e] * kf[krow + e];
            sc[j] = s * scale * k_scale(kvh);
            mx = std::max(mx, sc[j]);
          }
          double l = 0;
          for (int j = 0; j < n; ++j) l += (sc[j] = std::exp(sc[j] - mx));
          double* o = out.data() + qrow * d;
          for (int j = 0; j < n; ++j) {
            const int64_t vrow = (p.KeyRow(b, j) * p.hkv + kvh) * d;
            const double w = sc[j] / l * v_scale(kvh);
            for (int e = 0; e < d; ++e) o[e] += w * vf[vrow + e];
          }
        }
      }
    }
  };
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t, threads);
  for (auto& t : pool) t.join();
  return out;
}

// The tolerance of the library's ToleranceFor (kernels/reference): max |out - ref| / max |ref|,
// the products' part scaled by the logit bound beyond sqrt(head_dim).
double Tolerance(DecodeStorage s, bool e4m3, double logit_bound, int d) {
  const double product = s == DecodeStorage::kFp32 ? 1e-4 : (s == DecodeStorage::kFp16 || e4m3) ? 1e-2 : 3e-2;
  const double storage = s == DecodeStorage::kFp32 ? 0 : s == DecodeStorage::kFp16 ? 2e-3 : 1.6e-2;
  const double calibrated = std::sqrt(static_cast<double>(d));
  const double grow = logit_bound > calibrated ? logit_bound / calibrated : 1.0;
  return std::max(product * grow, storage);
}

struct DeviceProblem {
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  int32_t *table = nullptr, *cu_q = nullptr, *cu_k = nullptr, *kv_lens = nullptr, *counters = nullptr;
  float* ws = nullptr;
  float *k_scale = nullptr, *v_scale = nullptr;
  size_t ws_floats = 0;
  size_t o_bytes = 0;
  void Free() {
    for (void* x : {q, k, v, o, static_cast<void*>(table), static_cast<void*>(cu_q), static_cast<void*>(cu_k),
                    static_cast<void*>(kv_lens), static_cast<void*>(ws), static_cast<void*>(counters),
                    static_cast<void*>(k_scale), static_cast<void*>(v_scale)}) {
      if (x) cudaFree(x);
    }
    *this = DeviceProblem{};
  }
};

template <typename T>
T* Upload(const std::vector<T>& h) {
  if (h.empty()) return nullptr;
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, h.size() * sizeof(T)));
  CUDA_OK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

DeviceProblem UploadProblem(const DevProblem& p, int max_splits) {
  DeviceProblem dp;
  dp.q = Upload(p.q);
  dp.k = Upload(p.k);
  dp.v = Upload(p.v);
  dp.o_bytes = p.q.size();
  if (p.e4m3) {
    dp.k_scale = Upload(p.k_scale);
    dp.v_scale = Upload(p.v_scale);
  }
  CUDA_OK(cudaMalloc(&dp.o, std::max<size_t>(16, dp.o_bytes)));
  if (p.page > 0) dp.table = Upload(p.table);
  if (p.varlen) {
    std::vector<int32_t> cq(p.batch + 1, 0), ck(p.batch + 1, 0);
    for (int b = 0; b < p.batch; ++b) {
      cq[b + 1] = cq[b] + p.q_lens[b];
      ck[b + 1] = ck[b] + p.k_lens[b];
    }
    dp.cu_q = Upload(cq);
    dp.cu_k = Upload(ck);
  } else {
    std::vector<int32_t> lens(p.k_lens.begin(), p.k_lens.end());
    dp.kv_lens = Upload(lens);
  }
  dp.ws_floats = static_cast<size_t>(
      fusetune::cuda::decode::DecodeWorkspaceFloats(p.total_q, p.hq, p.d, std::max(2, max_splits)));
  CUDA_OK(cudaMalloc(&dp.ws, dp.ws_floats * sizeof(float)));
  // Enough counters for the smallest row block (16 rows); zero once, left zero by every launch.
  const int64_t counters = fusetune::cuda::decode::DecodeSplitCounterCount(
      (p.group() * p.q_len + 15) / 16, p.batch, p.hkv);
  CUDA_OK(cudaMalloc(&dp.counters, counters * sizeof(int32_t)));
  CUDA_OK(cudaMemset(dp.counters, 0, counters * sizeof(int32_t)));
  return dp;
}

DecodeKernelArgs ArgsFor(const DevProblem& p, const DeviceProblem& dp, const DecodeInstance& in, int splits) {
  DecodeKernelArgs a;
  a.q = dp.q;
  a.k = dp.k;
  a.v = dp.v;
  a.o = dp.o;
  a.k_scale = dp.k_scale;
  a.v_scale = dp.v_scale;
  a.batch = p.batch;
  a.q_heads = p.hq;
  a.kv_heads = p.hkv;
  a.group = p.group();
  a.head_dim = p.d;
  a.q_len = p.q_len;
  a.kv_len = p.kv_len;
  a.cu_seqlens_q = dp.cu_q;
  a.cu_seqlens_k = dp.cu_k;
  a.kv_valid_lens = dp.kv_lens;
  a.causal = p.causal;
  a.scale_log2 = p.scale * 1.4426950408889634f;
  a.block_table = dp.table;
  a.block_table_width = p.table_width;
  a.page_size = p.page;
  a.page_magic = fusetune::cuda::decode::PageDivisorMagic(p.page);
  a.splits = splits;
  a.total_q = p.total_q;
  if (splits > 1) {
    a.partial = dp.ws;
    a.partial_ml = dp.ws + static_cast<int64_t>(splits) * p.total_q * p.hq * p.d;
    a.split_counters = dp.counters;
  }
  a.row_blocks = (p.group() * p.q_len + in.block_m - 1) / in.block_m;
  return a;
}

DevProblem RandomProblem(std::mt19937_64& rng, bool small, int index, float* amp, int* prefix_pages) {
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  DevProblem p;
  p.storage = static_cast<DecodeStorage>(rng() % 3);
  p.e4m3 = p.storage != DecodeStorage::kFp32 && rng() % 3 == 0;
  p.d = pick({64, 128});
  const int heads = static_cast<int>(rng() % 6);
  const int hq[] = {32, 8, 4, 16, 6, 2}, hkv[] = {8, 1, 4, 2, 3, 1};
  p.hq = hq[heads];
  p.hkv = hkv[heads];
  const bool many_tokens = rng() % 2;
  const int n = many_tokens ? 2 + static_cast<int>(rng() % 15) : 1;
  p.causal = n > 1 ? (rng() % 4 != 0) : static_cast<int>(rng() % 2);
  const bool big_batch = !small && index % 10 == 0;
  p.batch = big_batch ? 16 + static_cast<int>(rng() % 49) : 1 + static_cast<int>(rng() % 8);
  const int layout = static_cast<int>(rng() % 8);  // 0 uniform, 1 varlen, 2..7 paged
  p.page = layout >= 2 ? pick({1, 3, 16, 64, 256, 16}) : 0;
  p.varlen = layout == 1 || (layout >= 2 && rng() % 3 == 0);
  const int max_len = small ? 70 : (p.page == 1 ? 700 : 1500);
  for (int b = 0; b < p.batch; ++b) {
    int len;
    switch (rng() % 6) {
      case 0: len = 1; break;
      case 1: len = 1 + 2 * static_cast<int>(rng() % (max_len / 2)); break;  // odd
      case 2: len = p.page > 1 ? p.page * (1 + static_cast<int>(rng() % 4)) + 1 : 1 + static_cast<int>(rng() % max_len); break;
      case 3: len = (rng() % 8 == 0) ? 0 : 1 + static_cast<int>(rng() % max_len); break;
      default: len = 1 + static_cast<int>(rng() % max_len); break;
    }
    p.k_lens.push_back(len);
    p.q_lens.push_back(p.varlen ? 1 + static_cast<int>(rng() % n) : n);
  }
  if (big_batch) p.k_lens[rng() % p.batch] = 4000 + static_cast<int>(rng() % 4200);  // one long sequence
  // Shared prefix: the first pages of every sequence are the same physical pages.
  *prefix_pages = 0;
  if (p.page > 0 && rng() % 3 == 0) {
    int shortest = *std::min_element(p.k_lens.begin(), p.k_lens.end());
    *prefix_pages = shortest / p.page / 2;
  }
  p.scale = 1.0f / std::sqrt(static_cast<float>(p.d));
  const int scale_kind = static_cast<int>(rng() % 10);
  if (scale_kind == 0) p.scale = 1.0f;
  if (scale_kind == 1) p.scale = 0.01f;
  *amp = (rng() % 8 == 0) ? 4.0f : 1.0f;  // large logits
  char buf[160];
  std::snprintf(buf, sizeof buf, "#%d %s%s d%d b%d hq%d hkv%d n%d causal%d %s page%d prefix%d scale%g amp%g", index,
                StorageName(p.storage), p.e4m3 ? " kv-e4m3" : "", p.d, p.batch, p.hq, p.hkv, n, p.causal, p.varlen ? "varlen" : "uniform",
                p.page, *prefix_pages, p.scale, *amp);
  p.label = buf;
  return p;
}

// Comma-separated filter from the environment: empty or unset keeps everything; else an entry
// must equal (exact) or occur in (substring) the name.
bool Selected(const char* env, const std::string& name, bool exact) {
  const char* f = std::getenv(env);
  if (f == nullptr || *f == 0) return true;
  std::string list = f;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    if (!item.empty() && (exact ? name == item : name.find(item) != std::string::npos)) return true;
    at = end + 1;
  }
  return false;
}

int Check(int problems, uint64_t seed, bool small) {
  const std::vector<DecodeInstance> all = AllInstances();
  std::mt19937_64 rng(seed);
  int failures = 0, runs = 0;
  double worst_ratio = 0;
  for (int index = 0; index < problems; ++index) {
    float amp;
    int prefix_pages;
    DevProblem p = RandomProblem(rng, small, index, &amp, &prefix_pages);
    Materialize(p, rng, amp, prefix_pages);
    double bound = 0;
    const std::vector<double> ref = Reference(p, &bound);
    double ref_max = 0;
    for (double x : ref) ref_max = std::max(ref_max, std::fabs(x));
    const double tol = Tolerance(p.storage, p.e4m3, bound, p.d);
    std::vector<const DecodeInstance*> fit;
    for (const auto& in : all)
      if (in.head_dim == p.d && in.storage == p.storage && in.kv_e4m3 == p.e4m3 &&
          Selected("DECODE_CHECK_INSTANCES", InstanceName(in), false)) {
        fit.push_back(&in);
      }
    // Every instance on a quarter of the problems, two random ones on the rest.
    std::vector<const DecodeInstance*> chosen = fit;
    if (index % 4 != 0) {
      std::shuffle(chosen.begin(), chosen.end(), rng);
      chosen.resize(std::min<size_t>(2, chosen.size()));
    }
    const int split_choices[] = {1, 2, 3, 5, 8, 16, 64};
    DeviceProblem dp = UploadProblem(p, 64);
    std::vector<uint8_t> out(dp.o_bytes);
    for (const DecodeInstance* in : chosen) {
      const int splits = split_choices[rng() % 7];
      DecodeKernelArgs a = ArgsFor(p, dp, *in, splits);
      CUDA_OK(cudaMemset(dp.o, 0xff, std::max<size_t>(16, dp.o_bytes)));  // NaN in every storage type
      if (p.total_q > 0) {
        CUDA_OK(in->launch(a, 0));
        CUDA_OK(cudaDeviceSynchronize());
      }
      CUDA_OK(cudaMemcpy(out.data(), dp.o, dp.o_bytes, cudaMemcpyDeviceToHost));
      if (splits > 1) {  // the last split block of each row block must leave its counter at zero
        std::vector<int32_t> counters(fusetune::cuda::decode::DecodeSplitCounterCount(a.row_blocks, p.batch, p.hkv));
        CUDA_OK(cudaMemcpy(counters.data(), dp.counters, counters.size() * 4, cudaMemcpyDeviceToHost));
        if (std::any_of(counters.begin(), counters.end(), [](int32_t x) { return x != 0; })) {
          ++failures;
          std::printf("FAIL %s | %s split%d: split counters not left at zero\n", p.label.c_str(),
                      InstanceName(*in).c_str(), splits);
        }
      }
      double err = 0;
      bool finite = true;
      for (int64_t i = 0; i < static_cast<int64_t>(ref.size()); ++i) {
        const double x = FromBits(p.storage, out.data(), i);
        if (!std::isfinite(x)) {
          finite = false;
          break;
        }
        err = std::max(err, std::fabs(x - ref[i]));
      }
      const double rel = ref_max > 0 ? err / ref_max : err;
      ++runs;
      if (finite) worst_ratio = std::max(worst_ratio, rel / tol);
      if (!finite || rel > tol) {
        ++failures;
        std::printf("FAIL %s | %s split%d: %s rel %.3g tol %.3g\n", p.label.c_str(), InstanceName(*in).c_str(),
                    splits, finite ? "error" : "non-finite or unwritten output", rel, tol);
      }
    }
    dp.Free();
    if (index % 50 == 49) std::printf("  %d problems, %d runs, %d failures\n", index + 1, runs, failures);
    std::fflush(stdout);
  }
  std::printf("SUMMARY check: %d problems, %d kernel runs, %d failures, worst error / tolerance %.3f\n", problems,
              runs, failures, worst_ratio);
  return failures == 0 ? 0 : 1;
}

// ---- timing ---------------------------------------------------------------------------------

// Reads K and V once (four independent 16-byte loads of each in flight per thread).
__global__ void ReadOnlyKernel(const uint4* k, const uint4* v, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      a[u] = __ldcs(k + i + u * stride);
      b[u] = __ldcs(v + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(k + i), b = __ldcs(v + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads
}

// K and V of `n16` 16-byte chunks each (filled with constant bytes) and a sink for the read
// kernels, freed with the object.
struct ReadBuffers {
  uint4* k = nullptr;
  uint4* v = nullptr;
  uint32_t* sink = nullptr;
  int64_t n16 = 0;
  explicit ReadBuffers(int64_t chunks) : n16(chunks) {
    CUDA_OK(cudaMalloc(&k, n16 * 16));
    CUDA_OK(cudaMalloc(&v, n16 * 16));
    CUDA_OK(cudaMalloc(&sink, 4));
    CUDA_OK(cudaMemset(k, 1, n16 * 16));
    CUDA_OK(cudaMemset(v, 2, n16 * 16));
  }
  ~ReadBuffers() {
    cudaFree(k);
    cudaFree(v);
    cudaFree(sink);
  }
  ReadBuffers(const ReadBuffers&) = delete;
  ReadBuffers& operator=(const ReadBuffers&) = delete;
};

// DECODE_FLUSH=read flushes by reading, as the backend's Time does; anything else by a memset,
// which leaves dirty lines for the timed kernel to write back (l2_flush.h).
struct Timer {
  void* flush = nullptr;
  uint32_t* sink = nullptr;
  bool flush_by_reading = false;
  int multiprocessors = 0;
  static constexpr size_t kFlushBytes = size_t{256} << 20;
  cudaEvent_t start, stop;
  Timer() {
    CUDA_OK(cudaMalloc(&flush, kFlushBytes));
    CUDA_OK(cudaMemset(flush, 0, kFlushBytes));
    CUDA_OK(cudaMalloc(&sink, 4));
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    CUDA_OK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0));
    const char* mode = std::getenv("DECODE_FLUSH");
    flush_by_reading = mode != nullptr && std::string(mode) == "read";
  }
  void Flush(int i) {
    if (flush_by_reading) {
      CUDA_OK(fusetune::cuda::EnqueueL2FlushByReading(flush, kFlushBytes, sink, multiprocessors, 0));
    } else {
      CUDA_OK(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, 0));
    }
  }
  template <class F>
  double MedianMicros(F&& launch, int launches) {
    for (int i = 0; i < 2; ++i) CUDA_OK(launch());
    std::vector<double> t;
    for (int i = 0; i < launches; ++i) {
      Flush(i);
      CUDA_OK(cudaEventRecord(start, 0));
      CUDA_OK(launch());
      CUDA_OK(cudaEventRecord(stop, 0));
      CUDA_OK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
      t.push_back(ms * 1e3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

// The read ceiling's grid: four blocks of 1024 threads per multiprocessor of an H200.
constexpr int kReadCeilingBlocks = 132 * 4, kReadCeilingThreads = 1024;

// The read ceiling of `buf`'s bytes: ReadOnlyKernel on a full grid, median of `launches`.
double ReadCeilingMicros(Timer& timer, const ReadBuffers& buf, int launches) {
  return timer.MedianMicros(
      [&] {
        ReadOnlyKernel<<<kReadCeilingBlocks, kReadCeilingThreads>>>(buf.k, buf.v, buf.n16, buf.sink);
        return cudaGetLastError();
      },
      launches);
}

DevProblem ServingShape(const char* label, int batch, int cache, int n, int page, int prefix, bool e4m3) {
  DevProblem p;
  p.storage = DecodeStorage::kBf16;
  p.e4m3 = e4m3;
  if (e4m3) {
    p.k_scale.assign(8, 1.0f / 448);
    p.v_scale.assign(8, 1.0f / 448);
  }
  p.d = 128;
  p.batch = batch;
  p.hq = 32;
  p.hkv = 8;
  p.causal = 1;
  p.scale = 1.0f / std::sqrt(128.0f);
  p.q_lens.assign(batch, n);
  p.k_lens.assign(batch, cache);
  p.page = page;
  p.label = label;
  (void)prefix;
  return p;
}

struct BenchShape {
  const char* label;
  int batch, cache, n, page, prefix_pages;
  bool e4m3 = false;  // K/V as e4m3 (Q/O bf16)
};
const BenchShape kBenchShapes[] = {
    {"b16-c1k", 16, 1024, 1, 0, 0},
    {"b16-c8k", 16, 8192, 1, 0, 0},
    {"b16-c32k", 16, 32768, 1, 0, 0},
    {"b1-c64k", 1, 65536, 1, 0, 0},
    {"b1-c128k", 1, 131072, 1, 0, 0},
    {"b16-c8k-paged16", 16, 8192, 1, 16, 0},
    {"b16-c8k-paged1", 16, 8192, 1, 1, 0},
    {"b64-c4k-n1", 64, 4096, 1, 0, 0},
    {"b64-c4k-n4", 64, 4096, 4, 0, 0},
    {"b64-c4k-n16", 64, 4096, 16, 0, 0},
    {"prefix-n512-c8k", 16, 8704, 512, 0, 0},
    {"prefix-n512-c8k-paged16", 16, 8704, 512, 16, 512},
    {"b16-c1k-e4m3", 16, 1024, 1, 0, 0, true},
    {"b16-c8k-e4m3", 16, 8192, 1, 0, 0, true},
    {"b16-c32k-e4m3", 16, 32768, 1, 0, 0, true},
    {"b1-c64k-e4m3", 1, 65536, 1, 0, 0, true},
    {"b16-c8k-paged16-e4m3", 16, 8192, 1, 16, 0, true},
};

// The bench shape labelled `label`, or nullptr.
const BenchShape* FindBenchShape(const std::string& label) {
  for (const BenchShape& b : kBenchShapes)
    if (label == b.label) return &b;
  return nullptr;
}

// The instance of `all` named `name` (InstanceName), or nullptr.
const DecodeInstance* FindInstance(const std::vector<DecodeInstance>& all, const std::string& name) {
  for (const DecodeInstance& i : all)
    if (InstanceName(i) == name) return &i;
  return nullptr;
}

// One shape, one instance and split, `launches` times back to back (for a profiler: ncu
// --launch-skip / --launch-count pick which launch to read).
int One(const std::string& shape, const std::string& instance, int splits, int launches) {
  const BenchShape* s = FindBenchShape(shape);
  const std::vector<DecodeInstance> all = AllInstances();
  const DecodeInstance* in = FindInstance(all, instance);
  if (s == nullptr || in == nullptr || splits < 1) {
    std::fprintf(stderr, "unknown shape or instance (e.g. b16-c8k bf16/d128/bm16/bs128/t256/st3)\n");
    return 2;
  }
  std::mt19937_64 rng(11);
  DevProblem p = ServingShape(s->label, s->batch, s->cache, s->n, s->page, s->prefix_pages, s->e4m3);
  Materialize(p, rng, 1.0f, s->prefix_pages, /*poison=*/false);
  DeviceProblem dp = UploadProblem(p, std::max(2, splits));
  DecodeKernelArgs a = ArgsFor(p, dp, *in, splits);
  for (int i = 0; i < launches; ++i) CUDA_OK(in->launch(a, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::printf("%s %s split %d: %d launches\n", s->label, instance.c_str(), splits, launches);
  dp.Free();
  return 0;
}

// Reads K and V as the decode kernels' blocks do, without computing: block (sequence, KV head,
// split) reads the head's rows of its keys (head_dim elements, every kv_heads * head_dim) of a
// contiguous cache, 16 bytes per load, four loads of K and four of V in flight per thread. Beside
// ReadOnlyKernel (the same bytes read contiguously by a full grid) it separates what the access
// pattern and the grid cost from what the kernels' pipeline costs.
__global__ void HeadRowReadKernel(const uint4* k, const uint4* v, int keys, int kv_heads, int row_chunks, int splits,
                                  uint32_t* sink) {
  const int split = blockIdx.x % splits, bh = blockIdx.x / splits;
  const int h = bh % kv_heads, b = bh / kv_heads;
  const int per = (keys + splits - 1) / splits;
  const int key0 = min(split * per, keys), key1 = min(key0 + per, keys);
  const int64_t n = static_cast<int64_t>(key1 - key0) * row_chunks;
  auto at = [&](int64_t i) {
    const int64_t j = key0 + i / row_chunks;
    return ((static_cast<int64_t>(b) * keys + j) * kv_heads + h) * row_chunks + i % row_chunks;
  };
  uint32_t acc = 0;
  const int nt = blockDim.x;
  int64_t i = threadIdx.x;
  for (; i + 3 * nt < n; i += 4 * nt) {
    uint4 a[4], c[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      a[u] = __ldcs(k + at(i + u * nt));
      c[u] = __ldcs(v + at(i + u * nt));
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ c[u].x ^ c[u].y ^ c[u].z ^ c[u].w;
  }
  for (; i < n; i += nt) {
    const uint4 a = __ldcs(k + at(i)), c = __ldcs(v + at(i));
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ c.x ^ c.y ^ c.z ^ c.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

// The decode shapes' bytes read three ways: contiguously by a full grid (the ceiling), and by
// HeadRowReadKernel with the decode kernels' grid (sequence x KV head x split) at several block
// sizes and splits.
int ReadPattern(int launches) {
  Timer timer;
  for (const BenchShape& s : kBenchShapes) {
    if (!Selected("DECODE_BENCH_SHAPES", s.label, true) || s.page != 0 || s.n != 1 || s.e4m3) continue;
    const int kv_heads = 8, d = 128;
    const int row_chunks = d * 2 / 16;  // bf16 rows
    const int64_t rows = static_cast<int64_t>(s.batch) * s.cache * kv_heads;
    const int64_t n16 = rows * row_chunks;
    const double bytes = 2.0 * n16 * 16;
    const ReadBuffers buf(n16);
    const double ceiling_us = ReadCeilingMicros(timer, buf, launches);
    std::printf("READ %-10s contiguous, %d x %d threads: %8.2f us %5.2f TB/s\n", s.label, kReadCeilingBlocks,
                kReadCeilingThreads, ceiling_us, bytes / ceiling_us * 1e-6);
    for (int splits : {1, 2, 4, 16, 32}) {
      const int blocks = s.batch * kv_heads * splits;
      if (blocks > 132 * 16) continue;
      for (int threads : {128, 256, 1024}) {
        const double us = timer.MedianMicros(
            [&] {
              HeadRowReadKernel<<<blocks, threads>>>(buf.k, buf.v, s.cache, kv_heads, row_chunks, splits, buf.sink);
              return cudaGetLastError();
            },
            launches);
        std::printf("READ %-10s head rows, %4d blocks x %4d threads (split %2d): %8.2f us %5.2f TB/s %5.1f %%\n",
                    s.label, blocks, threads, splits, us, bytes / us * 1e-6, 100.0 * ceiling_us / us);
      }
    }
  }
  return 0;
}

// Two instances (or two splits of one) on one bench shape, interleaved: every round times both
// (median of `launches`, L2 flushed before each launch) in a fresh random order, same inputs;
// prints each round's time ratio B / A and their median and range.
int Pair(const std::string& shape, const std::string& name_a, int splits_a, const std::string& name_b, int splits_b,
         int rounds, int launches) {
  const BenchShape* s = FindBenchShape(shape);
  const std::vector<DecodeInstance> all = AllInstances();
  const DecodeInstance* in_a = FindInstance(all, name_a);
  const DecodeInstance* in_b = FindInstance(all, name_b);
  if (s == nullptr || in_a == nullptr || in_b == nullptr || splits_a < 1 || splits_b < 1 || rounds < 1) {
    std::fprintf(stderr, "unknown shape or instance\n");
    return 2;
  }
  std::mt19937_64 rng(11);
  DevProblem p = ServingShape(s->label, s->batch, s->cache, s->n, s->page, s->prefix_pages, s->e4m3);
  Materialize(p, rng, 1.0f, s->prefix_pages, /*poison=*/false);
  DeviceProblem dp = UploadProblem(p, std::max({2, splits_a, splits_b}));
  const DecodeKernelArgs a = ArgsFor(p, dp, *in_a, splits_a);
  const DecodeKernelArgs b = ArgsFor(p, dp, *in_b, splits_b);
  Timer timer;
  std::vector<double> ratios, ta, tb;
  for (int r = 0; r < rounds; ++r) {
    double us_a = 0, us_b = 0;
    const bool a_first = rng() & 1;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == a_first) {
        us_a = timer.MedianMicros([&] { return in_a->launch(a, 0); }, launches);
      } else {
        us_b = timer.MedianMicros([&] { return in_b->launch(b, 0); }, launches);
      }
    }
    ta.push_back(us_a);
    tb.push_back(us_b);
    ratios.push_back(us_b / us_a);
  }
  using fusetune::Median;
  const double bytes = p.KvBytes();
  std::printf("PAIR %s | A %s split %d: %.2f us %.2f TB/s | B %s split %d: %.2f us %.2f TB/s | B/A median %.4f "
              "[%.4f, %.4f] over %d rounds\n",
              s->label, name_a.c_str(), splits_a, Median(ta), bytes / Median(ta) * 1e-6, name_b.c_str(), splits_b,
              Median(tb), bytes / Median(tb) * 1e-6, Median(ratios), *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()), rounds);
  dp.Free();
  return 0;
}

int Bench(const char* csv_path, int launches) {
  const std::vector<DecodeInstance> all = AllInstances();
  const auto& shapes = kBenchShapes;
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "shape,config,splits,us,tbps,ceiling_tbps\n");
  Timer timer;
  std::mt19937_64 rng(11);
  std::vector<std::string> best_lines;
  for (const BenchShape& s : shapes) {
    if (!Selected("DECODE_BENCH_SHAPES", s.label, true)) continue;
    DevProblem p = ServingShape(s.label, s.batch, s.cache, s.n, s.page, s.prefix_pages, s.e4m3);
    // Values only matter for timing through the data path; uniform inputs as the tuner uses.
    Materialize(p, rng, 1.0f, s.prefix_pages, /*poison=*/false);
    DeviceProblem dp = UploadProblem(p, 64);
    // The read ceiling for the same bytes: K and V of the cache, contiguous.
    const double bytes = p.KvBytes();
    const double ceiling_us = ReadCeilingMicros(timer, ReadBuffers(static_cast<int64_t>(bytes / 2 / 16)), launches);
    const double ceiling = bytes / ceiling_us * 1e-6;
    std::printf("== %s (%.1f MiB K+V): read-only ceiling %.2f us %.2f TB/s\n", s.label, bytes / (1 << 20),
                ceiling_us, ceiling);
    double best = 1e30;
    std::string best_name;
    const bool prefill = s.n > 16;
    const int splits_list[] = {1, 2, 4, 8, 16, 24, 32, 33, 64};
    for (const DecodeInstance& in : all) {
      if (in.head_dim != p.d || in.storage != p.storage || in.kv_e4m3 != p.e4m3) continue;
      // block_m 64 serves prefills and decode steps of 64 rows or more (GQA group x new tokens).
      if (prefill ? in.block_m == 16 : in.block_m > 16 && p.group() * s.n < in.block_m) continue;
      if (!Selected("DECODE_BENCH_INSTANCES", InstanceName(in), false)) continue;
      for (int splits : splits_list) {
        if (!Selected("DECODE_BENCH_SPLITS", std::to_string(splits), true)) continue;
        if (prefill && splits > 1) break;
        if (s.batch * p.hkv * splits > 132 * 32 && splits > 1) break;
        DecodeKernelArgs a = ArgsFor(p, dp, in, splits);
        const double us = timer.MedianMicros([&] { return in.launch(a, 0); }, launches);
        const double tbps = bytes / us * 1e-6;
        std::printf("  %-28s split %2d  %9.2f us  %5.2f TB/s  %5.1f %% of the ceiling\n", InstanceName(in).c_str(),
                    splits, us, tbps, 100.0 * tbps / ceiling);
        if (csv) std::fprintf(csv, "%s,%s,%d,%.3f,%.4f,%.4f\n", s.label, InstanceName(in).c_str(), splits, us, tbps, ceiling);
        if (us < best) {
          best = us;
          best_name = InstanceName(in) + " split " + std::to_string(splits);
        }
      }
    }
    char line[256];
    std::snprintf(line, sizeof line, "%-26s %-36s %9.2f us %5.2f TB/s (ceiling %.2f, %.1f %%)", s.label,
                  best_name.c_str(), best, bytes / best * 1e-6, ceiling, 100.0 * bytes / best * 1e-6 / ceiling);
    best_lines.push_back(line);
    dp.Free();
  }
  if (csv) std::fclose(csv);
  std::printf("BEST PER SHAPE (L2 flushed before every launch, median of %d)\n", launches);
  for (const auto& l : best_lines) std::printf("%s\n", l.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") {
    const int problems = argc > 2 ? std::atoi(argv[2]) : 500;
    const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
    const bool small = argc > 4 && std::string(argv[4]) == "small";
    return Check(problems, seed, small);
  }
  if (mode == "bench") return Bench(argc > 2 ? argv[2] : nullptr, argc > 3 ? std::atoi(argv[3]) : 20);
  if (mode == "one" && argc >= 5) return One(argv[2], argv[3], std::atoi(argv[4]), argc > 5 ? std::atoi(argv[5]) : 3);
  if (mode == "readpattern") return ReadPattern(argc > 2 ? std::atoi(argv[2]) : 15);
  if (mode == "pair" && argc >= 7) {
    return Pair(argv[2], argv[3], std::atoi(argv[4]), argv[5], std::atoi(argv[6]), argc > 7 ? std::atoi(argv[7]) : 9,
                argc > 8 ? std::atoi(argv[8]) : 10);
  }
  std::fprintf(stderr,
               "usage: decode_dev check [problems] [seed] [small] | bench [csv] [launches] |\n"
               "       one SHAPE INSTANCE SPLITS [launches] |\n"
               "       pair SHAPE INSTANCE_A SPLITS_A INSTANCE_B SPLITS_B [rounds] [launches] |\n"
               "       readpattern [launches]\n");
  return 2;
}
