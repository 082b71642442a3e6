// Uploader: one device's spool-to-server path (internal to the worker library).
//
// RecordTrial puts a trial into the device's spool (made to fit the server's bounds first,
// so that its upload cannot be refused for them) and wakes the upload thread, which sends
// pending trials with ReportTrials, one stream per run, oldest first, and acknowledges them
// in the spool once the server stored them. Failures:
//   - transport trouble: retried with backoff;
//   - WORKER_NOT_REGISTERED: `register_again`, then retried;
//   - a run the server will not take from this device (it no longer holds the run): the
//     trials the server already stores (measured again by the job's next holder under the
//     same ids) are acknowledged; the rest stay parked in the spool until this device holds
//     the run again (HoldRun) or kParkRetry passed;
//   - a trial refused as malformed: dropped, so it cannot block the spool.
// After each pass `on_progress` runs (without this object's lock), so that waiters re-check
// what is pending.
//
// Thread-safety: thread-safe (one mutex for the held and parked runs and the loop's wakeups;
// the spool has its own). `register_again` and `on_progress` run on the upload thread.
#ifndef FUSETUNE_WORKER_UPLOADER_H_
#define FUSETUNE_WORKER_UPLOADER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fusetune/records/sink.h"
#include "fusetune/worker/spool.h"
#include "worker_context.h"

namespace fusetune::worker_internal {

// The server's bounds on a trial (convert.h): a trial that would break them is fixed up
// (text cut, non-finite and negative numbers zeroed, errors made infinite).
Trial SanitizeForUpload(Trial trial);

class Uploader : public TrialSink {
 public:
  struct Callbacks {
    std::function<void()> register_again;  // the server forgot this device
    std::function<void()> on_progress;     // after every upload pass
    std::function<void(const std::string&)> log;
  };
  // `ctx` and `spool` must outlive the uploader.
  Uploader(WorkerContext& ctx, std::string worker_id, TrialSpool& spool, Callbacks callbacks);
  ~Uploader() override;

  // Starts the upload thread; it uploads nothing before OnRegistered.
  void Start();
  // Ends the upload thread after its current pass and joins it; later Starts do nothing.
  void Stop();
  // The device is registered: uploads may go.
  void OnRegistered();

  // Spools the trial (sanitized) durably and wakes the upload thread. OK once in the spool;
  // the spool's error otherwise.
  absl::Status RecordTrial(const Trial& trial) override;
  // Wakes the upload thread for another pass.
  void Wake();
  // The run this device now holds (0: none). Its parked trials may go again.
  void HoldRun(int64_t run_id);
  // The token of the lease `run_id`'s trials are measured under (Job.lease_token): sent with
  // each upload of that run, so that the server refuses them once the lease is stale. Runs
  // without one (spooled by an earlier process) are uploaded without a token.
  void SetLeaseToken(int64_t run_id, int64_t lease_token);

  // Pending trials of runs not parked (what an upload pass would try).
  size_t UploadablePending() const;
  size_t PendingForRun(int64_t run_id) const { return spool_.PendingForRun(run_id); }

 private:
  enum class PassResult { kNothingPending, kUploaded, kFailed };
  void Loop();
  // One pass over the oldest pending trials (a batch per run). kFailed: worth a backoff.
  PassResult UploadPass();
  // Handles a run the server refused from this device. True when it was parked.
  bool ParkRefusedRun(int64_t run, const absl::Status& refusal);
  absl::Status UploadRun(const std::vector<Trial>& trials);
  void AcknowledgeAlreadyStored(int64_t run);
  // Runs parked now; forgets parks older than kParkRetry, so they are tried once more.
  absl::flat_hash_set<int64_t> ParkedRuns() const;
  void Log(const std::string& line) const { callbacks_.log(line); }

  WorkerContext& ctx_;
  const std::string worker_id_;
  TrialSpool& spool_;
  const Callbacks callbacks_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = true;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t held_run_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, int64_t> lease_tokens_ ABSL_GUARDED_BY(mu_);  // run -> its lease's token
  mutable absl::flat_hash_map<int64_t, absl::Time> parked_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fusetune::worker_internal

#endif  // FUSETUNE_WORKER_UPLOADER_H_
