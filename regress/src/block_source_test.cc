// RunnerBlockSource over the CPU backend, and ServeBlocks answering the protocol over files.
#include "fusetune/regress/block_source.h"

#include <sched.h>

#include <cstdio>
#include <memory>
#include <string>

#include "fusetune/kernels/backend.h"
#include "gtest/gtest.h"
#include "protocol.h"

namespace fusetune::regress {
namespace {

AttentionProblem Small() {
  absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey("prefill/b1/hq2/hkv2/q32/k32/d32/causal0/fp32");
  return *p;
}

KernelConfig Config(const std::string& key) { return *KernelConfig::FromKey(key); }

std::unique_ptr<Backend> Cpu() { return *CreateBackend("cpu", 0); }

const TimingOptions kBlock{.warmup = 0, .repeats = 3, .max_seconds = 0.1, .flush_l2 = false};

TEST(RunnerBlockSourceTest, VerifiesThenMeasuresBlocks) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "abcdef1", kBlock);
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  EXPECT_TRUE(absl::IsFailedPrecondition(source.MeasureBlock(Small(), c).status()));  // not verified yet
  absl::StatusOr<CellCheck> check = source.Verify(Small(), c);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->outcome, TrialOutcome::kOk) << check->message;
  EXPECT_GT(check->tolerance, 0);
  absl::StatusOr<SampleBlock> block = source.MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GT(block->median_us, 0);
  EXPECT_GE(block->samples, 3);
  EXPECT_EQ(source.Describe()->commit, "abcdef1");
}

TEST(RunnerBlockSourceTest, SaysWhichCellsItCannotRun) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "abcdef1", kBlock);
  std::string why;
  EXPECT_TRUE(*source.CanRun(Small(), Config("fused/bm16/bs16/t1/fp32/st1"), &why));
  EXPECT_FALSE(*source.CanRun(Small(), Config("fused/bm16/bs16/t1/fp32/st1/sk2"), &why));
  EXPECT_NE(why.find("split_kv"), std::string::npos) << why;
  EXPECT_FALSE(*source.CanRun(Small(), Config("fused/bm16/bs16/t1/fp32/st1/pingpong"), &why));
  EXPECT_NE(why.find("pingpong"), std::string::npos) << why;
}

TEST(RunnerBlockSourceTest, APinnedBlockRestoresTheThreadsAffinity) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &before)) ++cpu;
  std::unique_ptr<Backend> backend = Cpu();
  RunnerBlockSource source(*backend, "abcdef1", kBlock, RunnerOptions{}, cpu);
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  ASSERT_TRUE(source.Verify(Small(), c).ok());
  ASSERT_TRUE(source.MeasureBlock(Small(), c).ok());
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

// Writes `requests` to a file, serves it, returns the replies.
std::string Serve(BlockSource& source, const std::string& requests, absl::Status* status,
                  const SideOpener& opener = {}) {
  std::FILE* in = std::tmpfile();
  std::FILE* out = std::tmpfile();
  std::fputs(requests.c_str(), in);
  std::rewind(in);
  *status = ServeBlocks(source, in, out, opener);
  std::rewind(out);
  std::string replies;
  for (int c; (c = std::fgetc(out)) != EOF;) replies.push_back(static_cast<char>(c));
  std::fclose(in);
  std::fclose(out);
  return replies;
}

TEST(ServeBlocksTest, AnswersHelloCanRunVerifyAndBlockAndSurvivesMalformedRequests) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "ABCDEF1234567890abcdef1234567890abcdef12", kBlock);
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  const std::string requests = "not json\n" + protocol::RequestLine(protocol::Op::kCanRun, Small(), c) + "\n" +
                               protocol::RequestLine(protocol::Op::kVerify, Small(), c) + "\n" +
                               R"({"op":"frobnicate"})" "\n" +
                               protocol::RequestLine(protocol::Op::kBlock, Small(), c) + "\n" +
                               protocol::RequestLine(protocol::Op::kQuit, Small(), c) + "\n" +
                               protocol::RequestLine(protocol::Op::kBlock, Small(), c) + "\n";
  absl::Status status;
  const std::string replies = Serve(source, requests, &status);
  EXPECT_TRUE(status.ok()) << status;
  std::vector<std::string> lines;
  for (size_t at = 0, next; (next = replies.find('\n', at)) != std::string::npos; at = next + 1) {
    lines.push_back(replies.substr(at, next - at));
  }
  ASSERT_EQ(lines.size(), 6u) << replies;  // hello + 5 replies; nothing after quit
  absl::StatusOr<SourceInfo> hello = protocol::ParseHello(lines[0]);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->commit, "abcdef123456");  // the canonical form of the commit the build reports
  EXPECT_EQ(hello->device.backend, "cpu");
  EXPECT_TRUE(absl::IsUnavailable(protocol::ParseCheck(lines[1]).status()));  // the malformed line's error
  std::string why;
  EXPECT_TRUE(*protocol::ParseCanRun(lines[2], &why));
  absl::StatusOr<CellCheck> check = protocol::ParseCheck(lines[3]);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->outcome, TrialOutcome::kOk);
  EXPECT_NE(lines[4].find("unknown op"), std::string::npos) << lines[4];
  absl::StatusOr<SampleBlock> block = protocol::ParseBlock(lines[5]);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_GT(block->median_us, 0);
}

// Records the buffers each call is given, and answers for one device class; takes a scratch
// arena and lent worker threads only when `takes_arena` (recording the arena each timed block
// ran in, and the pool last lent).
class RecordingBackend : public Backend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner, std::string device_class = "", bool takes_arena = false)
      : inner_(std::move(inner)), device_class_(std::move(device_class)), takes_arena_(takes_arena) {}
  DeviceInfo Describe() const override {
    DeviceInfo d = inner_->Describe();
    if (!device_class_.empty()) d.name = device_class_;
    return d;
  }
  absl::Status CanImplement(const AttentionProblem& p, const KernelConfig& c) const override {
    return inner_->CanImplement(p, c);
  }
  std::vector<KernelConfig> CandidateConfigs(const AttentionProblem& p) const override {
    return inner_->CandidateConfigs(p);
  }
  absl::Status Run(const AttentionProblem& p, const KernelConfig& c, const AttentionBuffers& b) override {
    ++runs;
    return inner_->Run(p, c, b);
  }
  absl::StatusOr<TimingSamples> Time(const AttentionProblem& p, const KernelConfig& c, const AttentionBuffers& b,
                                     const TimingOptions& o) override {
    timed_q.push_back(b.q);
    timed_arena.push_back(arena_);
    return inner_->Time(p, c, b, o);
  }
  absl::StatusOr<size_t> ScratchBytes(const AttentionProblem& p, const KernelConfig& c) const override {
    return takes_arena_ ? inner_->ScratchBytes(p, c) : Backend::ScratchBytes(p, c);
  }
  absl::Status UseScratchArena(void* base, size_t bytes) override {
    if (!takes_arena_) return Backend::UseScratchArena(base, bytes);
    arena_ = base;
    return inner_->UseScratchArena(base, bytes);
  }
  absl::StatusOr<WorkerPool> LendWorkers() override { return inner_->LendWorkers(); }
  absl::Status UseWorkers(const WorkerPool* pool) override {
    if (!takes_arena_) return Backend::UseWorkers(pool);
    workers = pool == nullptr ? nullptr : pool->context;
    return inner_->UseWorkers(pool);
  }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override {
    ++allocations;
    return inner_->Allocate(bytes);
  }
  absl::Status CopyToDevice(void* d, const void* s, size_t n) override { return inner_->CopyToDevice(d, s, n); }
  absl::Status CopyToHost(void* d, const void* s, size_t n) override { return inner_->CopyToHost(d, s, n); }
  absl::Status Fill(void* d, uint8_t v, size_t n) override { return inner_->Fill(d, v, n); }
  // `state`, its clock one MHz higher at every reading.
  DeviceState CurrentDeviceState() const override {
    DeviceState now = state;
    if (now.known) now.sm_clock_mhz += readings++;
    return now;
  }

  DeviceState state;  // what CurrentDeviceState reads (unknown by default)
  mutable int readings = 0;
  int runs = 0;
  int allocations = 0;
  std::vector<const void*> timed_q;
  std::vector<const void*> timed_arena;  // null: its own scratch
  const void* workers = nullptr;         // the lent pool's context (takes_arena only), null: its own

 private:
  std::unique_ptr<Backend> inner_;
  std::string device_class_;
  bool takes_arena_;
  void* arena_ = nullptr;
};

TEST(RunnerBlockSourceTest, ASideIsVerifiedOnItsOwnAndTimedOnTheSameInputs) {
  RecordingBackend own(Cpu());
  RunnerBlockSource source(own, "abcdef1", kBlock);
  auto other = std::make_unique<RecordingBackend>(Cpu());
  RecordingBackend* other_kernels = other.get();
  absl::StatusOr<BlockSource*> side = source.AddSide(std::move(other), "0123456789ab");
  ASSERT_TRUE(side.ok()) << side.status();
  EXPECT_EQ(source.sides(), 2u);
  EXPECT_EQ(source.side(1), *side);
  EXPECT_EQ(source.side(0), &source);
  EXPECT_EQ(source.side(2), nullptr);
  EXPECT_EQ((*side)->Describe()->commit, "0123456789ab");
  EXPECT_EQ(source.Describe()->commit, "abcdef1");
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  ASSERT_EQ(source.Verify(Small(), c)->outcome, TrialOutcome::kOk);
  // Verified on the own kernels only: the side has not checked its own yet.
  EXPECT_TRUE(absl::IsFailedPrecondition((*side)->MeasureBlock(Small(), c).status()));
  EXPECT_EQ(other_kernels->runs, 0);
  ASSERT_EQ((*side)->Verify(Small(), c)->outcome, TrialOutcome::kOk);
  EXPECT_GT(other_kernels->runs, 0) << "the side's verification ran the side's kernels";
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(source.MeasureBlock(Small(), c).ok());
    ASSERT_TRUE((*side)->MeasureBlock(Small(), c).ok());
  }
  // Every block of both sides read the one set of inputs, made through the own backend.
  ASSERT_FALSE(own.timed_q.empty());
  ASSERT_FALSE(other_kernels->timed_q.empty());
  for (const void* q : other_kernels->timed_q) EXPECT_EQ(q, own.timed_q.front());
  for (const void* q : own.timed_q) EXPECT_EQ(q, own.timed_q.front());
  EXPECT_EQ(other_kernels->allocations, 0);
}

// Measures every cell of `keys` on Small() on every source, a few rounds.
void MeasureOnAll(const std::vector<BlockSource*>& sources, const std::vector<const char*>& keys) {
  for (const char* key : keys) {
    const KernelConfig c = Config(key);
    for (BlockSource* s : sources) ASSERT_EQ(s->Verify(Small(), c)->outcome, TrialOutcome::kOk) << key;
    for (int round = 0; round < 2; ++round) {
      for (BlockSource* s : sources) ASSERT_TRUE(s->MeasureBlock(Small(), c).ok()) << key;
    }
  }
}

TEST(RunnerBlockSourceTest, SidesShareOneArenaAndTheOwnThreadsWhenAllTakeThem) {
  RecordingBackend own(Cpu(), "", /*takes_arena=*/true);
  RunnerBlockSource source(own, "abcdef1", kBlock);
  EXPECT_FALSE(source.Describe()->shared_scratch) << "a source alone keeps its own scratch";
  auto taking = std::make_unique<RecordingBackend>(Cpu(), "", /*takes_arena=*/true);
  RecordingBackend* taking_kernels = taking.get();
  BlockSource* taking_side = *source.AddSide(std::move(taking), "0123456789ab");
  EXPECT_TRUE(source.Describe()->shared_scratch);
  EXPECT_TRUE(taking_side->Describe()->shared_scratch);
  // A small cell, then one whose S/P workspace grows the arena: the sides still meet in one.
  MeasureOnAll({&source, taking_side}, {"fused/bm16/bs16/t1/fp32/st1", "materialized/bm16/bs16/t2/fp32/st1"});
  ASSERT_FALSE(own.timed_arena.empty());
  ASSERT_EQ(own.timed_arena.size(), taking_kernels->timed_arena.size());
  for (size_t i = 0; i < own.timed_arena.size(); ++i) {
    EXPECT_NE(own.timed_arena[i], nullptr);
    EXPECT_EQ(own.timed_arena[i], taking_kernels->timed_arena[i]);
  }
  EXPECT_NE(own.timed_arena.front(), own.timed_arena.back()) << "the materialized cell grew the arena";
  // And the own backend's threads, lent to every side (the own included).
  ASSERT_NE(own.workers, nullptr);
  EXPECT_EQ(taking_kernels->workers, own.workers);
  EXPECT_TRUE(taking_side->Describe()->shared_workers);
}

TEST(RunnerBlockSourceTest, OneSideThatKeepsItsOwnScratchPutsEverySideOnItsOwn) {
  RecordingBackend own(Cpu(), "", /*takes_arena=*/true);
  RunnerBlockSource source(own, "abcdef1", kBlock);
  auto taking = std::make_unique<RecordingBackend>(Cpu(), "", /*takes_arena=*/true);
  RecordingBackend* taking_kernels = taking.get();
  BlockSource* taking_side = *source.AddSide(std::move(taking), "0123456789ab");
  MeasureOnAll({&source, taking_side}, {"fused/bm16/bs16/t1/fp32/st1"});
  ASSERT_NE(taking_kernels->timed_arena.back(), nullptr);
  // An older library: neither the arena nor the threads, for anyone, from now on.
  BlockSource* keeping_side =
      *source.AddSide(std::make_unique<RecordingBackend>(Cpu(), "", /*takes_arena=*/false), "0123456789ac");
  for (BlockSource* s : {static_cast<BlockSource*>(&source), taking_side, keeping_side}) {
    EXPECT_FALSE(s->Describe()->shared_scratch);
    EXPECT_FALSE(s->Describe()->shared_workers);
  }
  const size_t before = taking_kernels->timed_arena.size();
  MeasureOnAll({&source, taking_side, keeping_side}, {"fused/bm16/bs16/t1/fp32/st1"});
  ASSERT_GT(taking_kernels->timed_arena.size(), before);
  for (size_t i = before; i < taking_kernels->timed_arena.size(); ++i) EXPECT_EQ(taking_kernels->timed_arena[i], nullptr);
  EXPECT_EQ(own.timed_arena.back(), nullptr);
  EXPECT_EQ(taking_kernels->workers, nullptr);
}

TEST(RunnerBlockSourceTest, ASideWhoseTimingReportsNoDeviceStateGetsTheOwnBackendsReading) {
  RecordingBackend own(Cpu());
  own.state = DeviceState{.known = true, .sm_clock_mhz = 1900, .power_mw = 650000, .throttle_reasons = 4};
  RunnerBlockSource source(own, "abcdef1", kBlock);
  BlockSource* side = *source.AddSide(std::make_unique<RecordingBackend>(Cpu()), "0123456789ab");
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  ASSERT_EQ(side->Verify(Small(), c)->outcome, TrialOutcome::kOk);
  const int readings = own.readings;
  absl::StatusOr<SampleBlock> block = side->MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(own.readings, readings + 2) << "read before and after the side's block";
  ASSERT_TRUE(block->before.known);
  ASSERT_TRUE(block->after.known);
  EXPECT_EQ(block->before.power_mw, 650000);
  EXPECT_EQ(block->before.throttle_reasons, 4u);
  EXPECT_EQ(block->after.sm_clock_mhz, block->before.sm_clock_mhz + 1);
  // A device that cannot be read leaves the block's state unknown, as before.
  RecordingBackend blind(Cpu());
  RunnerBlockSource plain(blind, "abcdef1", kBlock);
  BlockSource* plain_side = *plain.AddSide(std::make_unique<RecordingBackend>(Cpu()), "0123456789ab");
  ASSERT_EQ(plain_side->Verify(Small(), c)->outcome, TrialOutcome::kOk);
  block = plain_side->MeasureBlock(Small(), c);
  ASSERT_TRUE(block.ok());
  EXPECT_FALSE(block->before.known);
}

TEST(RunnerBlockSourceTest, ASideOfAnotherDeviceClassOrNoneIsRefused) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "abcdef1", kBlock);
  EXPECT_TRUE(absl::IsInvalidArgument(source.AddSide(nullptr, "abcdef1").status()));
  absl::StatusOr<BlockSource*> elsewhere =
      source.AddSide(std::make_unique<RecordingBackend>(Cpu(), "another device"), "abcdef1");
  EXPECT_TRUE(absl::IsInvalidArgument(elsewhere.status())) << elsewhere.status();
  EXPECT_EQ(source.sides(), 1u);
}

TEST(ServeBlocksTest, OpensSidesAndRoutesRequestsByTheirSide) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "abcdef1", kBlock);
  RecordingBackend* opened_kernels = nullptr;
  std::string opened_library, opened_commit;
  bool opened_planted = false;
  const SideOpener opener = [&](const std::string& library, const std::string& commit,
                                bool planted) -> absl::StatusOr<BlockSource*> {
    if (library == "missing.so") return absl::NotFoundError("no library at missing.so");
    opened_library = library;
    opened_commit = commit;
    opened_planted = planted;
    auto kernels = std::make_unique<RecordingBackend>(Cpu());
    opened_kernels = kernels.get();
    return source.AddSide(std::move(kernels), commit);
  };
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  const std::string requests = protocol::OpenSideLine("missing.so", "0123456789ab", false) + "\n" +
                               protocol::OpenSideLine("lib/libfusetune_capi.so", "0123456789AB", true) + "\n" +
                               protocol::RequestLine(protocol::Op::kVerify, Small(), c, 1) + "\n" +
                               protocol::RequestLine(protocol::Op::kBlock, Small(), c, 1) + "\n" +
                               protocol::RequestLine(protocol::Op::kBlock, Small(), c, 2) + "\n" +
                               protocol::RequestLine(protocol::Op::kBlock, Small(), c) + "\n";
  absl::Status status;
  const std::string replies = Serve(source, requests, &status, opener);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;  // the last request's, below
  std::vector<std::string> lines;
  for (size_t at = 0, next; (next = replies.find('\n', at)) != std::string::npos; at = next + 1) {
    lines.push_back(replies.substr(at, next - at));
  }
  ASSERT_EQ(lines.size(), 7u) << replies;
  EXPECT_NE(lines[1].find("no library at missing.so"), std::string::npos) << lines[1];
  EXPECT_EQ(protocol::ParseOpenSide(lines[2])->side, 1);
  EXPECT_EQ(opened_library, "lib/libfusetune_capi.so");
  EXPECT_EQ(opened_commit, "0123456789ab");  // canonical
  EXPECT_TRUE(opened_planted);
  ASSERT_NE(opened_kernels, nullptr);
  EXPECT_EQ(protocol::ParseCheck(lines[3])->outcome, TrialOutcome::kOk);
  EXPECT_TRUE(protocol::ParseBlock(lines[4]).ok()) << lines[4];
  EXPECT_FALSE(opened_kernels->timed_q.empty()) << "side 1's block ran side 1's kernels";
  EXPECT_NE(lines[5].find("no side 2"), std::string::npos) << lines[5];
  // Side 0 was never verified: its block is the source's error, which ends serving.
  EXPECT_NE(lines[6].find("was not verified"), std::string::npos) << lines[6];
}

TEST(ServeBlocksTest, WithoutAnOpenerOpenSideIsAnErrorAndServingGoesOn) {
  std::unique_ptr<Backend> cpu = Cpu();
  RunnerBlockSource source(*cpu, "abcdef1", kBlock);
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  absl::Status status;
  const std::string replies = Serve(source,
                                    protocol::OpenSideLine("lib.so", "abcdef123456", false) + "\n" +
                                        protocol::RequestLine(protocol::Op::kCanRun, Small(), c) + "\n",
                                    &status);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_NE(replies.find("opens no sides"), std::string::npos) << replies;
  EXPECT_NE(replies.find("\"can_run\":true"), std::string::npos) << replies;
}

TEST(ProtocolTest, SidesAndOpenSideRoundTripAndBadOnesAreRefused) {
  const KernelConfig c = Config("fused/bm16/bs16/t1/fp32/st1");
  EXPECT_EQ(protocol::RequestLine(protocol::Op::kBlock, Small(), c).find("side"), std::string::npos)
      << "side 0 is left out, for children older than sides";
  absl::StatusOr<protocol::Request> r = protocol::ParseRequest(protocol::RequestLine(protocol::Op::kBlock, Small(), c, 3));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->side, 3);
  r = protocol::ParseRequest(protocol::OpenSideLine("/a/libfusetune_capi.so", "ABCDEF1234567", false));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->op, protocol::Op::kOpenSide);
  EXPECT_EQ(r->library, "/a/libfusetune_capi.so");
  EXPECT_EQ(r->commit, "abcdef123456");
  EXPECT_FALSE(r->planted);
  for (const char* bad : {R"({"op":"open_side","commit":"abcdef1"})", R"({"op":"open_side","library":"","commit":"abcdef1"})",
                          R"({"op":"open_side","library":"x.so","commit":"not a commit!"})",
                          R"({"op":"open_side","library":"x.so","commit":"abcdef1","planted":"yes"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(protocol::ParseRequest(bad).status())) << bad;
  }
  std::string line = protocol::RequestLine(protocol::Op::kBlock, Small(), c);
  line.insert(line.size() - 1, R"(,"side":-1)");
  EXPECT_TRUE(absl::IsInvalidArgument(protocol::ParseRequest(line).status())) << line;
  EXPECT_TRUE(absl::IsUnavailable(protocol::ParseOpenSide(R"({"side":0})").status()));
  EXPECT_TRUE(protocol::ParseOpenSide(R"({"side":1,"shared_scratch":true})")->shared_scratch);
  EXPECT_TRUE(protocol::ParseOpenSide(R"({"side":1,"shared_workers":true})")->shared_workers);
  EXPECT_TRUE(absl::IsUnavailable(protocol::ParseOpenSide(R"({"side":1,"shared_workers":1})").status()));
  EXPECT_FALSE(protocol::ParseOpenSide(R"({"side":1})")->shared_scratch) << "an older child does not say";
  EXPECT_TRUE(absl::IsUnavailable(protocol::ParseOpenSide(R"({"side":1,"shared_scratch":"yes"})").status()));
  EXPECT_TRUE(absl::IsUnavailable(protocol::ParseOpenSide(R"({"error":"cannot load x.so"})").status()));
}

TEST(ProtocolTest, ARequestRoundTripsItsProblemAndConfig) {
  AttentionProblem p = Small();
  p.batch = 2;
  p.cu_seqlens_q = {0, 5, 32};
  p.cu_seqlens_k = {0, 7, 40};
  p.q_len = 27;
  p.kv_len = 33;
  const KernelConfig c = Config("partial/bm32/bs16/t2/fp32/st1");
  absl::StatusOr<protocol::Request> r = protocol::ParseRequest(protocol::RequestLine(protocol::Op::kVerify, p, c));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->op, protocol::Op::kVerify);
  EXPECT_EQ(r->problem.Key(), p.Key());
  EXPECT_EQ(r->problem.cu_seqlens_k, p.cu_seqlens_k);
  EXPECT_EQ(r->config.Key(), c.Key());
  EXPECT_FALSE(protocol::ParseRequest(R"({"op":"verify","problem":"prefill/b1","config":"x"})").ok());
}

// A block measured by a child comes back saying whether it was timed through a graph; a reply
// without the word (a child from before it) reads as not graphed.
TEST(ProtocolTest, ABlockCarriesWhetherItWasGraphed) {
  SampleBlock block;
  block.samples = 20;
  block.median_us = 14.5;
  block.graphed = true;
  absl::StatusOr<SampleBlock> back = protocol::ParseBlock(protocol::BlockToJson(block).dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->graphed);
  EXPECT_EQ(back->median_us, 14.5);
  block.graphed = false;
  back = protocol::ParseBlock(protocol::BlockToJson(block).dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->graphed);
  back = protocol::ParseBlock(R"({"block":[{"n":20,"us":14.5,"u":false}]})");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->graphed);
}

TEST(ProcessBlockSourceTest, AMissingBinaryIsUnavailable) {
  ProcessOptions options;
  options.binary = "/nonexistent/fusetune";
  EXPECT_TRUE(absl::IsUnavailable(ProcessBlockSource::Start(options).status()));
}

TEST(ProcessBlockSourceTest, ABinaryThatDoesNotSpeakTheProtocolIsUnavailableWithItsOutput) {
  ProcessOptions options;
  options.binary = "/bin/echo";  // prints its arguments and exits
  absl::StatusOr<std::unique_ptr<ProcessBlockSource>> source = ProcessBlockSource::Start(options);
  EXPECT_TRUE(absl::IsUnavailable(source.status())) << source.status();
  EXPECT_NE(source.status().message().find("does not serve bench blocks"), std::string::npos) << source.status();
}

}  // namespace
}  // namespace fusetune::regress
