// JobState: the legal transitions, the illegal ones refused without a change, the causes'
// precedence, the watchdog and the waits (driven by events, never by timing).
#include "job_state.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace fusetune::worker_internal {
namespace {

// Leads a fresh state to kHolding job 7, with a reservation when `reserved`.
void HoldJob(JobState& s, bool reserved = false) {
  ASSERT_TRUE(s.BeginLeasing(reserved).ok());
  ASSERT_TRUE(s.Hold(7).ok());
}

TEST(JobStateTest, ATuneJobGoesFromLeasingThroughMeasuringAndCompletingBackToIdle) {
  JobState s;
  EXPECT_EQ(s.phase(), JobPhase::kIdle);
  ASSERT_TRUE(s.BeginLeasing(/*reserved=*/true).ok());
  EXPECT_EQ(s.phase(), JobPhase::kLeasing);
  ASSERT_TRUE(s.Hold(7).ok());
  EXPECT_EQ(s.phase(), JobPhase::kHolding);
  ASSERT_TRUE(s.StartMeasuring(absl::Hours(1), "trial").ok());
  EXPECT_EQ(s.phase(), JobPhase::kMeasuring);
  ASSERT_TRUE(s.FinishMeasuring().ok());
  ASSERT_TRUE(s.BeginCompleting().ok());
  EXPECT_EQ(s.phase(), JobPhase::kCompleting);
  absl::StatusOr<bool> give_back = s.EndJob(/*completed=*/true);
  ASSERT_TRUE(give_back.ok());
  EXPECT_FALSE(*give_back) << "a completed job keeps its max_jobs reservation";
  EXPECT_EQ(s.phase(), JobPhase::kIdle);
  ASSERT_TRUE(s.Exit().ok());
  EXPECT_EQ(s.phase(), JobPhase::kExited);
}

TEST(JobStateTest, AReleasedJobAndAnEmptyLeaseGiveTheirReservationBack) {
  JobState s;
  ASSERT_TRUE(s.BeginLeasing(true).ok());
  absl::StatusOr<bool> nothing_leased = s.EndLeasing();
  ASSERT_TRUE(nothing_leased.ok());
  EXPECT_TRUE(*nothing_leased);
  HoldJob(s, /*reserved=*/true);
  absl::StatusOr<bool> released = s.EndJob(/*completed=*/false);
  ASSERT_TRUE(released.ok());
  EXPECT_TRUE(*released);
  HoldJob(s, /*reserved=*/false);
  EXPECT_FALSE(*s.EndJob(false)) << "no reservation was taken";
}

TEST(JobStateTest, IllegalTransitionsAreRefusedAndChangeNothing) {
  JobState s;
  EXPECT_TRUE(absl::IsFailedPrecondition(s.Hold(7)));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.StartMeasuring(absl::Hours(1), "trial")));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.FinishMeasuring()));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.BeginCompleting()));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.EndJob(false).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.EndLeasing().status()));
  EXPECT_EQ(s.phase(), JobPhase::kIdle);

  HoldJob(s);
  EXPECT_TRUE(absl::IsFailedPrecondition(s.BeginLeasing(false)));
  EXPECT_TRUE(absl::IsFailedPrecondition(s.Exit())) << "a device exits only without a job";
  EXPECT_TRUE(absl::IsFailedPrecondition(s.EndJob(/*completed=*/true).status()))
      << "a job is completed only through kCompleting";
  ASSERT_TRUE(s.StartMeasuring(absl::Hours(1), "trial").ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(s.BeginCompleting())) << "no completion while measuring";
  EXPECT_TRUE(absl::IsFailedPrecondition(s.EndJob(false).status())) << "no release while measuring";
  EXPECT_TRUE(absl::IsFailedPrecondition(s.StartMeasuring(absl::Hours(1), "trial")));
  EXPECT_EQ(s.phase(), JobPhase::kMeasuring);
  absl::Status refused = s.Hold(8);
  EXPECT_NE(refused.message().find("measuring"), std::string::npos) << refused;
}

TEST(JobStateTest, AStrongerCauseReplacesAWeakerOneAndNeverTheReverse) {
  JobState s;
  HoldJob(s);
  EXPECT_FALSE(s.cancel_token()->load());
  ASSERT_TRUE(s.StartMeasuring(absl::Hours(1), "trial").ok());
  s.Stop();
  EXPECT_EQ(s.cause(), StopCause::kStop);
  EXPECT_TRUE(s.cancel_token()->load());
  s.DeviceFailed();
  EXPECT_EQ(s.cause(), StopCause::kDeviceError);
  EXPECT_TRUE(s.LeaseLost(7));
  EXPECT_EQ(s.cause(), StopCause::kLeaseLost);
  s.DeviceFailed();
  s.Stop();
  EXPECT_EQ(s.cause(), StopCause::kLeaseLost);
}

TEST(JobStateTest, ALostLeaseCountsOnlyForTheHeldJobAndNotWhileCompleting) {
  JobState s;
  EXPECT_FALSE(s.LeaseLost(7)) << "no job held";
  HoldJob(s);
  EXPECT_FALSE(s.LeaseLost(8)) << "another job";
  ASSERT_TRUE(s.BeginCompleting().ok());
  EXPECT_FALSE(s.LeaseLost(7)) << "a completed job is no longer leased";
  EXPECT_EQ(s.cause(), StopCause::kNone);
}

TEST(JobStateTest, AStopBeforeTheJobIsHeldCancelsItFromTheStart) {
  JobState s;
  s.Stop();
  HoldJob(s);
  EXPECT_EQ(s.cause(), StopCause::kStop);
  EXPECT_TRUE(s.cancel_token()->load());
}

TEST(JobStateTest, TheWatchdogAbandonsAMeasurementWithoutProgressOnceAndReturnsItsReservation) {
  JobState s;
  s.SetRegistered(absl::Hours(1));
  HoldJob(s, /*reserved=*/true);
  ASSERT_TRUE(s.StartMeasuring(absl::ZeroDuration(), "audit").ok());
  const JobState::Tick tick = s.WaitForTick(absl::InfiniteFuture());
  ASSERT_EQ(tick.kind, JobState::Tick::Kind::kHung);
  EXPECT_EQ(tick.job_id, 7);
  EXPECT_TRUE(tick.return_reservation);
  EXPECT_EQ(tick.measuring, "audit");
  EXPECT_EQ(s.phase(), JobPhase::kAbandoned);
  EXPECT_TRUE(s.hung());
  EXPECT_TRUE(s.abandoned());
  EXPECT_TRUE(s.cancel_token()->load());
  EXPECT_FALSE(s.LeaseLost(7)) << "the job was given away already";

  // The next tick is a beat for no job; the measurement's return ends the abandonment.
  const JobState::Tick beat = s.WaitForTick(absl::InfinitePast());
  EXPECT_EQ(beat.kind, JobState::Tick::Kind::kBeat);
  EXPECT_EQ(beat.job_id, 0);
  ASSERT_TRUE(s.FinishMeasuring().ok());
  EXPECT_FALSE(s.hung());
  EXPECT_EQ(s.cause(), StopCause::kHung);
  EXPECT_TRUE(absl::IsFailedPrecondition(s.BeginCompleting())) << "a job given up cannot complete";
  absl::StatusOr<bool> give_back = s.EndJob(false);
  ASSERT_TRUE(give_back.ok());
  EXPECT_FALSE(*give_back) << "the watchdog returned the reservation already";
}

TEST(JobStateTest, BeatsCarryTheHeldJobAndWaitForRegistration) {
  JobState s;
  std::atomic<bool> ticked{false};
  JobState::Tick tick;
  std::thread heartbeat([&] {
    tick = s.WaitForTick(absl::InfinitePast());
    ticked.store(true);
  });
  HoldJob(s);
  EXPECT_FALSE(ticked.load());  // not registered yet: no beat (checked again below)
  s.SetRegistered(absl::Milliseconds(250));
  heartbeat.join();
  EXPECT_EQ(tick.kind, JobState::Tick::Kind::kBeat);
  EXPECT_EQ(tick.job_id, 7);
  EXPECT_EQ(tick.heartbeat, absl::Milliseconds(250));
}

TEST(JobStateTest, StopThreadsEndsAHeartbeatWaitingForItsNextBeat) {
  JobState s;
  s.SetRegistered(absl::Hours(1));
  std::thread heartbeat([&] { EXPECT_EQ(s.WaitForTick(absl::InfiniteFuture()).kind, JobState::Tick::Kind::kShutdown); });
  s.StopThreads();
  heartbeat.join();
}

TEST(JobStateTest, WaitUploadedEndsWhenUploadedOrTheLeaseIsLostOrOnAStop) {
  JobState s;
  HoldJob(s);
  std::atomic<bool> uploaded{false};
  std::thread uploader([&] {
    uploaded.store(true);
    s.NotifyWaiters();
  });
  EXPECT_TRUE(s.WaitUploaded([&] { return uploaded.load(); }, absl::InfiniteFuture(), true));
  uploader.join();

  std::thread heartbeat([&] { s.LeaseLost(7); });
  EXPECT_FALSE(s.WaitUploaded([] { return false; }, absl::InfiniteFuture(), false));
  heartbeat.join();

  JobState stopping;
  std::thread relay([&] { stopping.Stop(); });
  EXPECT_FALSE(stopping.WaitUploaded([] { return false; }, absl::InfiniteFuture(), /*give_up_on_stop=*/true));
  relay.join();
  EXPECT_FALSE(stopping.WaitUploaded([] { return false; }, absl::InfinitePast(), false)) << "deadline passed";
}

TEST(JobStateTest, WaitExitedSeesTheMainLoopEnd) {
  JobState s;
  EXPECT_FALSE(s.WaitExited(absl::InfinitePast()));
  std::thread main([&] { ASSERT_TRUE(s.Exit().ok()); });
  EXPECT_TRUE(s.WaitExited(absl::InfiniteFuture()));
  main.join();
}

}  // namespace
}  // namespace fusetune::worker_internal
