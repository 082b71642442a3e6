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
std::string Serve(BlockSource& source, const std::string& requests, absl::Status* status) {
  std::FILE* in = std::tmpfile();
  std::FILE* out = std::tmpfile();
  std::fputs(requests.c_str(), in);
  std::rewind(in);
  *status = ServeBlocks(source, in, out);
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
