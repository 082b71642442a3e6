// Shared pieces of the service end-to-end tests: a `fusetune serve` process that can be
// SIGKILLed and restarted on the same database and port,
// `fusetune worker` processes, gRPC helpers and polling with deadlines.
//
// Test support only. Thread-safety: none (one test thread).
#ifndef FUSETUNE_TESTS_E2E_E2E_HARNESS_H_
#define FUSETUNE_TESTS_E2E_E2E_HARNESS_H_

#include <signal.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/subprocess.h"
#include "fusetune/wire/connection.h"
#include "fusetune/db/store.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/convert.h"
#include "fusetune/worker/spool.h"
#include "grpcpp/grpcpp.h"

namespace fusetune::e2e {

inline constexpr char kToken[] = "e2e-secret-token";

using testing::WaitFor;

struct ServerFlags {
  int64_t lease_ms = 10000;
  int64_t heartbeat_ms = 300;
  int64_t refresh_ms = 200;
};

class ServerProcess {
 public:
  ServerProcess(const testing::TempDir& dir, ServerFlags flags) : dir_(dir), flags_(flags) {}

  // Starts on `port` (0 = ephemeral; a restart reuses the first port). True once serving.
  // The token file must exist (WriteToken).
  bool Start(int port = 0) {
    const std::string port_file = dir_.File("port");
    std::remove(port_file.c_str());
    ++starts_;
    process_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:" + std::to_string(port), "--db",
                                 db(), "--token-file", dir_.File("token"), "--open-reads", "--metrics", "off",
                                 "--lease-ms", std::to_string(flags_.lease_ms), "--heartbeat-ms",
                                 std::to_string(flags_.heartbeat_ms), "--refresh-ms", std::to_string(flags_.refresh_ms),
                                 "--port-file", port_file},
        dir_.path());
    if (!process_->started()) return false;
    const bool up = WaitFor([&] { return !testing::ReadFile(port_file).empty() || process_->Poll(); }, 20);
    if (!up || process_->Poll()) return false;
    port_ = std::stoi(testing::ReadFile(port_file));  // "<grpc port> <metrics port>"
    return port_ > 0;
  }
  bool Restart() { return Start(port_); }
  void Kill() {
    process_->Signal(SIGKILL);
    process_->Wait(10);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string db() const { return dir_.File("fusetune.db"); }
  std::string Logs() const { return process_ ? process_->Stderr() : ""; }

 private:
  const testing::TempDir& dir_;
  ServerFlags flags_;
  std::unique_ptr<testing::Subprocess> process_;
  int port_ = 0;
  int starts_ = 0;
};

// A `fusetune worker` process with its own spool directory.
class WorkerProcess {
 public:
  WorkerProcess(const testing::TempDir& dir, const std::string& address, const std::string& worker_id,
                std::vector<std::string> extra) : spool_(dir.File("spool-" + worker_id)) {
    std::vector<std::string> argv = {FUSETUNE_BINARY, "worker", "--server", address, "--token-file",
                                     dir.File("token"), "--spool", spool_, "--worker-id", worker_id,
                                     "--lease-wait-ms", "300", "--backoff-max-ms", "500"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<testing::Subprocess>(argv, dir.path());
  }
  testing::Subprocess& process() { return *process_; }
  std::string Logs() const { return process_->Stderr(); }
  const std::string& spool_dir() const { return spool_; }

 private:
  std::string spool_;
  std::unique_ptr<testing::Subprocess> process_;
};

inline void WriteToken(const testing::TempDir& dir) {
  testing::RunCommand({"/bin/sh", "-c", std::string("printf '%s\\n' ") + kToken + " > '" + dir.File("token") + "'"});
}

inline std::string CpuDeviceClass() {
  auto backend = CreateBackend("cpu");
  return backend.ok() ? (*backend)->Describe().DeviceClass() : "";
}

// A small prefill problem (fast on the CPU).
inline AttentionProblem SmallProblem(int len, bool causal = false) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 2;
  p.kv_heads = 2;
  p.q_len = len;
  p.kv_len = len;
  p.head_dim = 32;
  p.causal = causal;
  return p;
}

class Client {
 public:
  explicit Client(const std::string& address) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    tuning_ = v1::TuningService::NewStub(channel);
  }

  // Submits a job; 0 on failure.
  int64_t Submit(const std::vector<AttentionProblem>& problems, const std::string& device_class, int max_trials,
                 std::vector<std::string> variants = {"fused", "materialized"}) {
    v1::SubmitTuningJobRequest req;
    for (const AttentionProblem& p : problems) ProblemToProto(p, req.add_problems());
    req.set_device_class(device_class);
    req.set_commit("e2e");
    req.set_max_trials(max_trials);
    for (const std::string& v : variants) req.add_variants(v);
    v1::SubmitTuningJobResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    grpc::Status st = tuning_->SubmitTuningJob(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return st.ok() ? resp.job_id() : 0;
  }

  // The job, or a job with state "unreachable" when the call failed.
  v1::Job GetJob(int64_t job_id) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job job;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (!tuning_->GetJob(&ctx, req, &job).ok()) job.set_state("unreachable");
    return job;
  }

  grpc::Status GetBestConfig(const AttentionProblem& p, const std::string& device_class,
                             v1::GetBestConfigResponse* resp) {
    v1::GetBestConfigRequest req;
    ProblemToProto(p, req.mutable_problem());
    req.set_device_class(device_class);
    grpc::ClientContext ctx;
    Prepare(ctx);
    return tuning_->GetBestConfig(&ctx, req, resp);
  }

 private:
  static void Prepare(grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    AddBearerToken(ctx, kToken);
  }
  std::unique_ptr<v1::TuningService::Stub> tuning_;
};

// Every trial id a worker appended to its spool(s) (the spools are never compacted in
// these short tests: compaction starts at 4 MiB).
inline std::set<std::string> SpooledTrialIds(const std::string& spool_dir, int64_t run_id) {
  std::set<std::string> ids;
  std::vector<std::string> files;
  testing::CommandResult ls = testing::RunCommand({"/bin/sh", "-c", "ls '" + spool_dir + "' 2>/dev/null"});
  std::string name;
  for (char c : ls.out) {
    if (c == '\n') {
      if (name.size() > 6 && name.substr(name.size() - 6) == ".spool") files.push_back(spool_dir + "/" + name);
      name.clear();
    } else {
      name.push_back(c);
    }
  }
  for (const std::string& f : files) {
    auto log = ReadSpoolLog(f);
    if (!log.ok()) continue;
    for (const Trial& t : log->appended) {
      if (t.run_id == run_id) ids.insert(t.trial_id);
    }
  }
  return ids;
}

}  // namespace fusetune::e2e

#endif  // FUSETUNE_TESTS_E2E_E2E_HARNESS_H_
