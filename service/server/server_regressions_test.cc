// ReportRegressions through real gRPC: uploaded verdicts are listed and exposed as metrics at
// once, a bad row or a missing token stores nothing, commits are stored in canonical form and
// found by any form of them.
#include <string>
#include <vector>

#include "fusetune/db/store.h"
#include "fusetune/service/server.h"
#include "fusetune/wire/records_convert.h"
#include "server_test_util.h"
#include "testing/http_get.h"

namespace fusetune::testing {
namespace {

constexpr char kFused[] = "fused/bm64/bs64/t1/fp32/st1";

class ServerRegressionsTest : public ::testing::Test {
 protected:
  // The periodic refresh is an hour away: gauges seen here were refreshed by the upload.
  void StartServer(bool with_metrics, bool open_reads = false) {
    ServerOptions options;
    if (!with_metrics) options.metrics_address.clear();
    options.db_path = dir_.File("fusetune.db");
    options.token = kToken;
    options.open_reads = open_reads;
    options.refresh_ms = 3600 * 1000;
    auto server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stubs_ = Connect(server_->port());
  }

  std::vector<v1::Regression> Listed() {
    v1::ListRegressionsRequest req;
    v1::ListRegressionsResponse resp;
    grpc::Status s = stubs_.tuning->ListRegressions(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.regressions().begin(), resp.regressions().end()};
  }

  ScratchDir dir_;
  std::unique_ptr<Server> server_;
  Stubs stubs_;
};

Regression Verdict(const std::string& config, const std::string& verdict, double ratio) {
  Regression r;
  r.commit = "c0ffee1234567";
  r.baseline_commit = "abc1234567890";
  r.device_class = kCpuClass;
  r.problem_key = KeyOf(SeedProblem(256));
  r.config_key = config;
  r.metric = "latency";
  r.ratio = ratio;
  r.p_value = 0.0004;
  r.verdict = verdict;
  return r;
}

TEST_F(ServerRegressionsTest, UploadedVerdictsAreListedAndRefreshTheVerdictMetrics) {
  StartServer(/*with_metrics=*/true);
  const std::vector<Regression> rows = {Verdict(kFused, "regressed", 1.08),
                                        Verdict("fused/bm32/bs32/t1/fp32/st1", "same", 1.001)};
  absl::StatusOr<int> recorded = UploadRegressions(*stubs_.tuning, Ctx().get(), rows);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(*recorded, 2);

  const std::vector<v1::Regression> listed = Listed();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].verdict(), "same");  // newest first
  EXPECT_EQ(listed[1].verdict(), "regressed");
  EXPECT_EQ(listed[1].config_key(), kFused);
  EXPECT_EQ(listed[1].ratio(), 1.08);
  EXPECT_EQ(listed[1].p_value(), 0.0004);
  EXPECT_GT(listed[1].created_unix_ms(), 0) << "a row sent without a time gets the server's clock";

  auto page = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  const std::string& text = page->body;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"regressed\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_regressions_latest{verdict=\"same\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("verdict=\"regressed\"} 1.08"), std::string::npos) << text;
  EXPECT_NE(text.find("fusetune_rpc_requests_total{code=\"OK\",method=\"ReportRegressions\"} 1"), std::string::npos)
      << text;
}

TEST_F(ServerRegressionsTest, ABadRowIsInvalidArgumentNamingItAndNothingIsStored) {
  StartServer(/*with_metrics=*/false);
  v1::ReportRegressionsRequest req;
  RegressionToProto(Verdict(kFused, "regressed", 1.08), req.add_regressions());
  Regression bad = Verdict(kFused, "same", 1.0);
  bad.p_value = 1.5;
  RegressionToProto(bad, req.add_regressions());
  v1::ReportRegressionsResponse resp;
  grpc::Status s = stubs_.tuning->ReportRegressions(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("regressions[1]"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("p_value"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Listed().empty());

  // The client call refuses the same rows before sending them.
  absl::StatusOr<int> uploaded = UploadRegressions(*stubs_.tuning, Ctx().get(), {Verdict(kFused, "worse", 1.0)});
  EXPECT_EQ(uploaded.status().code(), absl::StatusCode::kInvalidArgument) << uploaded.status();
  EXPECT_NE(uploaded.status().message().find("regressions[0]"), std::string::npos) << uploaded.status();
  EXPECT_TRUE(Listed().empty());
}

// What a client may send: a full (here upper-case) hash, as git and CI systems spell it.
constexpr char kFullCommit[] = "0DDB43A4D977C3B1E0F2A9D8C7B6A5F4E3D2C1B0";
constexpr char kCanonicalCommit[] = "0ddb43a4d977";

TEST_F(ServerRegressionsTest, CommitsAreStoredInCanonicalFormAndFoundByAnyFormOfThem) {
  StartServer(/*with_metrics=*/false);
  Regression aa = Verdict(kFused, "same", 1.0);
  aa.commit = kFullCommit;
  aa.baseline_commit = std::string(kFullCommit).substr(0, 20);
  Regression other = Verdict(kFused, "same", 1.0);
  other.commit = "0ddb43a000000000";
  ASSERT_TRUE(UploadRegressions(*stubs_.tuning, Ctx().get(), {aa, other}).ok());
  const std::vector<v1::Regression> listed = Listed();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[1].commit(), kCanonicalCommit);
  EXPECT_EQ(listed[1].baseline_commit(), kCanonicalCommit);  // an A/A row: commit == baseline

  auto with_commit = [&](const std::string& commit, grpc::Status* status) {
    v1::ListRegressionsRequest req;
    req.set_commit(commit);
    v1::ListRegressionsResponse resp;
    *status = stubs_.tuning->ListRegressions(Ctx().get(), req, &resp);
    return resp.regressions_size();
  };
  grpc::Status status;
  for (const std::string& form : {std::string(kFullCommit), std::string(kCanonicalCommit), std::string("0DDB43A4D9")}) {
    EXPECT_EQ(with_commit(form, &status), 1) << form;
    EXPECT_TRUE(status.ok()) << form << ": " << status.error_message();
  }
  EXPECT_EQ(with_commit("fedcba9", &status), 0);  // an abbreviation of no stored commit selects nothing
  EXPECT_TRUE(status.ok()) << status.error_message();
  with_commit("0ddb43a", &status);  // two stored commits start with it
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("0ddb43a00000, 0ddb43a4d977"), std::string::npos) << status.error_message();

  // An abbreviation is not stored: the client resolves it first.
  v1::ReportRegressionsRequest req;
  Regression abbreviated = Verdict(kFused, "same", 1.0);
  abbreviated.baseline_commit = "0ddb43a";
  RegressionToProto(abbreviated, req.add_regressions());
  v1::ReportRegressionsResponse resp;
  grpc::Status refused = stubs_.tuning->ReportRegressions(Ctx().get(), req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("regressions[0].baseline_commit"), std::string::npos) << refused.error_message();
  EXPECT_EQ(Listed().size(), 2u);
}

TEST_F(ServerRegressionsTest, UploadWithoutTheTokenIsUnauthenticatedEvenWithOpenReads) {
  StartServer(/*with_metrics=*/false, /*open_reads=*/true);
  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    absl::StatusOr<int> uploaded =
        UploadRegressions(*stubs_.tuning, Ctx(token).get(), {Verdict(kFused, "regressed", 1.08)});
    EXPECT_EQ(uploaded.status().code(), absl::StatusCode::kUnauthenticated) << uploaded.status();
  }
  EXPECT_TRUE(Listed().empty());
}

TEST_F(ServerRegressionsTest, ChangePointsStoredInTheDatabaseAreListedWithFilters) {
  {
    auto store = Store::Open(dir_.File("fusetune.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    ChangePointRow step;
    step.commit = "c0ffee123456";
    step.position = 17;
    step.mean_before_us = 100;
    step.mean_after_us = 103;
    step.ratio = 1.03;
    step.p_value = 1e-5;
    step.direction = "slower";
    ASSERT_TRUE((*store)->ReplaceChangePoints(kCpuClass, "nightly", KeyOf(SeedProblem(256)), kFused, {step}).ok());
  }
  StartServer(/*with_metrics=*/false);
  v1::ListChangePointsRequest req;
  v1::ListChangePointsResponse resp;
  ASSERT_TRUE(stubs_.tuning->ListChangePoints(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.change_points_size(), 1);
  EXPECT_EQ(resp.change_points(0).commit(), "c0ffee123456");
  EXPECT_EQ(resp.change_points(0).position(), 17);
  EXPECT_EQ(resp.change_points(0).direction(), "slower");
  EXPECT_EQ(resp.change_points(0).suite(), "nightly");
  // The commit filter takes any form of the commit.
  for (const char* form : {"C0FFEE1234567890C0FFEE1234567890C0FFEE12", "c0ffee1"}) {
    req.set_commit(form);
    resp.Clear();
    ASSERT_TRUE(stubs_.tuning->ListChangePoints(Ctx().get(), req, &resp).ok()) << form;
    EXPECT_EQ(resp.change_points_size(), 1) << form;
  }
  req.set_suite("other");
  resp.Clear();
  ASSERT_TRUE(stubs_.tuning->ListChangePoints(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.change_points_size(), 0);
  req.set_commit("not a commit!");
  grpc::Status bad = stubs_.tuning->ListChangePoints(Ctx().get(), req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace fusetune::testing
