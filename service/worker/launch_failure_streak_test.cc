// LaunchFailureStreakSink: launch failures held back while they form a streak, recorded in
// order once something else comes, discarded (and the device reported) at the limit.
#include "launch_failure_streak.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fusetune::worker_internal {
namespace {

class RecordingSink : public TrialSink {
 public:
  absl::Status RecordTrial(const Trial& trial) override {
    if (!fail_with.ok()) return fail_with;
    ids.push_back(trial.trial_id);
    return absl::OkStatus();
  }
  std::vector<std::string> ids;
  absl::Status fail_with = absl::OkStatus();
};

Trial T(const std::string& id, TrialOutcome outcome) {
  Trial t;
  t.trial_id = id;
  t.outcome = outcome;
  return t;
}

TEST(LaunchFailureStreakSinkTest, FailuresShorterThanTheStreakAreRecordedInOrderBeforeTheNextTrial) {
  RecordingSink inner;
  int streaks = 0;
  LaunchFailureStreakSink sink(inner, 3, [&](const Trial&) { ++streaks; });
  ASSERT_TRUE(sink.RecordTrial(T("a", TrialOutcome::kLaunchFailed)).ok());
  ASSERT_TRUE(sink.RecordTrial(T("b", TrialOutcome::kLaunchFailed)).ok());
  EXPECT_TRUE(inner.ids.empty()) << "held back while they may still be a streak";
  ASSERT_TRUE(sink.RecordTrial(T("c", TrialOutcome::kOk)).ok());
  EXPECT_EQ(inner.ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(streaks, 0);
  EXPECT_FALSE(sink.tripped());
}

TEST(LaunchFailureStreakSinkTest, AFullStreakIsDiscardedReportedOnceAndEverythingAfterIsDropped) {
  RecordingSink inner;
  std::vector<std::string> reported;
  LaunchFailureStreakSink sink(inner, 3, [&](const Trial& last) { reported.push_back(last.trial_id); });
  ASSERT_TRUE(sink.RecordTrial(T("ok", TrialOutcome::kOk)).ok());
  for (const char* id : {"x", "y", "z"}) ASSERT_TRUE(sink.RecordTrial(T(id, TrialOutcome::kLaunchFailed)).ok());
  EXPECT_TRUE(sink.tripped());
  EXPECT_EQ(reported, (std::vector<std::string>{"z"}));
  ASSERT_TRUE(sink.RecordTrial(T("later", TrialOutcome::kOk)).ok());
  ASSERT_TRUE(sink.RecordTrial(T("w", TrialOutcome::kLaunchFailed)).ok());
  ASSERT_TRUE(sink.Flush().ok());
  EXPECT_EQ(inner.ids, (std::vector<std::string>{"ok"}));
  EXPECT_EQ(reported.size(), 1u);
}

TEST(LaunchFailureStreakSinkTest, OtherFailuresEndAStreak) {
  RecordingSink inner;
  int streaks = 0;
  LaunchFailureStreakSink sink(inner, 2, [&](const Trial&) { ++streaks; });
  ASSERT_TRUE(sink.RecordTrial(T("a", TrialOutcome::kLaunchFailed)).ok());
  ASSERT_TRUE(sink.RecordTrial(T("b", TrialOutcome::kVerifyFailed)).ok());
  ASSERT_TRUE(sink.RecordTrial(T("c", TrialOutcome::kLaunchFailed)).ok());
  ASSERT_TRUE(sink.Flush().ok()) << "the sweep ended mid-streak";
  EXPECT_EQ(inner.ids, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(streaks, 0);
}

TEST(LaunchFailureStreakSinkTest, AStreakOfZeroPassesEverythingThrough) {
  RecordingSink inner;
  LaunchFailureStreakSink sink(inner, 0, [](const Trial&) { FAIL() << "no streak with 0"; });
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(sink.RecordTrial(T(id, TrialOutcome::kLaunchFailed)).ok());
  EXPECT_EQ(inner.ids.size(), 4u);
}

TEST(LaunchFailureStreakSinkTest, TheInnerSinksErrorComesBackAndHeldFailuresStayForTheNextFlush) {
  RecordingSink inner;
  LaunchFailureStreakSink sink(inner, 3, nullptr);
  ASSERT_TRUE(sink.RecordTrial(T("a", TrialOutcome::kLaunchFailed)).ok());
  inner.fail_with = absl::InternalError("disk full");
  EXPECT_EQ(sink.RecordTrial(T("b", TrialOutcome::kOk)).code(), absl::StatusCode::kInternal);
  inner.fail_with = absl::OkStatus();
  ASSERT_TRUE(sink.Flush().ok());
  EXPECT_EQ(inner.ids, (std::vector<std::string>{"a"}));
}

}  // namespace
}  // namespace fusetune::worker_internal
