// The C ABI on the CPU backend (host pointers): status codes and messages, problem/config
// conversion (varlen, padding, GQA), results against the fp64 reference, timing, the stream
// entry point (no stream on the CPU), problem and config keys, defaults, the device class.
#include "fusetune/c_api.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fusetune/kernels/dtype.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/kernels/reference.h"

extern "C" int fusetune_c_smoke(float* o, char* err, size_t errlen);
extern "C" void fusetune_c_smoke_inputs(float* q, float* k, float* v);

namespace {

struct Handle {
  fusetune_handle* h = nullptr;
  Handle() {
    char err[256];
    EXPECT_EQ(fusetune_create("cpu", 0, &h, err, sizeof err), FUSETUNE_OK) << err;
  }
  ~Handle() { fusetune_destroy(h); }
};

fusetune_problem Problem(int batch, int hq, int hkv, int q, int k, int d, bool causal) {
  fusetune_problem p;
  std::memset(&p, 0, sizeof p);
  p.batch = batch;
  p.q_heads = hq;
  p.kv_heads = hkv;
  p.q_len = q;
  p.kv_len = k;
  p.head_dim = d;
  p.causal = causal ? 1 : 0;
  p.dtype = FUSETUNE_FP32;
  return p;
}

fusetune_config Config(int variant) {
  fusetune_config c{};
  c.variant = variant;
  c.block_m = 16;
  c.block_s = 16;
  c.threads = 1;
  c.precision = FUSETUNE_PRECISION_FP32;
  c.stages = 1;
  c.split_kv = 1;
  return c;
}

fusetune::AttentionProblem ToCpp(const fusetune_problem& in) {
  fusetune::AttentionProblem p;
  p.batch = in.batch;
  p.q_heads = in.q_heads;
  p.kv_heads = in.kv_heads;
  p.q_len = in.q_len;
  p.kv_len = in.kv_len;
  p.head_dim = in.head_dim;
  p.causal = in.causal != 0;
  if (in.cu_seqlens_q != nullptr) {
    p.cu_seqlens_q.assign(in.cu_seqlens_q, in.cu_seqlens_q + in.batch + 1);
    p.cu_seqlens_k.assign(in.cu_seqlens_k, in.cu_seqlens_k + in.batch + 1);
  }
  if (in.kv_valid_lens != nullptr) p.kv_valid_lens.assign(in.kv_valid_lens, in.kv_valid_lens + in.batch);
  return p;
}

// Runs every variant through the ABI and compares with the fp64 reference.
void ExpectAllVariantsMatchReference(const fusetune_problem& problem, uint32_t seed) {
  const fusetune::AttentionProblem cpp = ToCpp(problem);
  ASSERT_TRUE(cpp.Validate().ok()) << cpp.Validate();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> q(cpp.QElements()), k(cpp.KVElements()), v(cpp.KVElements());
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = dist(rng);
  }
  auto ref = fusetune::ReferenceAttention(cpp, q, k, v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Handle h;
  for (int variant : {FUSETUNE_FUSED, FUSETUNE_PARTIAL, FUSETUNE_MATERIALIZED}) {
    SCOPED_TRACE(variant);
    fusetune_config c = Config(variant);
    std::vector<float> o(q.size(), std::nanf(""));
    char err[256] = "";
    ASSERT_EQ(fusetune_run(h.h, &problem, &c, q.data(), k.data(), v.data(), o.data(), err, sizeof err),
              FUSETUNE_OK)
        << err;
    for (size_t i = 0; i < o.size(); ++i) {
      ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;
    }
  }
}

TEST(CApi, UnknownBackendIsNotFoundWithAMessage) {
  fusetune_handle* h = reinterpret_cast<fusetune_handle*>(1);
  char err[256] = "";
  EXPECT_EQ(fusetune_create("tpu", 0, &h, err, sizeof err), FUSETUNE_NOT_FOUND);
  EXPECT_EQ(h, nullptr);
  EXPECT_NE(std::string(err).find("tpu"), std::string::npos) << err;
  EXPECT_STREQ(fusetune_status_name(FUSETUNE_NOT_FOUND), "NOT_FOUND");
  EXPECT_EQ(fusetune_api_version(), FUSETUNE_C_API_VERSION);
}

TEST(CApi, UniformGqaCausalMatchesReference) {
  ExpectAllVariantsMatchReference(Problem(2, 4, 2, 17, 23, 64, true), 1);
}

TEST(CApi, VarlenLengthsComeFromHostArrays) {
  fusetune_problem p = Problem(3, 2, 1, 9, 12, 32, false);
  const int32_t cu_q[] = {0, 9, 10, 15};
  const int32_t cu_k[] = {0, 12, 13, 20};
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_k = cu_k;
  ExpectAllVariantsMatchReference(p, 2);
}

TEST(CApi, KeyPaddingFromHostArray) {
  fusetune_problem p = Problem(2, 2, 2, 7, 19, 64, false);
  const int32_t valid[] = {19, 4};
  p.kv_valid_lens = valid;
  ExpectAllVariantsMatchReference(p, 3);
}

TEST(CApi, InvalidProblemIsInvalidArgumentAndOutputUntouched) {
  Handle h;
  fusetune_problem p = Problem(1, 4, 3, 8, 8, 64, false);  // 3 does not divide 4
  fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> q(8 * 4 * 64, 0.5f), kv(8 * 3 * 64, 0.5f), o(q.size(), 7.0f);
  char err[256] = "";
  EXPECT_EQ(fusetune_run(h.h, &p, &c, q.data(), kv.data(), kv.data(), o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("kv_heads"), std::string::npos) << err;
  for (float x : o) ASSERT_EQ(x, 7.0f);
  p.kv_heads = 4;
  p.dtype = 9;
  EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  p.dtype = FUSETUNE_FP32;
  c.variant = 42;
  EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, NullArgumentsAreInvalidArgumentNotCrashes) {
  Handle h;
  fusetune_problem p = Problem(1, 1, 1, 4, 4, 32, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> buf(4 * 32);
  EXPECT_EQ(fusetune_run(nullptr, &p, &c, buf.data(), buf.data(), buf.data(), buf.data(), nullptr, 0),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, nullptr, &c, buf.data(), buf.data(), buf.data(), buf.data(), nullptr, 0),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, &p, nullptr, buf.data(), buf.data(), buf.data(), buf.data(), nullptr, 0),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, &p, &c, nullptr, buf.data(), buf.data(), buf.data(), nullptr, 0),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_create(nullptr, 0, nullptr, nullptr, 0), FUSETUNE_INVALID_ARGUMENT);
  fusetune_destroy(nullptr);
}

TEST(CApi, MisalignedTensorIsInvalidArgumentAndOutputUntouched) {
  Handle h;
  fusetune_problem p = Problem(1, 1, 1, 4, 4, 32, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> buf(4 * 32 + 4, 0.5f), o(4 * 32 + 4, 7.0f);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 16, 0u);
  char err[256] = "";
  // One float past a 16-byte boundary, for each tensor in turn.
  EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data() + 1, buf.data(), buf.data(), o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("aligned"), std::string::npos) << err;
  EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data(), buf.data() + 1, buf.data(), o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data(), buf.data(), buf.data() + 1, o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data(), buf.data(), buf.data(), o.data() + 1, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  for (float x : o) ASSERT_EQ(x, 7.0f);
  double median = 0;
  int count = 0;
  EXPECT_EQ(fusetune_time(h.h, &p, &c, buf.data() + 1, buf.data(), buf.data(), o.data(), 0, 1, 1.0, 0,
                          &median, nullptr, 0, &count, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data(), buf.data(), buf.data(), o.data(), err, sizeof err),
            FUSETUNE_OK) << err;
}

TEST(CApi, CausalOtherThanZeroOrOneIsInvalidArgument) {
  Handle h;
  fusetune_problem p = Problem(1, 1, 1, 4, 4, 32, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> buf(4 * 32, 0.5f), o(4 * 32, 7.0f);
  char err[256] = "";
  for (int32_t causal : {2, -1, 255}) {
    p.causal = causal;
    EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT) << causal;
    EXPECT_NE(std::string(err).find("causal"), std::string::npos) << err;
    EXPECT_EQ(fusetune_run(h.h, &p, &c, buf.data(), buf.data(), buf.data(), o.data(), err, sizeof err),
              FUSETUNE_INVALID_ARGUMENT);
  }
  for (float x : o) ASSERT_EQ(x, 7.0f);
  p.causal = 1;
  EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_OK) << err;
}

TEST(CApi, LongMessagesAreTruncatedAndTerminated) {
  fusetune_handle* h = nullptr;
  char err[8];
  std::memset(err, 'x', sizeof err);
  EXPECT_EQ(fusetune_create("no-such-backend", 0, &h, err, sizeof err), FUSETUNE_NOT_FOUND);
  EXPECT_EQ(err[7], '\0');
  EXPECT_EQ(std::strlen(err), 7u);
}

TEST(CApi, ConfigKeysParseIntoTheStruct) {
  fusetune_config c;
  char err[256];
  ASSERT_EQ(fusetune_config_from_key("partial/bm64/bs32/t128/tf32/st1", &c, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_EQ(c.variant, FUSETUNE_PARTIAL);
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.block_s, 32);
  EXPECT_EQ(c.threads, 128);
  EXPECT_EQ(c.precision, FUSETUNE_PRECISION_TF32);
  EXPECT_EQ(c.stages, 1);
  EXPECT_EQ(c.split_kv, 1);
  EXPECT_EQ(fusetune_config_from_key("fused/garbage", &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, TimeReturnsSamplesAndMedian) {
  Handle h;
  fusetune_problem p = Problem(1, 2, 2, 64, 64, 64, false);
  fusetune_config c = Config(FUSETUNE_MATERIALIZED);
  std::vector<float> q(64 * 2 * 64, 0.25f), o(q.size());
  double median = -1, samples[16];
  int count = -1;
  char err[256] = "";
  ASSERT_EQ(fusetune_time(h.h, &p, &c, q.data(), q.data(), q.data(), o.data(), 1, 5, 10.0, 0, &median,
                          samples, 16, &count, err, sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(count, 5);
  EXPECT_GT(median, 0.0);
  for (int i = 0; i < count; ++i) EXPECT_GT(samples[i], 0.0);
}

TEST(CApi, GraphTimingIsUnimplementedOnTheCpuAndItsTimeCallsStillWork) {
  Handle h;
  char err[256] = "";
  // Asking (on = 0) and asking for it both answer UNIMPLEMENTED, naming the backend.
  EXPECT_EQ(fusetune_use_graph_timing(h.h, 0, err, sizeof err), FUSETUNE_UNIMPLEMENTED);
  EXPECT_EQ(fusetune_use_graph_timing(h.h, 1, err, sizeof err), FUSETUNE_UNIMPLEMENTED);
  EXPECT_NE(std::string(err).find("cpu"), std::string::npos) << err;
  EXPECT_NE(std::string(err).find("cuda only"), std::string::npos) << err;
  EXPECT_EQ(fusetune_use_graph_timing(nullptr, 1, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  // The refused request leaves the handle timing launch by launch, as before.
  fusetune_problem p = Problem(1, 2, 2, 64, 64, 64, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> q(64 * 2 * 64, 0.25f), o(q.size());
  double median = -1, samples[8];
  int count = -1;
  ASSERT_EQ(fusetune_time(h.h, &p, &c, q.data(), q.data(), q.data(), o.data(), 0, 3, 10.0, 0, &median, samples, 8,
                          &count, err, sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(count, 3);
}

fusetune_kv_cache DecodeCache(int page_block_size, const int32_t* block_table) {
  fusetune_kv_cache cache;
  std::memset(&cache, 0, sizeof cache);
  cache.decode = 1;
  cache.page_block_size = page_block_size;
  cache.block_table = block_table;
  return cache;
}

// Decode: 2 new tokens per sequence, causal among them, GQA, cache lengths 13 and 6.
fusetune_problem DecodeProblem(const int32_t* cache_lens) {
  fusetune_problem p = Problem(2, 4, 2, 2, 13, 32, true);
  p.kv_valid_lens = cache_lens;
  return p;
}

// Uniform inputs in [-1, 1] of the sizes `p` needs.
void RandomInputs(const fusetune::AttentionProblem& p, uint32_t seed, std::vector<float>* q, std::vector<float>* k,
                  std::vector<float>* v) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  q->resize(p.QElements());
  k->resize(p.KVElements());
  v->resize(p.KVElements());
  for (auto* t : {q, k, v}) {
    for (float& x : *t) x = dist(rng);
  }
}

TEST(CApi, AScratchArenaGivesTheHandlesOwnResultBitForBit) {
  Handle own, in_arena;
  const int32_t lens[] = {13, 6};
  fusetune_problem p = DecodeProblem(lens);
  fusetune_kv_cache cache = DecodeCache(0, nullptr);
  fusetune_config c = Config(FUSETUNE_FUSED);
  c.split_kv = 2;  // split partials and tiles, both in the arena
  c.threads = 2;
  std::vector<float> q, k, v;
  RandomInputs(ToCpp(p), 11, &q, &k, &v);
  char err[256] = "";
  size_t bytes = 0;
  ASSERT_EQ(fusetune_scratch_bytes(in_arena.h, &p, &cache, nullptr, &c, &bytes, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_GT(bytes, 0u);
  std::vector<float> expected(q.size()), got(q.size());
  ASSERT_EQ(fusetune_run_kv_cache(own.h, &p, &cache, &c, q.data(), k.data(), v.data(), expected.data(), err,
                                  sizeof err),
            FUSETUNE_OK)
      << err;
  // 64-byte aligned, every byte NaN: contents are undefined at each launch.
  std::vector<float> storage(bytes / sizeof(float) + 32, std::nanf(""));
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
  ASSERT_EQ(fusetune_use_scratch_arena(in_arena.h, base, bytes, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_run_kv_cache(in_arena.h, &p, &cache, &c, q.data(), k.data(), v.data(), got.data(), err,
                                  sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);

  // Too small: refused, O untouched; misaligned: refused; NULL: its own memory again.
  ASSERT_EQ(fusetune_use_scratch_arena(in_arena.h, base, bytes - 64, err, sizeof err), FUSETUNE_OK) << err;
  std::vector<float> untouched(q.size(), 7.0f);
  EXPECT_EQ(fusetune_run_kv_cache(in_arena.h, &p, &cache, &c, q.data(), k.data(), v.data(), untouched.data(), err,
                                  sizeof err),
            FUSETUNE_FAILED_PRECONDITION);
  EXPECT_NE(std::string(err).find("scratch arena"), std::string::npos) << err;
  EXPECT_EQ(untouched[0], 7.0f);
  EXPECT_EQ(fusetune_use_scratch_arena(in_arena.h, static_cast<char*>(base) + 4, bytes, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_use_scratch_arena(in_arena.h, nullptr, 0, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_run_kv_cache(in_arena.h, &p, &cache, &c, q.data(), k.data(), v.data(), got.data(), err,
                                  sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
}

// A caller's pool that runs every task on the calling thread (worker 0), counting them.
struct SerialWorkers {
  int64_t tasks = 0;
  static void ParallelFor(void* self, int, int64_t n, void (*body)(void*, int64_t, int), void* context) {
    for (int64_t t = 0; t < n; ++t) body(context, t, 0);
    static_cast<SerialWorkers*>(self)->tasks += n;
  }
};

TEST(CApi, LentWorkersRunTheTasksWithTheHandlesOwnResult) {
  Handle own, borrower;
  fusetune_problem p = Problem(2, 4, 2, 70, 90, 32, true);
  fusetune_config c = Config(FUSETUNE_FUSED);
  c.threads = 2;
  std::vector<float> q, k, v;
  RandomInputs(ToCpp(p), 12, &q, &k, &v);
  std::vector<float> expected(q.size()), got(q.size());
  char err[256] = "";
  ASSERT_EQ(fusetune_run(own.h, &p, &c, q.data(), k.data(), v.data(), expected.data(), err, sizeof err), FUSETUNE_OK)
      << err;
  SerialWorkers serial;
  const fusetune_workers workers{&serial, &SerialWorkers::ParallelFor};
  ASSERT_EQ(fusetune_use_workers(borrower.h, &workers, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_run(borrower.h, &p, &c, q.data(), k.data(), v.data(), got.data(), err, sizeof err), FUSETUNE_OK)
      << err;
  EXPECT_GT(serial.tasks, 0);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
  const int64_t tasks = serial.tasks;
  ASSERT_EQ(fusetune_use_workers(borrower.h, nullptr, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_run(borrower.h, &p, &c, q.data(), k.data(), v.data(), got.data(), err, sizeof err), FUSETUNE_OK);
  EXPECT_EQ(serial.tasks, tasks) << "its own threads again";
  const fusetune_workers broken{&serial, nullptr};
  EXPECT_EQ(fusetune_use_workers(borrower.h, &broken, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_use_workers(nullptr, nullptr, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, ScratchCallsCheckTheirArguments) {
  Handle h;
  fusetune_problem p = Problem(1, 2, 2, 16, 16, 32, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  size_t bytes = 0;
  char err[256] = "";
  EXPECT_EQ(fusetune_scratch_bytes(h.h, &p, nullptr, nullptr, &c, nullptr, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_scratch_bytes(nullptr, &p, nullptr, nullptr, &c, &bytes, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  p.head_dim = 0;
  EXPECT_EQ(fusetune_scratch_bytes(h.h, &p, nullptr, nullptr, &c, &bytes, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_use_scratch_arena(nullptr, nullptr, 0, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, ContiguousDecodeThroughTheKvCacheCallsMatchesReference) {
  const int32_t cache_lens[] = {13, 6};
  const fusetune_problem problem = DecodeProblem(cache_lens);
  const fusetune_kv_cache cache = DecodeCache(0, nullptr);
  fusetune::AttentionProblem cpp = ToCpp(problem);
  cpp.kind = fusetune::ProblemKind::kDecode;
  ASSERT_TRUE(cpp.Validate().ok()) << cpp.Validate();
  std::vector<float> q, k, v;
  RandomInputs(cpp, 5, &q, &k, &v);
  auto ref = fusetune::ReferenceAttention(cpp, q, k, v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Handle h;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  char err[256] = "";
  ASSERT_EQ(fusetune_can_implement_kv_cache(h.h, &problem, &cache, &c, err, sizeof err), FUSETUNE_OK) << err;
  std::vector<float> o(q.size(), std::nanf(""));
  ASSERT_EQ(fusetune_run_kv_cache(h.h, &problem, &cache, &c, q.data(), k.data(), v.data(), o.data(), err, sizeof err),
            FUSETUNE_OK)
      << err;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;
  double median = -1, samples[4];
  int count = -1;
  ASSERT_EQ(fusetune_time_kv_cache(h.h, &problem, &cache, &c, q.data(), k.data(), v.data(), o.data(), 0, 3, 10.0, 0,
                                   &median, samples, 4, &count, err, sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(count, 3);
  EXPECT_GT(median, 0.0);
}

TEST(CApi, KvCacheArgumentsAreCheckedBeforeAnythingRuns) {
  const int32_t cache_lens[] = {13, 6};
  const fusetune_problem problem = DecodeProblem(cache_lens);
  const fusetune_config c = Config(FUSETUNE_FUSED);
  Handle h;
  std::vector<float> t(4096, 0.5f), o(4096, 7.0f);
  const int32_t table[] = {0, 1, 2, 3};
  char err[256] = "";
  EXPECT_EQ(fusetune_run_kv_cache(h.h, &problem, nullptr, &c, t.data(), t.data(), t.data(), o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  fusetune_kv_cache bad_kind = DecodeCache(0, nullptr);
  bad_kind.decode = 2;
  EXPECT_EQ(fusetune_can_implement_kv_cache(h.h, &problem, &bad_kind, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("decode"), std::string::npos) << err;
  const fusetune_kv_cache huge_page = DecodeCache(300, table);
  EXPECT_EQ(fusetune_can_implement_kv_cache(h.h, &problem, &huge_page, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("page_block_size"), std::string::npos) << err;
  const fusetune_kv_cache no_table = DecodeCache(4, nullptr);
  EXPECT_EQ(fusetune_run_kv_cache(h.h, &problem, &no_table, &c, t.data(), t.data(), t.data(), o.data(), err,
                                  sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("block_table"), std::string::npos) << err;
  const fusetune_kv_cache stray_table = DecodeCache(0, table);
  EXPECT_EQ(fusetune_run_kv_cache(h.h, &problem, &stray_table, &c, t.data(), t.data(), t.data(), o.data(), err,
                                  sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  for (float x : o) ASSERT_EQ(x, 7.0f) << "output untouched";
}

// A paged cache on the CPU backend against the reference gathered through the same table:
// pages of 4 tokens, shuffled and one shared between the sequences. Skipped while the
// backend says it cannot read a paged cache.
TEST(CApi, PagedDecodeMatchesTheReferenceGatheredThroughTheTable) {
  const int32_t cache_lens[] = {13, 6};
  const fusetune_problem problem = DecodeProblem(cache_lens);
  // Width ceil(13 / 4) = 4; sequence 0 uses 4 pages, sequence 1 two (its first shared).
  const int32_t table[] = {5, 2, 0, 4, 5, 1, 3, 3};
  fusetune_kv_cache cache = DecodeCache(4, table);
  cache.pool_pages = 6;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  Handle h;
  char err[256] = "";
  const int can = fusetune_can_implement_kv_cache(h.h, &problem, &cache, &c, err, sizeof err);
  if (can == FUSETUNE_UNIMPLEMENTED) GTEST_SKIP() << "the cpu backend reads no paged cache yet: " << err;
  ASSERT_EQ(can, FUSETUNE_OK) << err;
  fusetune::AttentionProblem paged = ToCpp(problem);
  paged.kind = fusetune::ProblemKind::kDecode;
  paged.page_block_size = 4;
  paged.kv_pool_pages = 6;
  ASSERT_TRUE(paged.Validate().ok()) << paged.Validate();
  std::vector<float> q, k, v;
  RandomInputs(paged, 6, &q, &k, &v);
  auto gathered_k = fusetune::GatherPagedKV(paged, k, table);
  auto gathered_v = fusetune::GatherPagedKV(paged, v, table);
  ASSERT_TRUE(gathered_k.ok() && gathered_v.ok()) << gathered_k.status() << gathered_v.status();
  auto ref = fusetune::ReferenceAttention(paged.Unpaged(), q, *gathered_k, *gathered_v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<float> o(q.size(), std::nanf(""));
  ASSERT_EQ(fusetune_run_kv_cache(h.h, &problem, &cache, &c, q.data(), k.data(), v.data(), o.data(), err, sizeof err),
            FUSETUNE_OK)
      << err;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;
  const int32_t out_of_pool[] = {5, 2, 0, 6, 5, 1, 3, 3};
  cache.block_table = out_of_pool;
  EXPECT_EQ(fusetune_run_kv_cache(h.h, &problem, &cache, &c, q.data(), k.data(), v.data(), o.data(), err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, RunOnStreamWithoutAStreamComputesOnTheCpuAsRunDoes) {
  const fusetune_problem problem = Problem(2, 4, 2, 17, 23, 64, true);
  const fusetune::AttentionProblem cpp = ToCpp(problem);
  std::vector<float> q, k, v;
  RandomInputs(cpp, 7, &q, &k, &v);
  auto ref = fusetune::ReferenceAttention(cpp, q, k, v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Handle h;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  char err[256] = "";
  std::vector<float> o(q.size(), std::nanf(""));
  // A null launch and a zeroed one are the same: the legacy stream, no device lengths.
  ASSERT_EQ(fusetune_run_on_stream(h.h, &problem, nullptr, &c, q.data(), k.data(), v.data(), o.data(), nullptr, err,
                                   sizeof err),
            FUSETUNE_OK)
      << err;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;
  fusetune_launch launch;
  std::memset(&launch, 0, sizeof launch);
  std::fill(o.begin(), o.end(), std::nanf(""));
  ASSERT_EQ(fusetune_run_on_stream(h.h, &problem, nullptr, &c, q.data(), k.data(), v.data(), o.data(), &launch, err,
                                   sizeof err),
            FUSETUNE_OK)
      << err;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;
}

TEST(CApi, RunOnStreamRefusesAStreamOnTheCpuAndLeavesTheOutput) {
  Handle h;
  const fusetune_problem p = Problem(1, 1, 1, 4, 4, 32, false);
  const fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<float> buf(4 * 32, 0.5f), o(4 * 32, 7.0f);
  fusetune_launch launch;
  std::memset(&launch, 0, sizeof launch);
  launch.stream = reinterpret_cast<void*>(0x1234);
  char err[256] = "";
  EXPECT_EQ(fusetune_run_on_stream(h.h, &p, nullptr, &c, buf.data(), buf.data(), buf.data(), o.data(), &launch, err,
                                   sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("stream"), std::string::npos) << err;
  for (float x : o) ASSERT_EQ(x, 7.0f);
}

// The launch's visible-key counts are the cache lengths of a decode batch whose problem is at
// its capacity: the same result as the problem's own kv_valid_lens.
TEST(CApi, RunOnStreamReadsTheLaunchsKeyCountsAndRefusesThemTwice) {
  const int32_t cache_lens[] = {13, 6};
  const fusetune_problem with_lengths = DecodeProblem(cache_lens);
  fusetune_problem at_capacity = with_lengths;
  at_capacity.kv_valid_lens = nullptr;
  const fusetune_kv_cache cache = DecodeCache(0, nullptr);
  fusetune::AttentionProblem cpp = ToCpp(with_lengths);
  cpp.kind = fusetune::ProblemKind::kDecode;
  std::vector<float> q, k, v;
  RandomInputs(cpp, 8, &q, &k, &v);
  auto ref = fusetune::ReferenceAttention(cpp, q, k, v);
  ASSERT_TRUE(ref.ok()) << ref.status();
  Handle h;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  fusetune_launch launch;
  std::memset(&launch, 0, sizeof launch);
  launch.kv_valid_lens = cache_lens;
  char err[256] = "";
  std::vector<float> o(q.size(), std::nanf(""));
  ASSERT_EQ(fusetune_run_on_stream(h.h, &at_capacity, &cache, &c, q.data(), k.data(), v.data(), o.data(), &launch,
                                   err, sizeof err),
            FUSETUNE_OK)
      << err;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4) << "element " << i;

  std::vector<float> untouched(q.size(), 7.0f);
  EXPECT_EQ(fusetune_run_on_stream(h.h, &with_lengths, &cache, &c, q.data(), k.data(), v.data(), untouched.data(),
                                   &launch, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("twice"), std::string::npos) << err;
  const int32_t too_long[] = {14, 6};  // over kv_len 13
  launch.kv_valid_lens = too_long;
  EXPECT_EQ(fusetune_run_on_stream(h.h, &at_capacity, &cache, &c, q.data(), k.data(), v.data(), untouched.data(),
                                   &launch, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("kv_valid_lens[0]"), std::string::npos) << err;
  for (float x : untouched) ASSERT_EQ(x, 7.0f);
}

TEST(CApi, ProblemKeysAreTheLibrarysAndValidationNamesTheField) {
  const fusetune_problem p = Problem(1, 12, 12, 2048, 2048, 64, false);
  char key[256], err[256] = "";
  ASSERT_EQ(fusetune_problem_key(&p, nullptr, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, "prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32");
  EXPECT_EQ(key, ToCpp(p).Key());
  EXPECT_EQ(fusetune_problem_validate(&p, nullptr, err, sizeof err), FUSETUNE_OK) << err;

  // A paged decode problem: the cache's fields are part of the key.
  const int32_t cache_lens[] = {13, 6};
  const fusetune_problem decode = DecodeProblem(cache_lens);
  const int32_t table[] = {0};
  fusetune_kv_cache cache = DecodeCache(4, table);
  cache.pool_pages = 6;
  fusetune::AttentionProblem cpp = ToCpp(decode);
  cpp.kind = fusetune::ProblemKind::kDecode;
  cpp.page_block_size = 4;
  cpp.kv_pool_pages = 6;
  ASSERT_EQ(fusetune_problem_key(&decode, &cache, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_EQ(key, cpp.Key());

  // Too small a buffer is an error that says the size, never a truncated key.
  char small[8];
  std::memset(small, 'x', sizeof small);
  EXPECT_EQ(fusetune_problem_key(&p, nullptr, small, sizeof small, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("51 bytes"), std::string::npos) << err;
  EXPECT_EQ(small[0], 'x');

  fusetune_problem bad = p;
  bad.kv_heads = 5;
  EXPECT_EQ(fusetune_problem_validate(&bad, nullptr, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("kv_heads"), std::string::npos) << err;
  EXPECT_EQ(fusetune_problem_key(&bad, nullptr, key, sizeof key, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, E4m3DecodeThroughTheKvQuantCallsMatchesTheReferenceOfItsScaledValues) {
  const int32_t cache_lens[] = {13, 6};
  fusetune_problem problem = DecodeProblem(cache_lens);
  problem.dtype = FUSETUNE_BF16;
  const fusetune_kv_cache cache = DecodeCache(0, nullptr);
  fusetune::AttentionProblem cpp = ToCpp(problem);
  cpp.kind = fusetune::ProblemKind::kDecode;
  cpp.dtype = fusetune::DType::kBf16;
  cpp.kv_storage = fusetune::KvStorage::kE4m3;
  ASSERT_TRUE(cpp.Validate().ok()) << cpp.Validate();
  std::vector<float> q, k, v;
  RandomInputs(cpp, 7, &q, &k, &v);
  fusetune::RoundToDType(fusetune::DType::kBf16, q);
  std::vector<uint8_t> k8(k.size()), v8(v.size());
  std::vector<float> k_scale(2), v_scale(2);
  fusetune::QuantizeE4m3PerHead(k, 2, 32, k8, k_scale);
  fusetune::QuantizeE4m3PerHead(v, 2, 32, v8, v_scale);
  std::vector<float> k_values(k8.size()), v_values(v8.size());
  for (size_t i = 0; i < k8.size(); ++i) {
    k_values[i] = fusetune::E4m3ToFloat(k8[i]);
    v_values[i] = fusetune::E4m3ToFloat(v8[i]);
  }
  auto ref = fusetune::ReferenceAttention(cpp, q, k_values, v_values, fusetune::KvScales{k_scale, v_scale});
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<uint16_t> q16(q.size()), o16(q.size(), 0x7fc0);
  fusetune::EncodeTensor(fusetune::DType::kBf16, q, q16.data());
  Handle h;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  const fusetune_kv_quant quant{FUSETUNE_KV_E4M3, k_scale.data(), v_scale.data()};
  char err[256] = "";
  char key[256];
  ASSERT_EQ(fusetune_problem_key_kv_quant(&problem, &cache, &quant, key, sizeof key, err, sizeof err), FUSETUNE_OK)
      << err;
  EXPECT_EQ(key, cpp.Key());
  ASSERT_EQ(fusetune_can_implement_kv_quant(h.h, &problem, &cache, &quant, &c, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_run_kv_quant(h.h, &problem, &cache, &quant, &c, q16.data(), k8.data(), v8.data(), o16.data(), err,
                                  sizeof err),
            FUSETUNE_OK)
      << err;
  std::vector<float> o(o16.size());
  fusetune::DecodeTensor(fusetune::DType::kBf16, o16.data(), o16.size(), o.data());
  double ref_max = 0;
  for (double x : *ref) ref_max = std::max(ref_max, std::fabs(x));
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 2e-2 * ref_max) << "element " << i;
  double median = -1;
  ASSERT_EQ(fusetune_time_kv_quant(h.h, &problem, &cache, &quant, &c, q16.data(), k8.data(), v8.data(), o16.data(), 0,
                                   2, 10.0, 0, &median, nullptr, 0, nullptr, err, sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_GT(median, 0.0);
}

TEST(CApi, KvQuantArgumentsAreChecked) {
  const int32_t cache_lens[] = {13, 6};
  fusetune_problem problem = DecodeProblem(cache_lens);
  const fusetune_kv_cache cache = DecodeCache(0, nullptr);
  char key[256], err[256] = "";
  fusetune_kv_quant quant{FUSETUNE_KV_E4M3, nullptr, nullptr};
  // e4m3 K/V need a 16-bit Q: an fp32 problem is refused, naming why.
  EXPECT_EQ(fusetune_problem_key_kv_quant(&problem, &cache, &quant, key, sizeof key, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("fp16 or bf16"), std::string::npos) << err;
  problem.dtype = FUSETUNE_FP16;
  ASSERT_EQ(fusetune_problem_key_kv_quant(&problem, &cache, &quant, key, sizeof key, err, sizeof err), FUSETUNE_OK);
  EXPECT_NE(std::string(key).find("/kve4m3"), std::string::npos) << key;
  quant.storage = 5;
  EXPECT_EQ(fusetune_problem_key_kv_quant(&problem, &cache, &quant, key, sizeof key, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_problem_key_kv_quant(&problem, &cache, nullptr, key, sizeof key, err, sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  // Missing scales: refused before anything runs, the output untouched.
  Handle h;
  quant.storage = FUSETUNE_KV_E4M3;
  const fusetune_config c = Config(FUSETUNE_FUSED);
  std::vector<uint16_t> t(4096, 0), o(4096, 0x1234);
  EXPECT_EQ(fusetune_run_kv_quant(h.h, &problem, &cache, &quant, &c, t.data(), t.data(), t.data(), o.data(), err,
                                  sizeof err),
            FUSETUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("k_scale"), std::string::npos) << err;
  EXPECT_EQ(o[0], 0x1234);
}

TEST(CApi, ConfigKeysRoundTrip) {
  fusetune_config c;
  char key[128], err[256] = "";
  for (const char* text : {"fused/bm64/bs32/t4/fp32/st2", "fused/bm16/bs64/t128/bf16/st2/skauto",
                           "partial/bm64/bs32/t128/tf32/st1"}) {
    ASSERT_EQ(fusetune_config_from_key(text, &c, err, sizeof err), FUSETUNE_OK) << err;
    ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
    EXPECT_STREQ(key, text);
  }
  c.block_m = 0;
  EXPECT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, ScheduleFlagsRoundTripAndAreZeroOrOne) {
  fusetune_config c;
  char key[128], err[256] = "";
  const char* text = "fused/bm128/bs128/t384/bf16/st2/pingpong/persistent";
  ASSERT_EQ(fusetune_config_from_key(text, &c, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_EQ(c.split_kv, 1);
  EXPECT_EQ(c.pingpong, 1);
  EXPECT_EQ(c.persistent, 1);
  ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, text);
  ASSERT_EQ(fusetune_config_from_key("fused/bm128/bs128/t384/bf16/st2/sk4/persistent", &c, err, sizeof err),
            FUSETUNE_OK)
      << err;
  EXPECT_EQ(c.split_kv, 4);
  EXPECT_EQ(c.pingpong, 0);
  EXPECT_EQ(c.persistent, 1);
  // Keys without the flags write them as 0.
  c.pingpong = c.persistent = 1;
  ASSERT_EQ(fusetune_config_from_key("fused/bm128/bs128/t384/bf16/st2", &c, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_EQ(c.pingpong, 0);
  EXPECT_EQ(c.persistent, 0);
  c.pingpong = 1;
  ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, "fused/bm128/bs128/t384/bf16/st2/pingpong");
  for (int bad : {-1, 2}) {
    c.pingpong = bad;
    c.persistent = 0;
    EXPECT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(err).find("pingpong and persistent must be 0 or 1"), std::string::npos) << err;
    c.pingpong = 0;
    c.persistent = bad;
    EXPECT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_INVALID_ARGUMENT) << bad;
  }
}

TEST(CApi, TheCpuBackendRefusesTheScheduleFlags) {
  Handle h;
  const fusetune_problem p = Problem(1, 2, 2, 8, 8, 32, false);
  fusetune_config c = Config(FUSETUNE_FUSED);
  char err[256] = "";
  ASSERT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_OK) << err;
  c.persistent = 1;
  EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_UNIMPLEMENTED);
  EXPECT_NE(std::string(err).find("persistent"), std::string::npos) << err;
}

TEST(CApi, TheFirstSevenConfigFieldsKeepVersionOnesOffsets) {
  // Version 2 appended pingpong and persistent; a version-1 library reads the same offsets.
  EXPECT_EQ(FUSETUNE_C_API_VERSION, 2);
  EXPECT_EQ(offsetof(fusetune_config, variant), 0u);
  EXPECT_EQ(offsetof(fusetune_config, split_kv), 6 * sizeof(int32_t));
  EXPECT_EQ(offsetof(fusetune_config, pingpong), 7 * sizeof(int32_t));
  EXPECT_EQ(offsetof(fusetune_config, persistent), 8 * sizeof(int32_t));
  EXPECT_EQ(sizeof(fusetune_config), 9 * sizeof(int32_t));
}

TEST(CApi, DefaultConfigIsTheDeviceClassBackendsAndRunsOnTheCpu) {
  const fusetune_problem p = Problem(1, 2, 2, 8, 8, 64, false);
  fusetune_config c;
  char key[128], err[256] = "";
  ASSERT_EQ(fusetune_default_config("cpu/some-cpu/x86_64", &p, nullptr, &c, err, sizeof err), FUSETUNE_OK) << err;
  ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, "fused/bm64/bs64/t1/fp32/st1");
  Handle h;
  EXPECT_EQ(fusetune_can_implement(h.h, &p, &c, err, sizeof err), FUSETUNE_OK) << err;
  fusetune_problem half = p;
  half.dtype = FUSETUNE_BF16;
  ASSERT_EQ(fusetune_default_config("cuda/NVIDIA-H200/sm90", &half, nullptr, &c, err, sizeof err), FUSETUNE_OK);
  ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, "fused/bm64/bs64/t128/bf16/st2");
  // An unknown backend falls back to the cpu's, as the C++ client cache does.
  ASSERT_EQ(fusetune_default_config("tpu/v5", &half, nullptr, &c, err, sizeof err), FUSETUNE_OK);
  ASSERT_EQ(fusetune_config_key(&c, key, sizeof key, err, sizeof err), FUSETUNE_OK) << err;
  EXPECT_STREQ(key, "fused/bm64/bs64/t1/fp32/st1");
  fusetune_problem bad = p;
  bad.head_dim = 7;
  EXPECT_EQ(fusetune_default_config("cpu", &bad, nullptr, &c, err, sizeof err), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, DeviceClassIsTheBackendsDescription) {
  Handle h;
  char device_class[256];
  ASSERT_EQ(fusetune_device_class(h.h, device_class, sizeof device_class), FUSETUNE_OK);
  EXPECT_EQ(std::string(device_class).rfind("cpu/", 0), 0u) << device_class;
  char describe[512];
  ASSERT_EQ(fusetune_describe(h.h, describe, sizeof describe), FUSETUNE_OK);
  EXPECT_EQ(std::string(describe).rfind(std::string(device_class) + " | ", 0), 0u) << describe;
  EXPECT_EQ(fusetune_device_class(nullptr, device_class, sizeof device_class), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, PlainCCallerGetsTheReferenceResult) {
  std::vector<float> q(5 * 2 * 32), k(5 * 32), v(5 * 32), o(5 * 2 * 32, std::nanf(""));
  fusetune_c_smoke_inputs(q.data(), k.data(), v.data());
  char err[256] = "";
  ASSERT_EQ(fusetune_c_smoke(o.data(), err, sizeof err), FUSETUNE_OK) << err;
  fusetune::AttentionProblem p = ToCpp(Problem(1, 2, 1, 5, 5, 32, true));
  auto ref = fusetune::ReferenceAttention(p, q, k, v);
  ASSERT_TRUE(ref.ok());
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], (*ref)[i], 1e-4);
}

TEST(CApi, ToleranceIsTheLibrarysVerificationTolerance) {
  const std::pair<int, fusetune::Precision> precisions[] = {
      {FUSETUNE_PRECISION_FP32, fusetune::Precision::kFp32}, {FUSETUNE_PRECISION_TF32, fusetune::Precision::kTf32},
      {FUSETUNE_PRECISION_FP16, fusetune::Precision::kFp16}, {FUSETUNE_PRECISION_BF16, fusetune::Precision::kBf16}};
  const std::pair<int, fusetune::DType> dtypes[] = {
      {FUSETUNE_FP32, fusetune::DType::kFp32}, {FUSETUNE_FP16, fusetune::DType::kFp16}, {FUSETUNE_BF16, fusetune::DType::kBf16}};
  for (const auto& [c_precision, precision] : precisions) {
    for (const auto& [c_dtype, dtype] : dtypes) {
      double tolerance = -1;
      ASSERT_EQ(fusetune_tolerance(c_precision, c_dtype, &tolerance), FUSETUNE_OK);
      EXPECT_EQ(tolerance, fusetune::ToleranceFor(precision, dtype)) << c_precision << " " << c_dtype;
    }
  }
  double tolerance = 0;
  ASSERT_EQ(fusetune_tolerance(FUSETUNE_PRECISION_FP32, FUSETUNE_FP32, &tolerance), FUSETUNE_OK);
  EXPECT_EQ(tolerance, 1e-4);
  EXPECT_EQ(fusetune_tolerance(7, FUSETUNE_FP32, &tolerance), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_tolerance(FUSETUNE_PRECISION_FP32, 9, &tolerance), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_tolerance(FUSETUNE_PRECISION_FP32, FUSETUNE_FP32, nullptr), FUSETUNE_INVALID_ARGUMENT);
}

TEST(CApi, SeedProblemsAreTheSeedPreset) {
  size_t count = 0;
  ASSERT_EQ(fusetune_seed_problems(nullptr, 0, &count), FUSETUNE_OK);
  const std::vector<fusetune::AttentionProblem> seed = fusetune::SeedPresetProblems();
  ASSERT_EQ(count, seed.size());
  std::vector<fusetune_problem> problems(count);
  ASSERT_EQ(fusetune_seed_problems(problems.data(), problems.size(), &count), FUSETUNE_OK);
  for (size_t i = 0; i < count; ++i) {
    char key[256];
    ASSERT_EQ(fusetune_problem_key(&problems[i], nullptr, key, sizeof(key), nullptr, 0), FUSETUNE_OK);
    EXPECT_EQ(std::string(key), seed[i].Key());
  }
  EXPECT_EQ(fusetune_seed_problems(nullptr, 1, &count), FUSETUNE_INVALID_ARGUMENT);
  EXPECT_EQ(fusetune_seed_problems(problems.data(), problems.size(), nullptr), FUSETUNE_INVALID_ARGUMENT);
}

}  // namespace
