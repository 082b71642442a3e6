// `fusetune serve`, `submit`, `jobs` and `best --server` as real processes.
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
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

}  // namespace
}  // namespace fusetune::testing
