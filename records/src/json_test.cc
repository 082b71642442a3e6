#include "fusetune/records/json.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(SampleBlocksJson, RoundTripsKnownAndUnknownStates) {
  SampleBlock known;
  known.samples = 25;
  known.median_us = 3.75;
  known.unsteady = true;
  known.before = DeviceState{true, 1980, 640123, uint64_t{1} << 40};
  known.after = DeviceState{true, 1755, 600000, 4};
  SampleBlock unknown;
  unknown.samples = 7;
  unknown.median_us = 0.5;
  const std::string text = SampleBlocksToJson({known, unknown});
  EXPECT_EQ(text,
            R"([{"a":{"mhz":1755,"mw":600000,"thr":4},"b":{"mhz":1980,"mw":640123,"thr":1099511627776},)"
            R"("n":25,"u":true,"us":3.75},{"n":7,"u":false,"us":0.5}])");
  absl::StatusOr<std::vector<SampleBlock>> back = SampleBlocksFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].samples, 25);
  EXPECT_EQ((*back)[0].median_us, 3.75);
  EXPECT_TRUE((*back)[0].unsteady);
  EXPECT_TRUE((*back)[0].before.known);
  EXPECT_EQ((*back)[0].before.throttle_reasons, uint64_t{1} << 40);
  EXPECT_EQ((*back)[0].after.sm_clock_mhz, 1755);
  EXPECT_FALSE((*back)[1].before.known);
  EXPECT_FALSE((*back)[1].after.known);
  EXPECT_EQ(SampleBlocksToJson(*back), text);
}

TEST(SampleBlocksJson, AGraphedBlockSaysSoAndOthersStayAsBefore) {
  SampleBlock graphed;
  graphed.samples = 20;
  graphed.median_us = 12.5;
  graphed.graphed = true;
  SampleBlock launched = graphed;
  launched.graphed = false;
  const std::string text = SampleBlocksToJson({graphed, launched});
  EXPECT_EQ(text, R"([{"g":true,"n":20,"u":false,"us":12.5},{"n":20,"u":false,"us":12.5}])");
  absl::StatusOr<std::vector<SampleBlock>> back = SampleBlocksFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_TRUE((*back)[0].graphed);
  EXPECT_FALSE((*back)[1].graphed);
  EXPECT_EQ(SampleBlocksToJson(*back), text);
}

TEST(SampleBlocksJson, ReadsTheSpoolsSpelledOutForm) {
  absl::StatusOr<std::vector<SampleBlock>> blocks = SampleBlocksFromJson(
      R"([{"samples":40,"median_us":2.5,"unsteady":false,)"
      R"("before":{"known":true,"sm_clock_mhz":1980,"power_mw":640123,"throttle_reasons":0},)"
      R"("after":{"known":false,"sm_clock_mhz":7,"power_mw":7,"throttle_reasons":7}}])");
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  ASSERT_EQ(blocks->size(), 1u);
  EXPECT_EQ((*blocks)[0].samples, 40);
  EXPECT_EQ((*blocks)[0].median_us, 2.5);
  EXPECT_TRUE((*blocks)[0].before.known);
  EXPECT_EQ((*blocks)[0].before.power_mw, 640123);
  // An unknown state's fields mean nothing: it reads back as DeviceState{}.
  EXPECT_FALSE((*blocks)[0].after.known);
  EXPECT_EQ((*blocks)[0].after.sm_clock_mhz, 0);
}

TEST(SampleBlocksJson, RejectsMalformedBlocks) {
  EXPECT_FALSE(SampleBlocksFromJson("{").ok());
  EXPECT_FALSE(SampleBlocksFromJson(R"({"n":1})").ok());
  EXPECT_FALSE(SampleBlocksFromJson(R"([{"n":1,"us":2.0}])").ok());
  EXPECT_FALSE(SampleBlocksFromJson(R"([{"samples":3}])").ok());
}

TEST(TrialJson, RoundTripsTheUnquantisedErrorAndReadsOlderRecordsAsZero) {
  Trial t;
  t.trial_id = "abc";
  t.run_id = 4;
  t.problem_key = "decode/b16/hq32/hkv8/q1/k8192/d128/causal0/bf16/kve4m3";
  t.config_key = "fused/bm16";
  t.max_rel_error = 1.5e-3;
  t.unquantised_rel_error = 2.25e-2;
  const std::string text = TrialToJson(t);
  EXPECT_NE(text.find("\"unquantised_rel_error\":0.0225"), std::string::npos) << text;
  absl::StatusOr<Trial> back = TrialFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->unquantised_rel_error, 2.25e-2);
  EXPECT_EQ(back->max_rel_error, 1.5e-3);
  EXPECT_EQ(TrialToJson(*back), text);
  // A record written before the field existed (a spool left by an older worker).
  std::string old = text;
  old.erase(old.find(",\"unquantised_rel_error\":0.0225"), std::string(",\"unquantised_rel_error\":0.0225").size());
  ASSERT_EQ(old.find("unquantised"), std::string::npos);
  absl::StatusOr<Trial> older = TrialFromJson(old);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->unquantised_rel_error, 0.0);
  EXPECT_FALSE(TrialFromJson(R"({"trial_id": 3})").ok());
}

}  // namespace
}  // namespace fusetune
