// CapiBackend over this build's own libfusetune_capi.so on the CPU backend: served cells verify
// against the reference and time through the library; what the library or ABI cannot do is a
// clear error.
#include "fusetune/regress/capi_backend.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fusetune/regress/block_source.h"
#include "gtest/gtest.h"

namespace fusetune::regress {
namespace {

std::unique_ptr<Backend> Cpu() { return *CreateBackend("cpu", 0); }

AttentionProblem Small() { return *AttentionProblem::FromKey("prefill/b2/hq4/hkv2/q33/k47/d32/causal1/fp32"); }

AttentionProblem Key(const char* key) {
  absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(key);
  EXPECT_TRUE(p.ok()) << key << ": " << p.status();
  return p.ok() ? *p : AttentionProblem{};
}

// A packed batch of three sequences of different query and key lengths.
AttentionProblem Varlen() {
  AttentionProblem p = Small();
  p.batch = 3;
  p.cu_seqlens_q = {0, 5, 21, 40};  // 5, 16, 19 queries
  p.cu_seqlens_k = {0, 9, 21, 52};  // 9, 12, 31 keys
  p.q_len = 19;
  p.kv_len = 31;
  return p;
}

// The cell as a suite's would be served: the library can run it, the Runner verifies it against
// the fp64 reference (through the block table and the e4m3 scales where the problem has them) and
// the library's timer gives a block.
void ExpectServed(Backend& lib, const AttentionProblem& problem, const KernelConfig& config) {
  SCOPED_TRACE(problem.Key() + " " + config.Key());
  // This build's CPU backend runs it, so a refusal below would be the adapter's.
  ASSERT_TRUE(Cpu()->CanImplement(problem, config).ok()) << Cpu()->CanImplement(problem, config);
  absl::Status can = lib.CanImplement(problem, config);
  EXPECT_TRUE(can.ok()) << can;
  RunnerBlockSource source(lib, "0123abcd",
                           TimingOptions{.warmup = 0, .repeats = 3, .max_seconds = 0.1, .flush_l2 = false});
  absl::StatusOr<CellCheck> check = source.Verify(problem, config);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->outcome, TrialOutcome::kOk) << check->message;
  EXPECT_LE(check->max_rel_error, check->tolerance);
  absl::StatusOr<SampleBlock> block = source.MeasureBlock(problem, config);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GE(block->samples, 3);
  EXPECT_GT(block->median_us, 0);
}

TEST(CapiBackendTest, ServesALibrarysKernelsVerifiedAndTimed) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_EQ((*lib)->Describe().DeviceClass(), Cpu()->Describe().DeviceClass());
  RunnerBlockSource source(**lib, "0123abcd", TimingOptions{.warmup = 0, .repeats = 3, .max_seconds = 0.1, .flush_l2 = false});
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  absl::StatusOr<CellCheck> check = source.Verify(Small(), c);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->outcome, TrialOutcome::kOk) << check->message;
  EXPECT_LE(check->max_rel_error, check->tolerance);
  absl::StatusOr<SampleBlock> block = source.MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GE(block->samples, 3);
  EXPECT_GT(block->median_us, 0);
}

TEST(CapiBackendTest, TheLibrarysRefusalComesBackWithItsCode) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  KernelConfig odd = *KernelConfig::FromKey("fused/bm16/bs48/t1/fp32/st1");
  absl::Status s = (*lib)->CanImplement(Small(), odd);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library"), std::string::npos) << s;
  // Through the KV-cache calls too: the library's CPU backend splits only the fused variant.
  const AttentionProblem decode = Key("decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32/page16");
  s = (*lib)->CanImplement(decode, *KernelConfig::FromKey("partial/bm16/bs32/t1/fp32/st1/skauto"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: cpu: split_kv must be 1 for the partial variant"), std::string::npos)
      << s;
  // A paged run needs its block table, which goes to the library as it is.
  std::vector<float> none(1);
  const AttentionBuffers no_table{.q = none.data(), .k = none.data(), .v = none.data(), .o = none.data()};
  s = (*lib)->Run(decode, *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1"), no_table);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("C ABI library"), std::string::npos) << s;
}

// The H200 suite's kinds of cells, small: paged decode, a paged prefill over a shared prefix,
// contiguous decode with several new tokens, planned splits (/skauto), a varlen prefill, e4m3 K/V.
TEST(CapiBackendTest, ServesKvCachesPlannedSplitsVarlenAndE4m3) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  const KernelConfig plain = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  const KernelConfig split = *KernelConfig::FromKey("fused/bm16/bs32/t2/fp32/st1/sk2");
  const KernelConfig planned = *KernelConfig::FromKey("fused/bm16/bs32/t2/fp32/st1/skauto");
  const AttentionProblem paged_decode = Key("decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32/page16");
  for (const KernelConfig& c : {plain, split, planned}) ExpectServed(**lib, paged_decode, c);
  // Contiguous decode: a fixed split count, which the library runs only for a problem it is told
  // is decode (its CPU backend splits no prefill).
  const AttentionProblem decode = Key("decode/b3/hq4/hkv1/q4/k50/d32/causal1/fp32");
  for (const KernelConfig& c : {split, planned}) ExpectServed(**lib, decode, c);
  ExpectServed(**lib, Key("decode/b2/hq4/hkv2/q1/k45/d32/causal1/fp32/page1"), planned);
  // A pool larger than the tables need and wider tables than the keys need.
  ExpectServed(**lib, Key("decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32/page16/pool20/bt7"), planned);
  ExpectServed(**lib, Key("prefill/b2/hq4/hkv2/q24/k88/d32/causal1/fp32/page16/prefix4"), plain);
  ExpectServed(**lib, Varlen(), plain);
  ExpectServed(**lib, Small(), planned);  // the CPU plans one split for a prefill
  ExpectServed(**lib, paged_decode, *KernelConfig::FromKey("materialized/bm16/bs32/t1/fp32/st1"));
  // e4m3 K/V: Q and O in bf16, the scales beside the block table.
  for (const char* key : {"decode/b2/hq4/hkv2/q1/k70/d32/causal1/bf16/page16/kve4m3",
                          "decode/b2/hq4/hkv2/q2/k40/d32/causal1/bf16/kve4m3",
                          "prefill/b2/hq4/hkv2/q33/k47/d32/causal1/bf16/kve4m3"}) {
    const AttentionProblem e4m3 = Key(key);
    ExpectServed(**lib, e4m3, *KernelConfig::FromKey("fused/bm16/bs32/t2/bf16/st1"));
    if (e4m3.kind == ProblemKind::kDecode) {
      ExpectServed(**lib, e4m3, *KernelConfig::FromKey("fused/bm16/bs32/t2/bf16/st1/skauto"));
    }
  }
}

TEST(CapiBackendTest, ThisBuildsLibraryTakesTheScheduleFlags) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  // Handed to the library, whose CPU backend refuses them itself.
  absl::Status s = (*lib)->CanImplement(Small(), *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1/pingpong"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: cpu: no pingpong or persistent"), std::string::npos) << s;
}

// An older commit's library (version 1) reads the first seven fields of the same struct; a
// config it cannot express never reaches it.
TEST(CapiBackendTest, AVersionOneLibraryIsServedWhatItCanExpress) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V1, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  absl::Status s = (*lib)->CanImplement(Small(), *KernelConfig::FromKey("partial/bm16/bs32/t2/bf16/st1/sk4"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: fake v1 read 1/16/32/2/3/1/4"), std::string::npos) << s;
  for (const char* key : {"fused/bm16/bs32/t1/fp32/st1/pingpong", "fused/bm16/bs32/t1/fp32/st1/persistent",
                          "fused/bm16/bs32/t1/fp32/st1/pingpong/persistent"}) {
    const KernelConfig c = *KernelConfig::FromKey(key);
    std::vector<float> none(1);
    const AttentionBuffers buffers{.q = none.data(), .k = none.data(), .v = none.data(), .o = none.data()};
    for (absl::Status refused : {(*lib)->CanImplement(Small(), c), (*lib)->Run(Small(), c, buffers),
                                 (*lib)->Time(Small(), c, buffers, TimingOptions{}).status()}) {
      EXPECT_TRUE(absl::IsUnimplemented(refused)) << key << ": " << refused;
      EXPECT_NE(refused.message().find("the C ABI (version 1) has no pingpong or persistent schedule"),
                std::string::npos)
          << refused;
      EXPECT_EQ(refused.message().find("C ABI library"), std::string::npos) << refused;
    }
  }
}

// A library from before the KV-cache and e4m3 calls is not told a problem it would misread: the
// plain calls would run a decode problem as a prefill and read a page pool or e4m3 bytes as
// contiguous K/V of the dtype. A planned split reaches it as split_kv 0, which it refuses itself.
TEST(CapiBackendTest, ALibraryWithoutTheKvCacheCallsIsToldOnlyWhatItCanRead) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V1, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  std::vector<float> none(1);
  const AttentionBuffers buffers{.q = none.data(), .k = none.data(), .v = none.data(), .o = none.data()};
  struct Case {
    const char* key;
    const char* why;
  };
  for (const Case& k : {Case{"decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32", "a decode problem cannot be served"},
                        Case{"decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32/page16", "a paged problem cannot be served"},
                        Case{"prefill/b2/hq4/hkv2/q24/k88/d32/causal1/fp32/page16/prefix4",
                             "a paged problem cannot be served"},
                        Case{"prefill/b2/hq4/hkv2/q33/k47/d32/causal1/bf16/kve4m3",
                             "no fusetune_*_kv_quant functions: K/V stored as e4m3 cannot be served"}}) {
    const AttentionProblem p = Key(k.key);
    for (absl::Status refused : {(*lib)->CanImplement(p, c), (*lib)->Run(p, c, buffers),
                                 (*lib)->Time(p, c, buffers, TimingOptions{}).status()}) {
      EXPECT_TRUE(absl::IsUnimplemented(refused)) << k.key << ": " << refused;
      EXPECT_NE(refused.message().find(k.why), std::string::npos) << refused;
      EXPECT_EQ(refused.message().find("C ABI library:"), std::string::npos) << refused;
    }
  }
  absl::Status s = (*lib)->CanImplement(Small(), *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1/skauto"));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("C ABI library: fake v1 read 0/16/32/1/0/1/0"), std::string::npos) << s;
  // A varlen prefill needs nothing the first calls lack.
  s = (*lib)->CanImplement(Varlen(), c);
  EXPECT_NE(s.message().find("C ABI library: fake v1 read"), std::string::npos) << s;
}

// The scratch calls reach the library: its arena size is this build's backend's, and a run with
// its scratch in an arena (NaN to begin with) verifies; the e4m3 and paged forms are sized too.
TEST(CapiBackendTest, ScratchArenaCallsReachTheLibrary) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_TRUE((*lib)->UseScratchArena(nullptr, 0).ok());
  for (const char* key : {"prefill/b2/hq4/hkv2/q33/k47/d32/causal1/fp32",
                          "decode/b2/hq4/hkv2/q1/k70/d32/causal1/fp32/page16",
                          "prefill/b2/hq4/hkv2/q33/k47/d32/causal1/bf16/kve4m3"}) {
    const AttentionProblem p = Key(key);
    const KernelConfig c = *KernelConfig::FromKey("materialized/bm16/bs32/t2/fp32/st1");
    absl::StatusOr<size_t> bytes = (*lib)->ScratchBytes(p, c);
    ASSERT_TRUE(bytes.ok()) << key << ": " << bytes.status();
    EXPECT_EQ(*bytes, *Cpu()->ScratchBytes(p, c)) << key;
  }
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t2/fp32/st1");
  absl::StatusOr<DeviceMemory> arena = (*lib)->Allocate(*(*lib)->ScratchBytes(Small(), c));
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE((*lib)->Fill(arena->data(), 0xFF, arena->bytes()).ok());
  ASSERT_TRUE((*lib)->UseScratchArena(arena->data(), arena->bytes()).ok());
  ExpectServed(**lib, Small(), c);
  absl::Status too_small = (*lib)->UseScratchArena(arena->data(), 64);
  ASSERT_TRUE(too_small.ok()) << too_small;
  std::vector<float> in(static_cast<size_t>(Small().KVElements() + Small().QElements()));
  const AttentionBuffers buffers{.q = in.data(), .k = in.data(), .v = in.data(), .o = in.data()};
  absl::Status refused = (*lib)->Run(Small(), c, buffers);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("C ABI library: cpu: the scratch arena"), std::string::npos) << refused;
}

TEST(CapiBackendTest, LentWorkersReachTheLibrary) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  std::unique_ptr<Backend> lender = Cpu();
  absl::StatusOr<WorkerPool> pool = lender->LendWorkers();
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*lib)->UseWorkers(&*pool).ok());
  ExpectServed(**lib, Small(), *KernelConfig::FromKey("fused/bm16/bs32/t2/fp32/st1"));
  WorkerPool broken;
  absl::Status refused = (*lib)->UseWorkers(&broken);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE((*lib)->UseWorkers(nullptr).ok());
}

TEST(CapiBackendTest, ALibraryWithoutTheScratchCallsKeepsItsOwnScratch) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V1, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  absl::Status workers = (*lib)->UseWorkers(nullptr);
  EXPECT_TRUE(absl::IsUnimplemented(workers)) << workers;
  EXPECT_NE(workers.message().find("no fusetune_use_workers"), std::string::npos) << workers;
  for (absl::Status s : {(*lib)->UseScratchArena(nullptr, 0),
                         (*lib)->ScratchBytes(Small(), *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1")).status()}) {
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_NE(s.message().find("no fusetune_scratch_bytes and fusetune_use_scratch_arena"), std::string::npos) << s;
  }
}

// Graph timing is asked of the library as each block's options say, and a block says it was
// graphed only where the library's handle agreed to it.
TEST(CapiBackendTest, GraphTimingReachesALibraryThatTakesIt) {
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_FAKE_CAPI_GRAPH, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_TRUE((*lib)->TakesGraphTiming());
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  std::vector<float> none(1);
  const AttentionBuffers buffers{.q = none.data(), .k = none.data(), .v = none.data(), .o = none.data()};
  for (bool graph : {true, false, true}) {
    SCOPED_TRACE(graph ? "graph" : "launch by launch");
    absl::StatusOr<TimingSamples> t = (*lib)->Time(
        Small(), c, buffers, TimingOptions{.warmup = 0, .repeats = 3, .max_seconds = 1, .flush_l2 = false, .graph = graph});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->graphed, graph);
    ASSERT_EQ(t->micros.size(), 3u);
    EXPECT_EQ(t->micros[0], graph ? 20.0 : 10.0) << "what the fake's handle was told";
  }
}

TEST(CapiBackendTest, ALibraryThatCannotTimeThroughAGraphTimesLaunchByLaunch) {
  // This build's library on the CPU: it has the call and refuses it (UNIMPLEMENTED).
  absl::StatusOr<std::unique_ptr<Backend>> lib = OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, Cpu());
  ASSERT_TRUE(lib.ok()) << lib.status();
  EXPECT_FALSE((*lib)->TakesGraphTiming());
  RunnerBlockSource source(
      **lib, "0123abcd",
      TimingOptions{.warmup = 0, .repeats = 3, .max_seconds = 0.1, .flush_l2 = false, .graph = true});
  const KernelConfig c = *KernelConfig::FromKey("fused/bm16/bs32/t1/fp32/st1");
  ASSERT_TRUE(source.Verify(Small(), c).ok());
  absl::StatusOr<SampleBlock> block = source.MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GE(block->samples, 3);
  EXPECT_FALSE(block->graphed);
  // A library from before the call: the same.
  absl::StatusOr<std::unique_ptr<Backend>> old = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V1, "cpu", 0, Cpu());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE((*old)->TakesGraphTiming());
}

TEST(CapiBackendTest, ALibraryOfAnotherVersionIsRefused) {
  absl::Status s = OpenCapiBackend(FUSETUNE_FAKE_CAPI_V3, "cpu", 0, Cpu()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("speaks C ABI version 3"), std::string::npos) << s;
}

TEST(CapiBackendTest, AMissingOrForeignLibraryIsAClearError) {
  EXPECT_TRUE(absl::IsNotFound(OpenCapiBackend("/nonexistent/libfusetune_capi.so", "cpu", 0, Cpu()).status()));
  const std::string text = ::testing::TempDir() + "/not_a_library.so";
  std::ofstream(text) << "not an ELF file\n";
  absl::Status s = OpenCapiBackend(text, "cpu", 0, Cpu()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("cannot load"), std::string::npos) << s;
  std::remove(text.c_str());
  EXPECT_TRUE(absl::IsNotFound(OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "nosuchbackend", 0, Cpu()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(OpenCapiBackend(FUSETUNE_CAPI_LIBRARY, "cpu", 0, nullptr).status()));
}

}  // namespace
}  // namespace fusetune::regress
