// `fusetune serve`, `worker`, `submit`, `jobs`, `workers`, `audits`, `regressions`, `regress --server` and `best --server` as real
// processes.
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/ports.h"
#include "common/subprocess.h"
#include "fusetune/db/store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fusetune::testing {
namespace {

constexpr char kClass[] = "cpu/Test-CPU/x86_64";

class ServiceCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("FUSETUNE_TOKEN");
    token_file_ = dir_.File("token");
    std::ofstream(token_file_) << "cli-test-token-42\n";
  }

  // Starts `fusetune serve` on an ephemeral port; true once it wrote its port file.
  bool StartServe(std::vector<std::string> extra = {}) {
    const std::string port_file = dir_.File("ports");
    std::vector<std::string> argv = {FUSETUNE_BINARY, "serve", "--listen", "127.0.0.1:0", "--db", dir_.File("f.db"),
                                     "--metrics", "off", "--token-file", token_file_, "--port-file", port_file};
    argv.insert(argv.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<Subprocess>(argv, dir_.path());
    for (int i = 0; i < 200 && !serve_->Poll(); ++i) {
      std::istringstream ports(ReadFile(port_file));
      if (ports >> port_ && port_ > 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  CommandResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), FUSETUNE_BINARY);
    return RunCommand(args, 60);
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }

  // `fusetune worker` with one CPU device against the server started by StartServe.
  std::unique_ptr<Subprocess> StartWorker(const std::string& id, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {FUSETUNE_BINARY, "worker", "--server", Address(), "--token-file", token_file_,
                                     "--cpu-devices", "1", "--spool", dir_.File("spool-" + id), "--worker-id", id,
                                     "--backoff-max-ms", "500"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv, dir_.path());
  }

  // `fusetune workers --json`, parsed (an empty array when the command failed).
  nlohmann::json Workers() {
    CommandResult r = Run({"workers", "--server", Address(), "--token-file", token_file_, "--json"});
    if (r.exit_code != 0) return nlohmann::json::array();
    return nlohmann::json::parse(r.out);
  }

  std::string JobState(int64_t job_id) {
    CommandResult r = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--id",
                           std::to_string(job_id), "--json"});
    if (r.exit_code != 0) return "";
    return nlohmann::json::parse(r.out)["state"].get<std::string>();
  }

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<Subprocess> serve_;
  int port_ = 0;
};

TEST_F(ServiceCliTest, SubmitJobsAndBestTalkToServeWhichStopsOnSigterm) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");

  CommandResult submit = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class", kClass,
                              "--preset", "seed", "--max-trials", "2", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  auto submitted = nlohmann::json::parse(submit.out);
  const int64_t job_id = submitted["job_id"].get<int64_t>();
  EXPECT_GT(job_id, 0);

  CommandResult jobs = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  auto listed = nlohmann::json::parse(jobs.out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["job_id"].get<int64_t>(), job_id);
  EXPECT_EQ(listed[0]["state"], "queued");
  EXPECT_EQ(listed[0]["problems"].size(), 5u);  // the seed preset

  CommandResult one = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--id", std::to_string(job_id)});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("prefill/b1/hq12/hkv12/q2048/k2048/d64/causal0/fp32"), std::string::npos) << one.out;
  CommandResult missing = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--id", "999"});
  EXPECT_EQ(missing.exit_code, 3) << missing.err;

  // Reads are token-guarded by default.
  CommandResult no_token = Run({"jobs", "--server", Address()});
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_NE(no_token.err.find("UNAUTHENTICATED"), std::string::npos) << no_token.err;

  CommandResult best = Run({"best", "--server", Address(), "--token-file", token_file_, "--device-class", kClass,
                            "--seq", "512", "--json"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  auto answer = nlohmann::json::parse(best.out);
  EXPECT_EQ(answer["provenance"], "default");
  EXPECT_EQ(answer["config"], "fused/bm64/bs64/t1/fp32/st1");
  // The one best-config form (best_config_json.h), with what a service answer lacks as null.
  for (const char* field : {"device_class", "problem", "config", "median_us", "p10_us", "p90_us", "tflops",
                            "speedup_vs_materialized", "speedup_vs_partial", "best_materialized_us",
                            "best_partial_us", "max_abs_error", "max_rel_error", "run_id", "commit",
                            "provenance", "source_problem", "distance"}) {
    EXPECT_TRUE(answer.contains(field)) << field << " missing in " << best.out;
  }
  EXPECT_EQ(answer["device_class"], kClass);
  EXPECT_EQ(answer["source_problem"], "");
  EXPECT_TRUE(answer["p90_us"].is_null()) << best.out;

  CommandResult bad_class = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class",
                                 "tpu/x/y", "--seq", "128"});
  EXPECT_EQ(bad_class.exit_code, 2) << bad_class.err;
  CommandResult bad_shape = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class",
                                 kClass, "--seq", "128", "--head-dim", "1000"});
  EXPECT_EQ(bad_shape.exit_code, 2) << bad_shape.err;

  serve_->Signal(SIGTERM);
  auto code = serve_->Wait(15);
  ASSERT_TRUE(code.has_value()) << "serve did not stop on SIGTERM";
  EXPECT_EQ(*code, 0) << serve_->Stderr();
  EXPECT_NE(serve_->Stdout().find("SIGTERM received"), std::string::npos) << serve_->Stdout();
}

// --kind is the problem's kind, as in every other command; the job's kind is --job-kind.
TEST_F(ServiceCliTest, SubmitKindDecodeQueuesADecodeProblem) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  CommandResult submit = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class", kClass,
                              "--kind", "decode", "--heads", "8", "--head-dim", "64", "--seq", "512", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const int64_t job_id = nlohmann::json::parse(submit.out)["job_id"].get<int64_t>();
  CommandResult shown = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--id",
                             std::to_string(job_id), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto job = nlohmann::json::parse(shown.out);
  EXPECT_EQ(job["kind"], "tune");
  ASSERT_EQ(job["problems"].size(), 1u) << shown.out;
  EXPECT_EQ(job["problems"][0].get<std::string>().rfind("decode/", 0), 0u) << shown.out;
}

TEST_F(ServiceCliTest, ServeReportsTakenPortAndMissingToken) {
  ASSERT_TRUE(StartServe());
  CommandResult taken = Run({"serve", "--listen", Address(), "--db", dir_.File("g.db"), "--metrics", "off",
                             "--token-file", token_file_});
  EXPECT_EQ(taken.exit_code, 1);
  EXPECT_NE(taken.err.find("cannot listen"), std::string::npos) << taken.err;
  CommandResult no_token = Run({"serve", "--listen", "127.0.0.1:0", "--db", dir_.File("h.db"), "--metrics", "off"});
  EXPECT_EQ(no_token.exit_code, 2);
  EXPECT_NE(no_token.err.find("token"), std::string::npos) << no_token.err;
  serve_->Signal(SIGINT);
  EXPECT_EQ(serve_->Wait(15), 0);
}


TEST_F(ServiceCliTest, WorkersListsARunningWorkerWithItsHostClassAndLastSeen) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  auto worker = StartWorker("cli-w");
  ASSERT_TRUE(WaitFor([&] { return Workers().size() == 1; }, 60)) << worker->Stderr();
  nlohmann::json w = Workers()[0];
  EXPECT_EQ(w["worker_id"], "cli-w-d0");
  EXPECT_FALSE(w["host"].get<std::string>().empty());
  EXPECT_EQ(w["backend"], "cpu");
  EXPECT_EQ(w["device_class"].get<std::string>().rfind("cpu/", 0), 0u) << w.dump();
  EXPECT_TRUE(w["alive"].get<bool>());
  EXPECT_GT(w["last_seen_unix_ms"].get<int64_t>(), 0);
  EXPECT_TRUE(w["leased_job_ids"].empty());

  CommandResult table = Run({"workers", "--server", Address(), "--token-file", token_file_});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("WORKER"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("cli-w-d0"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("alive"), std::string::npos) << table.out;
  // A read: token-guarded unless the server runs with --open-reads.
  CommandResult no_token = Run({"workers", "--server", Address()});
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_NE(no_token.err.find("UNAUTHENTICATED"), std::string::npos) << no_token.err;

  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(30), 0) << worker->Stderr();
  serve_->Signal(SIGTERM);
  EXPECT_EQ(serve_->Wait(15), 0);
}

// A worker stopped by SIGTERM while its LeaseJob long-poll waits leaves no ghost lease: a job
// submitted right then is run by the next worker well before the 60 s lease could expire.
TEST_F(ServiceCliTest, WorkerStoppedBySigtermMidPollLeavesNoGhostLease) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");  // default lease: 60 s
  auto first = StartWorker("stopped", {"--lease-wait-ms", "30000"});
  // Its log says "registered <device class> (lease ...)".
  const std::string kRegistered = "] registered ";
  ASSERT_TRUE(WaitFor([&] { return first->Stderr().find(kRegistered) != std::string::npos; }, 60))
      << first->Stderr();
  const std::string log = first->Stderr();
  const size_t from = log.find(kRegistered) + kRegistered.size();
  const std::string device_class = log.substr(from, log.find(' ', from) - from);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its long-poll is waiting

  first->Signal(SIGTERM);
  CommandResult submit = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class",
                              device_class, "--seq", "64", "--heads", "1", "--head-dim", "32", "--max-trials", "1",
                              "--variants", "fused", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const int64_t job_id = nlohmann::json::parse(submit.out)["job_id"].get<int64_t>();
  ASSERT_EQ(first->Wait(30), 0) << first->Stderr();

  auto second = StartWorker("live", {"--max-jobs", "1"});
  EXPECT_TRUE(WaitFor([&] { return JobState(job_id) == "done"; }, 45))
      << "job " << job_id << " is " << JobState(job_id) << "\n" << second->Stderr();
  EXPECT_EQ(second->Wait(30), 0) << second->Stderr();
  serve_->Signal(SIGTERM);
  EXPECT_EQ(serve_->Wait(15), 0);
}

// A tune job records a best config; an audit job of the same problem run by a worker
// process then shows up in `fusetune audits`.
TEST_F(ServiceCliTest, AuditJobSubmittedWithJobKindAuditIsListedByAudits) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  auto worker = StartWorker("auditor", {"--max-jobs", "2"});
  ASSERT_TRUE(WaitFor([&] { return Workers().size() == 1; }, 60)) << worker->Stderr();
  const std::string device_class = Workers()[0]["device_class"].get<std::string>();
  const std::vector<std::string> problem = {"--seq", "64", "--heads", "1", "--head-dim", "32", "--variants", "fused"};
  auto submit = [&](const std::string& kind) {
    std::vector<std::string> args = {"submit", "--server", Address(), "--token-file", token_file_, "--device-class",
                                     device_class, "--max-trials", "2", "--job-kind", kind, "--json"};
    args.insert(args.end(), problem.begin(), problem.end());
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["job_id"].get<int64_t>() : 0;
  };
  const int64_t tune = submit("tune");
  const int64_t audit = submit("audit");
  CommandResult shown = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--id",
                             std::to_string(audit), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(nlohmann::json::parse(shown.out)["kind"], "audit");
  EXPECT_TRUE(WaitFor([&] { return JobState(tune) == "done" && JobState(audit) == "done"; }, 240))
      << "tune " << JobState(tune) << ", audit " << JobState(audit) << "\n" << worker->Stderr();

  CommandResult listed = Run({"audits", "--server", Address(), "--token-file", token_file_, "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto audits = nlohmann::json::parse(listed.out);
  ASSERT_EQ(audits.size(), 1u) << listed.out;
  EXPECT_EQ(audits[0]["problem_key"], "prefill/b1/hq1/hkv1/q64/k64/d32/causal0/fp32");
  EXPECT_EQ(audits[0]["device_class"], device_class);
  EXPECT_FALSE(audits[0]["best_config_key"].get<std::string>().empty());
  CommandResult table = Run({"audits", "--server", Address(), "--token-file", token_file_, "--device-class",
                             device_class});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("REGRET"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("q64/k64/d32"), std::string::npos) << table.out;
  CommandResult other = Run({"audits", "--server", Address(), "--token-file", token_file_, "--device-class",
                             "cuda/NVIDIA-H200/sm90", "--json"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_TRUE(nlohmann::json::parse(other.out).empty());

  CommandResult bad_kind = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class",
                                device_class, "--seq", "64", "--job-kind", "verify"});
  EXPECT_EQ(bad_kind.exit_code, 2) << bad_kind.err;
  CommandResult bad_class = Run({"audits", "--server", Address(), "--token-file", token_file_, "--device-class",
                                 "tpu/x/y"});
  EXPECT_EQ(bad_class.exit_code, 2) << bad_class.err;
  CommandResult no_token = Run({"audits", "--server", Address()});
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_NE(no_token.err.find("UNAUTHENTICATED"), std::string::npos) << no_token.err;

  EXPECT_EQ(worker->Wait(60), 0) << worker->Stderr();  // --max-jobs 2: exits after both
  serve_->Signal(SIGTERM);
  EXPECT_EQ(serve_->Wait(15), 0);
}

// The verdicts stored in the server's database, newest first, filtered by commit.
TEST_F(ServiceCliTest, RegressionsListsTheStoredVerdictsNewestFirst) {
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_.File("f.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 3; ++i) {
      Regression r;
      r.commit = i < 2 ? "c0ffee" : "beef42";
      r.baseline_commit = "abc123";
      r.device_class = kClass;
      r.problem_key = "prefill/b1/hq12/hkv12/q512/k512/d64/causal0/fp32";
      r.config_key = "fused/bm64/bs64/t2/fp32/st1";
      r.metric = "latency";
      r.ratio = 1.0 + 0.01 * (i + 1);
      r.p_value = 0.001;
      r.verdict = i == 0 ? "same" : "regressed";
      r.created_unix_ms = 1764547200000 + i;
      ASSERT_TRUE((*store)->RecordRegression(r).ok());
    }
  }
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  CommandResult all = Run({"regressions", "--server", Address(), "--token-file", token_file_, "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  auto listed = nlohmann::json::parse(all.out);
  ASSERT_EQ(listed.size(), 3u) << all.out;
  EXPECT_EQ(listed[0]["commit"], "beef42");  // newest first
  EXPECT_DOUBLE_EQ(listed[0]["ratio"].get<double>(), 1.03);
  EXPECT_EQ(listed[2]["verdict"], "same");
  CommandResult one = Run({"regressions", "--server", Address(), "--token-file", token_file_, "--commit", "c0ffee"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("VERDICT"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("beef42"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("regressed"), std::string::npos) << one.out;
  CommandResult bad = Run({"regressions", "--server", Address(), "--token-file", token_file_, "--commit", "not a commit!"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  CommandResult no_token = Run({"regressions", "--server", Address()});
  EXPECT_EQ(no_token.exit_code, 1);
}

// Where `token` (delimited by spaces or the line's ends) starts in `line` at or after `from`;
// npos if nowhere.
size_t FindToken(const std::string& line, const std::string& token, size_t from = 0) {
  for (size_t at = line.find(token, from); at != std::string::npos; at = line.find(token, at + 1)) {
    const bool starts = at == 0 || line[at - 1] == ' ';
    const size_t end = at + token.size();
    if (starts && (end == line.size() || line[end] == ' ')) return at;
  }
  return std::string::npos;
}

// In the table `out` (a header line, then rows), the line holding `marker` has each row[i] in
// the column headed headers[i]: starting at the offset where that header starts.
void ExpectRowUnderHeaders(const std::string& out, const std::string& marker, const std::vector<std::string>& headers,
                           const std::vector<std::string>& row) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_FALSE(lines.empty());
  std::string line;
  for (const std::string& l : lines) {
    if (FindToken(l, marker) != std::string::npos) line = l;
  }
  ASSERT_FALSE(line.empty()) << marker << " in\n" << out;
  size_t header_from = 0, row_from = 0;
  for (size_t c = 0; c < headers.size(); ++c) {
    const size_t h = FindToken(lines[0], headers[c], header_from);
    ASSERT_NE(h, std::string::npos) << headers[c] << " in\n" << out;
    const size_t v = FindToken(line, row[c], row_from);
    ASSERT_NE(v, std::string::npos) << row[c] << " in\n" << out;
    EXPECT_EQ(v, h) << row[c] << " is not under " << headers[c] << ":\n" << out;
    header_from = h + headers[c].size();
    row_from = v + row[c].size();
  }
}

// Long config keys (a split-K tile) and decode problem keys (paged) do not push the columns of
// `audits` and `regressions` out of line: each column is as wide as its longest cell.
TEST_F(ServiceCliTest, AuditsAndRegressionsTablesLineUpWhateverTheKeyLengths) {
  const std::string long_config = "fused/bm16/bs64/t128/fp16/st2/skauto";
  const std::string short_config = "fused/bm16/bs16/t1/fp32/st1";
  const std::string decode = "decode/b3/hq8/hkv2/q2/k70/d64/causal0/fp32/page16/pool64/bt6/prefix2";
  const std::string prefill = "prefill/b1/hq1/hkv1/q64/k64/d32/causal0/fp32";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir_.File("f.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 2; ++i) {
      AuditSummary a;
      a.device_class = i == 0 ? kClass : "cuda/NVIDIA-H200/sm90";
      a.problem_key = i == 0 ? prefill : decode;
      a.recorded_config_key = i == 0 ? short_config : long_config;
      a.best_config_key = i == 0 ? long_config : short_config;
      a.recorded_us = 12.5 + 1000 * i;
      a.best_us = 12.0 + 900 * i;
      a.regret = 0.04;
      a.regret_low = 0.01;
      a.regret_high = 0.06;
      a.rounds = 9;
      a.configs_measured = 3 + 100 * i;
      a.commit = "c0ffee123456";
      a.created_unix_ms = 1764547200000 + i;
      ASSERT_TRUE((*store)->RecordAudit(a).ok());

      Regression r;
      r.commit = i == 0 ? "c0ffee" : "0123456789abcdef0123456789abcdef01234567";
      r.baseline_commit = "abc123";
      r.device_class = a.device_class;
      r.problem_key = a.problem_key;
      r.config_key = a.recorded_config_key;
      r.metric = i == 0 ? "latency" : "latency_vs_previous_pick";
      r.ratio = 1.05;
      r.p_value = 0.001;
      r.verdict = i == 0 ? "same" : "regressed";
      r.created_unix_ms = 1764547200000 + i;
      ASSERT_TRUE((*store)->RecordRegression(r).ok());
    }
  }
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  CommandResult audits = Run({"audits", "--server", Address(), "--token-file", token_file_});
  ASSERT_EQ(audits.exit_code, 0) << audits.err;
  const std::vector<std::string> audit_headers = {"RECORDED", "BEST", "PROBLEM", "DEVICE_CLASS"};
  ExpectRowUnderHeaders(audits.out, prefill, audit_headers, {short_config, long_config, prefill, kClass});
  ExpectRowUnderHeaders(audits.out, decode, audit_headers, {long_config, short_config, decode, "cuda/NVIDIA-H200/sm90"});

  CommandResult regressions = Run({"regressions", "--server", Address(), "--token-file", token_file_});
  ASSERT_EQ(regressions.exit_code, 0) << regressions.err;
  const std::vector<std::string> regression_headers = {"VERDICT", "METRIC", "COMMIT", "BASELINE",
                                                       "CONFIG",  "PROBLEM", "DEVICE_CLASS"};
  ExpectRowUnderHeaders(regressions.out, prefill, regression_headers,
                        {"same", "latency", "c0ffee", "abc123", short_config, prefill, kClass});
  ExpectRowUnderHeaders(regressions.out, decode, regression_headers,
                        {"regressed", "latency_vs_previous_pick", "0123456789abcdef0123456789abcdef01234567", "abc123",
                         long_config, decode, "cuda/NVIDIA-H200/sm90"});
  serve_->Signal(SIGTERM);
  EXPECT_EQ(serve_->Wait(15), 0);
}

TEST_F(ServiceCliTest, EveryServiceCommandDefaultsToTheSamePort) {
  for (std::vector<std::string> help : {std::vector<std::string>{"serve", "--help"}, {"worker", "--help"},
                                        {"submit", "--help"}, {"jobs", "--help"}, {"workers", "--help"},
                                        {"audits", "--help"}, {"regressions", "--help"}}) {
    CommandResult r = Run(help);
    EXPECT_EQ(r.exit_code, 0) << help[0] << ": " << r.err;
    EXPECT_NE(r.out.find("=127.0.0.1:50051"), std::string::npos) << help[0] << ":\n" << r.out;
  }
}

// `--server a,b` names several replicas: a read that finds the first away is made at the next;
// a submit is not repeated (it may have been stored) and fails; a malformed list is a usage error.
TEST_F(ServiceCliTest, ReadsGoOnToTheNextServerAddressWhenOneIsAway) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  const int away_port = FreeLoopbackPort();
  ASSERT_GT(away_port, 0);
  const std::string both = "127.0.0.1:" + std::to_string(away_port) + "," + Address();
  CommandResult submit = Run({"submit", "--server", Address(), "--token-file", token_file_, "--device-class", kClass,
                              "--seq", "64", "--json"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  CommandResult jobs = Run({"jobs", "--server", both, "--token-file", token_file_, "--json"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_EQ(nlohmann::json::parse(jobs.out).size(), 1u);
  CommandResult best = Run({"best", "--server", both, "--token-file", token_file_, "--device-class", kClass, "--seq",
                            "64", "--json"});
  EXPECT_EQ(best.exit_code, 0) << best.err;
  CommandResult workers = Run({"workers", "--server", both, "--token-file", token_file_});
  EXPECT_EQ(workers.exit_code, 0) << workers.err;
  CommandResult again = Run({"submit", "--server", both, "--token-file", token_file_, "--device-class", kClass,
                             "--seq", "64"});
  EXPECT_EQ(again.exit_code, 1) << again.out << again.err;
  CommandResult still_one = Run({"jobs", "--server", Address(), "--token-file", token_file_, "--json"});
  EXPECT_EQ(nlohmann::json::parse(still_one.out).size(), 1u);
  CommandResult bad = Run({"jobs", "--server", Address() + ",", "--token-file", token_file_});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST_F(ServiceCliTest, MalformedServerAddressesAreUsageErrorsAtStartup) {
  ::setenv("FUSETUNE_TOKEN", "some-token", 1);
  for (const std::string bad : {"nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", ":50051"}) {
    SCOPED_TRACE(bad);
    // The worker would otherwise retry forever: RunCommand's timeout makes that a failure.
    CommandResult worker = RunCommand({FUSETUNE_BINARY, "worker", "--server", bad, "--spool", dir_.File("spool"),
                                       "--cpu-devices", "1"},
                                      20);
    EXPECT_EQ(worker.exit_code, 2) << worker.err;
    EXPECT_NE(worker.err.find("--server"), std::string::npos) << worker.err;
    for (std::vector<std::string> client : {std::vector<std::string>{"jobs"}, {"workers"}, {"audits"},
                                            {"submit", "--device-class", kClass, "--seq", "64"},
                                            {"best", "--device-class", kClass, "--seq", "64"}}) {
      client.push_back("--server");
      client.push_back(bad);
      CommandResult r = Run(client);
      EXPECT_EQ(r.exit_code, 2) << client[0] << ": " << r.err;
    }
    CommandResult serve = Run({"serve", "--listen", bad, "--db", dir_.File("x.db"), "--metrics", "off"});
    EXPECT_EQ(serve.exit_code, 2) << serve.err;
  }
  ::unsetenv("FUSETUNE_TOKEN");
}

TEST_F(ServiceCliTest, RegressUploadsItsVerdictsWhichRegressionsLists) {
  ASSERT_TRUE(StartServe()) << (serve_ ? serve_->Stderr() : "");
  const std::string suite = dir_.File("suite.json");
  std::ofstream(suite) << R"({"name": "upload", "block": {"warmup": 0, "repeats": 3, "max_seconds": 0.1, "flush_l2": false},
    "blocks": 3, "cells": [
    {"problem": "prefill/b1/hq1/hkv1/q32/k32/d32/causal0/fp32", "config": "fused/bm16/bs16/t1/fp32/st1"}]})";
  const CommandResult version = Run({"--version"});
  const std::string commit = version.out.substr(version.out.find("commit ") + 7, 12);
  const std::vector<std::string> regress = {"regress", "--suite", suite, "--baseline", commit, "--commit", commit,
                                            "--baseline-binary", FUSETUNE_BINARY, "--db", dir_.File("local.db"),
                                            "--server", Address()};
  // The upload is a write: without the token nothing is sent and regress fails.
  std::vector<std::string> no_token = regress;
  CommandResult refused = Run(no_token);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  std::vector<std::string> with_token = regress;
  with_token.insert(with_token.end(), {"--token-file", token_file_});
  CommandResult r = Run(with_token);
  ASSERT_NE(r.exit_code, 2) << r.err << r.out;
  EXPECT_NE(r.out.find("uploaded 2 verdict rows"), std::string::npos) << r.out;  // latency + max_rel_error
  CommandResult listed = Run({"regressions", "--server", Address(), "--token-file", token_file_, "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const nlohmann::json rows = nlohmann::json::parse(listed.out);
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  for (const auto& row : rows) {
    EXPECT_EQ(row["commit"], commit) << row.dump();
    EXPECT_EQ(row["problem_key"], "prefill/b1/hq1/hkv1/q32/k32/d32/causal0/fp32") << row.dump();
  }
}

}  // namespace
}  // namespace fusetune::testing
