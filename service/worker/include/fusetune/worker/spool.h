// TrialSpool: the worker's local, durable queue of trials not yet acknowledged by the service.
//
// Every trial the worker measures is appended here (and fsync'ed) BEFORE it is uploaded; it
// is marked acknowledged only after the server confirmed storing it. A worker killed at any
// instant, or cut off from the service for hours, therefore loses no measured trial: on
// restart it opens the same spool and uploads what is still pending first. Uploads are
// idempotent by trial id on the server, so re-sending a trial whose acknowledgement was lost
// is harmless.
//
// File format (one append-only file): a sequence of records
//     u32 payload_bytes | u32 crc32(type byte + payload) | u8 type | payload
// type 1 = trial (payload: the Trial as JSON), type 2 = acknowledgement (payload: trial id).
// A torn record at the tail (a crash mid-append) fails its length or CRC check; Open()
// truncates the file there, so the spool is valid again and only that unfinished record
// (whose trial was never acknowledged to anyone) is dropped. The file is rewritten
// (compacted, atomically via rename) when it holds nothing pending and has grown beyond
// `compact_bytes`.
//
// Thread-safety: thread-safe (one mutex); one process per spool file (not enforced).
#ifndef FUSETUNE_WORKER_SPOOL_H_
#define FUSETUNE_WORKER_SPOOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fusetune/records/json.h"  // TrialToJson: the payload of a trial record
#include "fusetune/records/trial.h"

namespace fusetune {

struct TrialSpoolOptions {
  // Compact once the file exceeds this size and nothing is pending. 0 = never compact
  // (tests read the whole history back with ReadSpoolLog).
  int64_t compact_bytes = int64_t{4} << 20;
  // fdatasync after every append (durable against power loss). Turning it off keeps the
  // SIGKILL guarantee only (the page cache survives a process kill).
  bool sync = true;
};

// Everything a spool file holds, in file order (for tests and inspection).
struct SpoolLog {
  std::vector<Trial> appended;               // every trial record
  std::vector<std::string> acknowledged;     // every acknowledgement record
  int64_t valid_bytes = 0;                   // bytes up to the first torn record
  bool torn_tail = false;                    // a partial/corrupt record followed them
};

// Reads a spool file without modifying it. NotFound if absent; Internal on a read error.
absl::StatusOr<SpoolLog> ReadSpoolLog(const std::string& path);

class TrialSpool {
 public:
  // Opens or creates the spool at `path` (its directory must exist), replays it and
  // truncates a torn tail. Holds an exclusive lock (flock on `path`.lock) until destroyed:
  // FailedPrecondition when another process (or another TrialSpool) has it open.
  // Internal on an I/O error (message has errno text).
  static absl::StatusOr<std::unique_ptr<TrialSpool>> Open(const std::string& path,
                                                          TrialSpoolOptions options = {});
  ~TrialSpool();

  // Appends the trial durably; OK means it survives a crash from now on. Appending an id
  // that is already pending or acknowledged is OK and writes nothing (idempotent).
  absl::Status RecordTrial(const Trial& trial);

  // Marks trials acknowledged by the service (unknown ids are ignored). Durable once OK;
  // an acknowledgement lost in a crash only causes one harmless re-upload.
  absl::Status Acknowledge(std::span<const std::string> trial_ids);

  // Up to `max` pending trials (appended, not acknowledged), oldest first.
  std::vector<Trial> Pending(size_t max) const;
  // Up to `max` pending trials for which `accept` is true, oldest first.
  std::vector<Trial> PendingWhere(size_t max, const std::function<bool(const Trial&)>& accept) const;
  size_t pending_count() const;
  // Pending trials of one run.
  size_t PendingForRun(int64_t run_id) const;
  // Trials ever appended to this spool (since the last compaction) for a run, pending or
  // not: what the worker already measured for a job, used to resume without re-measuring.
  std::vector<Trial> TrialsForRun(int64_t run_id) const;

  const std::string& path() const { return path_; }

 private:
  TrialSpool(std::string path, TrialSpoolOptions options, int fd);
  static absl::StatusOr<std::unique_ptr<TrialSpool>> OpenLocked(const std::string& path,
                                                                TrialSpoolOptions options);
  absl::Status AppendRecordLocked(uint8_t type, std::string_view payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeCompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const TrialSpoolOptions options_;
  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  int lock_fd_ = -1;  // flock held for the spool's lifetime
  int64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Append order of every trial in the file; `acked_` says which are done.
  std::vector<Trial> trials_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> acked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fusetune

#endif  // FUSETUNE_WORKER_SPOOL_H_
