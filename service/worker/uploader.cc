#include "uploader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fusetune/base/backoff.h"
#include "fusetune/wire/records_convert.h"
#include "fusetune/wire/status.h"

namespace fusetune::worker_internal {
namespace {

constexpr int kUploadBatch = 256;        // trials per ReportTrials stream (server: <= 4096)
constexpr int kListTrialsLimit = 10000;  // the server's maximum
constexpr absl::Duration kParkRetry = absl::Seconds(60);

}  // namespace

Trial SanitizeForUpload(Trial t) {
  if (t.message.size() > kMaxTextLength) t.message.resize(kMaxTextLength - 3), t.message += "...";
  if (t.samples_us.size() > static_cast<size_t>(kMaxSamplesPerTrial)) t.samples_us.resize(kMaxSamplesPerTrial);
  for (double& s : t.samples_us) {
    if (!std::isfinite(s) || s < 0) s = 0;
  }
  for (double* v : {&t.median_us, &t.p10_us, &t.p90_us, &t.flops}) {
    if (!std::isfinite(*v) || *v < 0) *v = 0;
  }
  for (double* e : {&t.max_abs_error, &t.max_rel_error, &t.unquantised_rel_error}) {
    if (std::isnan(*e) || *e < 0) *e = std::numeric_limits<double>::infinity();
  }
  if (!std::isfinite(t.wall_seconds) || t.wall_seconds < 0) t.wall_seconds = 0;
  if (t.blocks.size() > static_cast<size_t>(kMaxBlocksPerTrial)) t.blocks.resize(kMaxBlocksPerTrial);
  for (SampleBlock& b : t.blocks) {
    b.samples = std::clamp(b.samples, 0, kMaxSamplesPerBlock);
    if (!std::isfinite(b.median_us) || b.median_us < 0) b.median_us = 0;
    for (DeviceState* d : {&b.before, &b.after}) {
      d->sm_clock_mhz = std::max(0, d->sm_clock_mhz);
      d->power_mw = std::max(0, d->power_mw);
    }
  }
  return t;
}

Uploader::Uploader(WorkerContext& ctx, std::string worker_id, TrialSpool& spool, Callbacks callbacks)
    : ctx_(ctx), worker_id_(std::move(worker_id)), spool_(spool), callbacks_(std::move(callbacks)) {}

Uploader::~Uploader() { Stop(); }

void Uploader::Start() {
  absl::MutexLock lock(&mu_);
  if (stop_ || thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void Uploader::Stop() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

void Uploader::OnRegistered() {
  absl::MutexLock lock(&mu_);
  registered_ = true;
  cv_.SignalAll();
}

absl::Status Uploader::RecordTrial(const Trial& trial) {
  absl::Status s = spool_.RecordTrial(SanitizeForUpload(trial));
  if (!s.ok()) return s;
  ctx_.trials_recorded.fetch_add(1);
  Wake();
  return absl::OkStatus();
}

void Uploader::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
  cv_.SignalAll();
}

void Uploader::HoldRun(int64_t run_id) {
  absl::MutexLock lock(&mu_);
  held_run_ = run_id;
  parked_.erase(run_id);  // we hold this run again: its parked trials may go
  wake_ = true;
  cv_.SignalAll();
}

size_t Uploader::UploadablePending() const {
  const absl::flat_hash_set<int64_t> parked = ParkedRuns();
  return spool_.PendingWhere(static_cast<size_t>(-1), [&](const Trial& t) { return !parked.contains(t.run_id); })
      .size();
}

absl::flat_hash_set<int64_t> Uploader::ParkedRuns() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<int64_t> out;
  const absl::Time now = absl::Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    auto next = std::next(it);
    if (now - it->second > kParkRetry) {
      parked_.erase(it);
    } else {
      out.insert(it->first);
    }
    it = next;
  }
  return out;
}

void Uploader::Loop() {
  Backoff backoff(ctx_.options().backoff, std::hash<std::string>{}(worker_id_) + 2);
  absl::Time retry_at = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stop_) {
        const absl::Time now = absl::Now();
        // A park that lapses is a reason for a pass of its own.
        absl::Time park_lapses = absl::InfiniteFuture();
        for (const auto& [run, since] : parked_) park_lapses = std::min(park_lapses, since + kParkRetry);
        if (registered_ && now >= retry_at && (wake_ || now > park_lapses)) break;
        absl::Time until = absl::InfiniteFuture();
        if (registered_) until = now < retry_at ? retry_at : park_lapses + absl::Milliseconds(1);
        cv_.WaitWithDeadline(&mu_, until);
      }
      if (stop_) return;
      wake_ = false;
    }
    const PassResult result = UploadPass();
    if (result == PassResult::kFailed) {
      retry_at = absl::Now() + absl::Milliseconds(backoff.NextDelayMs());
      Wake();  // try again once retry_at passed
    } else {
      backoff.Reset();
      retry_at = absl::InfinitePast();
      if (result == PassResult::kUploaded) Wake();  // more may be pending beyond this batch
    }
    if (callbacks_.on_progress) callbacks_.on_progress();
  }
}

Uploader::PassResult Uploader::UploadPass() {
  // Oldest pending trials first (skipping parked runs), one stream per run.
  const absl::flat_hash_set<int64_t> parked = ParkedRuns();
  std::vector<Trial> pending =
      spool_.PendingWhere(4 * kUploadBatch, [&](const Trial& t) { return !parked.contains(t.run_id); });
  if (pending.empty()) return PassResult::kNothingPending;
  absl::flat_hash_map<int64_t, std::vector<Trial>> by_run;
  std::vector<int64_t> order;
  for (Trial& t : pending) {
    auto& v = by_run[t.run_id];
    if (v.empty()) order.push_back(t.run_id);
    if (v.size() < static_cast<size_t>(kUploadBatch)) v.push_back(std::move(t));
  }
  for (int64_t run : order) {
    absl::Status st = UploadRun(by_run[run]);
    if (st.ok()) continue;
    if (ErrorReason(st) == kReasonWorkerNotRegistered) {
      callbacks_.register_again();  // a server that lost our registration: register, then retry
      return PassResult::kFailed;
    }
    if (ParkRefusedRun(run, st)) continue;
    Log(absl::StrCat("upload failed: ", st.ToString()));
    return PassResult::kFailed;
  }
  return PassResult::kUploaded;
}

bool Uploader::ParkRefusedRun(int64_t run, const absl::Status& refusal) {
  if (!absl::IsFailedPrecondition(refusal) && !absl::IsPermissionDenied(refusal) && !absl::IsNotFound(refusal)) {
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    if (run == held_run_) return false;
  }
  // Another worker may have finished that job, re-measuring the same configs under the
  // same trial ids: what the server already has needs no upload from us.
  AcknowledgeAlreadyStored(run);
  absl::MutexLock lock(&mu_);
  if (run == held_run_) return false;
  parked_[run] = absl::Now();
  Log(absl::StrCat("server refuses trials of run ", run, " (", refusal.ToString(),
                   "); kept in the spool until this device holds that run again"));
  return true;
}

void Uploader::AcknowledgeAlreadyStored(int64_t run) {
  v1::ListTrialsRequest req;
  req.set_run_id(run);
  req.set_limit(kListTrialsLimit);
  v1::ListTrialsResponse resp;
  grpc::ClientContext ctx;
  ctx_.Prepare(ctx, absl::Seconds(30));
  if (!ctx_.tuning_stub().ListTrials(&ctx, req, &resp).ok()) return;
  absl::flat_hash_set<std::string> stored;
  for (const v1::Trial& t : resp.trials()) stored.insert(t.trial_id());
  std::vector<std::string> ids;
  for (const Trial& t : spool_.PendingWhere(static_cast<size_t>(-1), [&](const Trial& t) {
         return t.run_id == run && stored.contains(t.trial_id);
       })) {
    ids.push_back(t.trial_id);
  }
  if (ids.empty()) return;
  if (spool_.Acknowledge(ids).ok()) {
    Log(absl::StrCat(ids.size(), " spooled trials of run ", run, " are already stored (measured again by ",
                     "the job's next holder); dropped from the spool"));
  }
}

void Uploader::SetLeaseToken(int64_t run_id, int64_t lease_token) {
  absl::MutexLock lock(&mu_);
  lease_tokens_[run_id] = lease_token;
}

absl::Status Uploader::UploadRun(const std::vector<Trial>& trials) {
  grpc::ClientContext ctx;
  ctx_.Prepare(ctx, absl::Seconds(30));
  ctx.AddMetadata(kWorkerIdMetadata, worker_id_);
  if (!trials.empty()) {
    absl::MutexLock lock(&mu_);
    if (auto it = lease_tokens_.find(trials.front().run_id); it != lease_tokens_.end() && it->second > 0) {
      ctx.AddMetadata(kLeaseTokenMetadata, absl::StrCat(it->second));
    }
  }
  v1::ReportTrialsResponse resp;
  std::unique_ptr<grpc::ClientWriter<v1::Trial>> writer = ctx_.worker_stub().ReportTrials(&ctx, &resp);
  for (const Trial& t : trials) {
    v1::Trial p;
    TrialToProto(t, &p);
    if (!writer->Write(p)) break;  // the server ended the stream; Finish says why
  }
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  ctx_.Done(ctx);
  if (st.ok()) {
    std::vector<std::string> ids;
    for (const Trial& t : trials) ids.push_back(t.trial_id);
    if (absl::Status s = spool_.Acknowledge(ids); !s.ok()) return s;
    ctx_.trials_uploaded.fetch_add(static_cast<int64_t>(trials.size()));
    return absl::OkStatus();
  }
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT && trials.size() > 1) {
    // Find the malformed one(s): upload one by one, so the rest still go through.
    for (const Trial& t : trials) {
      absl::Status s = UploadRun({t});
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // A single trial the server will never accept: keeping it would block the spool.
    ctx_.trials_rejected.fetch_add(1);
    Log(absl::StrCat("server rejected trial ", trials[0].trial_id, " as malformed: ", st.error_message(),
                     "; dropped from the spool"));
    std::vector<std::string> ids = {trials[0].trial_id};
    return spool_.Acknowledge(ids);
  }
  return FromGrpcCall(st, ctx);
}

}  // namespace fusetune::worker_internal
