#include "fusetune/records/job.h"

#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(JobStateName, EveryStateRoundTripsThroughItsName) {
  for (JobState s : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    std::optional<JobState> parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.has_value()) << JobStateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(JobStateName(JobState::kQueued), "queued");
  EXPECT_EQ(JobStateName(JobState::kLeased), "leased");
  EXPECT_EQ(JobStateName(JobState::kDone), "done");
  EXPECT_EQ(JobStateName(JobState::kFailed), "failed");
}

TEST(JobStateName, UnknownNamesParseToNothing) {
  EXPECT_FALSE(ParseJobState("").has_value());
  EXPECT_FALSE(ParseJobState("Queued").has_value());
  EXPECT_FALSE(ParseJobState("running").has_value());
}

}  // namespace
}  // namespace fusetune
