#include "fusetune/worker/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <zlib.h>

namespace fusetune {
namespace {

Trial MakeTrial(int64_t run, int i) {
  Trial t;
  t.run_id = run;
  t.problem_key = "prefill/b1/hq2/hkv2/q64/k64/d64/causal0/fp32";
  t.config_key = "fused/bm16/bs" + std::to_string(16 * (i + 1)) + "/t1/fp32/st1";
  t.attempt = 0;
  t.trial_id = TrialId(run, t.problem_key, t.config_key, 0);
  t.outcome = i % 2 ? TrialOutcome::kOk : TrialOutcome::kUnsupported;
  t.message = i % 2 ? "" : "no \xff utf8";
  t.samples_us = {1.5 + i, 2.25, 3.0 / 7.0};
  t.median_us = 2.25;
  t.p10_us = 1.0 / 3.0;
  t.p90_us = 3.5;
  t.max_abs_error = 1e-7;
  t.max_rel_error = 2.5e-6;
  t.checked_elements = 8192;
  t.sm_clock_mhz = 1980;
  t.flops = 1.234e9;
  t.created_unix_ms = 1764400000000 + i;
  return t;
}

class SpoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spool_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "spool.log").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(SpoolTest, PendingTrialsSurviveReopenWithEveryFieldIntact) {
  {
    auto spool = TrialSpool::Open(path_);
    ASSERT_TRUE(spool.ok()) << spool.status();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(5, i)).ok());
  }
  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok()) << spool.status();
  std::vector<Trial> pending = (*spool)->Pending(100);
  ASSERT_EQ(pending.size(), 3u);
  Trial want = MakeTrial(5, 1);
  const Trial& got = pending[1];
  EXPECT_EQ(got.trial_id, want.trial_id);
  EXPECT_EQ(got.config_key, want.config_key);
  EXPECT_EQ(got.outcome, want.outcome);
  EXPECT_EQ(got.samples_us, want.samples_us);  // exact doubles round-trip
  EXPECT_EQ(got.p10_us, want.p10_us);
  EXPECT_EQ(got.checked_elements, want.checked_elements);
  EXPECT_EQ(got.created_unix_ms, want.created_unix_ms);
  EXPECT_EQ(pending[0].outcome, TrialOutcome::kUnsupported);
}

Trial MakeFinalTrial(int64_t run) {
  Trial t = MakeTrial(run, 1);
  t.stage = TrialStage::kFinal;
  t.attempt = 1;
  t.trial_id = TrialId(run, t.problem_key, t.config_key, 1, TrialStage::kFinal);
  for (int i = 0; i < 2; ++i) {
    SampleBlock b;
    b.samples = 20 + i;
    b.median_us = 2.0 + 1.0 / 3.0 + i;
    b.before = {.known = true, .sm_clock_mhz = 1980, .power_mw = 640123, .throttle_reasons = 0};
    b.after = {.known = true, .sm_clock_mhz = 1755, .power_mw = 690001, .throttle_reasons = uint64_t{1} << 40};
    b.unsteady = i == 1;
    t.blocks.push_back(b);
  }
  t.wall_seconds = 0.1 + 1.0 / 7.0;
  return t;
}

TEST_F(SpoolTest, StageBlocksAndWallSecondsSurviveReopen) {
  const Trial want = MakeFinalTrial(5);
  {
    auto spool = TrialSpool::Open(path_);
    ASSERT_TRUE(spool.ok()) << spool.status();
    ASSERT_TRUE((*spool)->RecordTrial(want).ok());
  }
  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok()) << spool.status();
  std::vector<Trial> pending = (*spool)->Pending(100);
  ASSERT_EQ(pending.size(), 1u);
  const Trial& got = pending[0];
  EXPECT_EQ(got.trial_id, want.trial_id);
  EXPECT_EQ(got.stage, TrialStage::kFinal);
  EXPECT_EQ(got.wall_seconds, want.wall_seconds);  // exact double
  ASSERT_EQ(got.blocks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got.blocks[i].samples, want.blocks[i].samples);
    EXPECT_EQ(got.blocks[i].median_us, want.blocks[i].median_us);
    EXPECT_EQ(got.blocks[i].before.known, true);
    EXPECT_EQ(got.blocks[i].before.sm_clock_mhz, 1980);
    EXPECT_EQ(got.blocks[i].before.power_mw, 640123);
    EXPECT_EQ(got.blocks[i].after.sm_clock_mhz, 1755);
    EXPECT_EQ(got.blocks[i].after.throttle_reasons, uint64_t{1} << 40);
    EXPECT_EQ(got.blocks[i].unsteady, want.blocks[i].unsteady);
  }
}

// A trial record of the older spool format: no stage, blocks or wall time.
constexpr char kOldTrialJson[] =
    R"({"attempt":0,"checked_elements":8192,"config_key":"fused/bm16/bs32/t1/fp32/st1",)"
    R"("created_unix_ms":1764400000001,"flops":1234000000.0,"max_abs_error":1e-07,)"
    R"("max_rel_error":2.5e-06,"median_us":2.25,"message":"","outcome":"ok","p10_us":0.3333333333333333,)"
    R"("p90_us":3.5,"problem_key":"prefill/b1/hq2/hkv2/q64/k64/d64/causal0/fp32","run_id":5,)"
    R"("samples_us":[2.5,2.25,0.42857142857142855],"sm_clock_mhz":1980,)"
    R"("trial_id":"0123456789abcdef0123456789abcdef"})";

TEST(SpoolJson, TrialWrittenBeforeStagesReadsAsScreenWithoutBlocks) {
  absl::StatusOr<Trial> t = TrialFromJson(kOldTrialJson);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->stage, TrialStage::kScreen);
  EXPECT_TRUE(t->blocks.empty());
  EXPECT_EQ(t->wall_seconds, 0.0);
  EXPECT_EQ(t->median_us, 2.25);
  EXPECT_EQ(t->samples_us.size(), 3u);
}

TEST_F(SpoolTest, SpoolFileWrittenBeforeStagesStillReplays) {
  // One trial record in the spool's framing: u32 length, u32 CRC-32 of type byte + payload,
  // u8 type (1 = trial), payload; little-endian.
  const std::string payload = kOldTrialJson;
  const unsigned char type = 1;
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, &type, 1);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  std::string record;
  for (uint32_t v : {static_cast<uint32_t>(payload.size()), static_cast<uint32_t>(crc)}) {
    for (int i = 0; i < 4; ++i) record.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  record.push_back(static_cast<char>(type));
  record += payload;
  {
    FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(record.data(), 1, record.size(), f), record.size());
    std::fclose(f);
  }
  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok()) << spool.status();
  std::vector<Trial> pending = (*spool)->Pending(100);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].trial_id, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(pending[0].stage, TrialStage::kScreen);
  EXPECT_TRUE(pending[0].blocks.empty());
  EXPECT_EQ(pending[0].wall_seconds, 0.0);
}

TEST_F(SpoolTest, AcknowledgedTrialsAreNoLongerPendingAfterReopen) {
  {
    auto spool = TrialSpool::Open(path_);
    ASSERT_TRUE(spool.ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, i)).ok());
    std::vector<std::string> ids = {MakeTrial(1, 0).trial_id, MakeTrial(1, 2).trial_id, "unknown"};
    ASSERT_TRUE((*spool)->Acknowledge(ids).ok());
    EXPECT_EQ((*spool)->pending_count(), 2u);
  }
  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok());
  std::vector<Trial> pending = (*spool)->Pending(100);
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].trial_id, MakeTrial(1, 1).trial_id);
  EXPECT_EQ(pending[1].trial_id, MakeTrial(1, 3).trial_id);
  EXPECT_EQ((*spool)->TrialsForRun(1).size(), 4u);  // history kept for resume
}

TEST_F(SpoolTest, RecordingTheSameTrialTwiceWritesItOnce) {
  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok());
  ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, 0)).ok());
  ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, 0)).ok());
  EXPECT_EQ((*spool)->pending_count(), 1u);
  auto log = ReadSpoolLog(path_);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->appended.size(), 1u);
}

TEST_F(SpoolTest, TornTailIsTruncatedAndEarlierTrialsKept) {
  {
    auto spool = TrialSpool::Open(path_);
    ASSERT_TRUE(spool.ok());
    ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, 0)).ok());
    ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, 1)).ok());
  }
  const auto full = std::filesystem::file_size(path_);
  // Simulate a crash in the middle of the second record's write.
  std::filesystem::resize_file(path_, full - 10);
  auto log = ReadSpoolLog(path_);
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(log->torn_tail);
  EXPECT_EQ(log->appended.size(), 1u);

  auto spool = TrialSpool::Open(path_);
  ASSERT_TRUE(spool.ok());
  EXPECT_EQ((*spool)->pending_count(), 1u);
  // Appends after the repair are readable.
  ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, 2)).ok());
  auto log2 = ReadSpoolLog(path_);
  ASSERT_TRUE(log2.ok());
  EXPECT_FALSE(log2->torn_tail);
  ASSERT_EQ(log2->appended.size(), 2u);
  EXPECT_EQ(log2->appended[1].trial_id, MakeTrial(1, 2).trial_id);
}

TEST_F(SpoolTest, CorruptedByteStopsReplayAtThatRecord) {
  {
    auto spool = TrialSpool::Open(path_);
    ASSERT_TRUE(spool.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, i)).ok());
  }
  auto before = ReadSpoolLog(path_);
  ASSERT_TRUE(before.ok());
  // Flip a byte inside the last record's payload.
  int fd = ::open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  off_t off = static_cast<off_t>(std::filesystem::file_size(path_) - 5);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, off), 1);
  c ^= 0x5A;
  ASSERT_EQ(::pwrite(fd, &c, 1, off), 1);
  ::close(fd);
  auto log = ReadSpoolLog(path_);
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(log->torn_tail);
  EXPECT_EQ(log->appended.size(), 2u);
}

TEST_F(SpoolTest, CompactsWhenNothingIsPending) {
  auto spool = TrialSpool::Open(path_, {.compact_bytes = 512, .sync = true});
  ASSERT_TRUE(spool.ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(1, i)).ok());
    ids.push_back(MakeTrial(1, i).trial_id);
  }
  ASSERT_GT(std::filesystem::file_size(path_), 512u);
  ASSERT_TRUE((*spool)->Acknowledge(std::span<const std::string>(ids).first(3)).ok());
  EXPECT_GT(std::filesystem::file_size(path_), 512u);  // one still pending: kept
  ASSERT_TRUE((*spool)->Acknowledge(std::span<const std::string>(ids).subspan(3)).ok());
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);
  ASSERT_TRUE((*spool)->RecordTrial(MakeTrial(2, 0)).ok());
  spool->reset();
  auto reopened = TrialSpool::Open(path_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->pending_count(), 1u);
}

TEST_F(SpoolTest, SecondOpenOfTheSameSpoolIsRefusedUntilTheFirstCloses) {
  auto first = TrialSpool::Open(path_);
  ASSERT_TRUE(first.ok());
  auto second = TrialSpool::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  first->reset();
  EXPECT_TRUE(TrialSpool::Open(path_).ok());
}

TEST_F(SpoolTest, MissingDirectoryIsAClearError) {
  auto spool = TrialSpool::Open((dir_ / "no" / "such" / "spool.log").string());
  ASSERT_FALSE(spool.ok());
  EXPECT_NE(spool.status().message().find("no/such"), std::string::npos);
}

// A trial record as the spool wrote it before it used the records' block form: each block's
// fields and device states spelled out.
constexpr char kSpelledOutBlocksTrialJson[] =
    R"({"attempt":0,"blocks":[{"after":{"known":true,"power_mw":600000,"sm_clock_mhz":1755,)"
    R"("throttle_reasons":4},"before":{"known":false,"power_mw":0,"sm_clock_mhz":0,)"
    R"("throttle_reasons":0},"median_us":2.5,"samples":40,"unsteady":true}],)"
    R"("checked_elements":8192,"config_key":"fused/bm16/bs32/t1/fp32/st1",)"
    R"("created_unix_ms":1764400000001,"flops":1234000000.0,"max_abs_error":1e-07,)"
    R"("max_rel_error":2.5e-06,"median_us":2.25,"message":"","outcome":"ok","p10_us":0.3333333333333333,)"
    R"("p90_us":3.5,"problem_key":"prefill/b1/hq2/hkv2/q64/k64/d64/causal0/fp32","run_id":5,)"
    R"("samples_us":[2.5,2.25,0.42857142857142855],"sm_clock_mhz":1980,"stage":"final",)"
    R"("trial_id":"0123456789abcdef0123456789abcdef","wall_seconds":0.5})";

TEST(SpoolJson, TrialWithSpelledOutBlocksStillReads) {
  absl::StatusOr<Trial> t = TrialFromJson(kSpelledOutBlocksTrialJson);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->blocks.size(), 1u);
  const SampleBlock& b = t->blocks[0];
  EXPECT_EQ(b.samples, 40);
  EXPECT_EQ(b.median_us, 2.5);
  EXPECT_TRUE(b.unsteady);
  EXPECT_FALSE(b.before.known);
  EXPECT_TRUE(b.after.known);
  EXPECT_EQ(b.after.sm_clock_mhz, 1755);
  EXPECT_EQ(b.after.power_mw, 600000);
  EXPECT_EQ(b.after.throttle_reasons, 4u);
  EXPECT_EQ(t->stage, TrialStage::kFinal);
}

TEST(SpoolJson, WritesBlocksInTheRecordsFormAndReadsThemBack) {
  absl::StatusOr<Trial> old = TrialFromJson(kSpelledOutBlocksTrialJson);
  ASSERT_TRUE(old.ok()) << old.status();
  const std::string written = TrialToJson(*old);
  // The database's form (records/json.h): compact keys, an unknown state left out.
  EXPECT_NE(written.find(R"("blocks":[{"a":{"mhz":1755,"mw":600000,"thr":4},"n":40,"u":true,"us":2.5}])"),
            std::string::npos)
      << written;
  absl::StatusOr<Trial> back = TrialFromJson(written);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->blocks.size(), 1u);
  EXPECT_EQ(back->blocks[0].samples, 40);
  EXPECT_EQ(back->blocks[0].median_us, 2.5);
  EXPECT_FALSE(back->blocks[0].before.known);
  EXPECT_EQ(back->blocks[0].after.throttle_reasons, 4u);
  EXPECT_EQ(TrialToJson(*back), written);
}

TEST(SpoolJson, RejectsMalformedPayloads) {
  EXPECT_FALSE(TrialFromJson("{").ok());
  EXPECT_FALSE(TrialFromJson("{\"trial_id\": 3}").ok());
  EXPECT_FALSE(TrialFromJson("[]").ok());
  // Present but malformed new keys are corruption, not an old record.
  std::string bad_stage = kOldTrialJson;
  bad_stage.insert(1, R"("stage":"warmup",)");
  EXPECT_FALSE(TrialFromJson(bad_stage).ok());
  std::string bad_block = kOldTrialJson;
  bad_block.insert(1, R"("blocks":[{"samples":3}],)");
  EXPECT_FALSE(TrialFromJson(bad_block).ok());
}

}  // namespace
}  // namespace fusetune
