// Building a commit with a shell command (its last line names the build; 125 = does not build),
// commit names resolved against stored commits, and the timing CPU.
#include "fusetune/regress/builds.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/store_fixtures.h"

namespace fusetune::regress {
namespace {

TEST(BuildCommit, TheLastLineNamesTheBuildAndTheCommitIsSubstituted) {
  std::string announced;
  absl::StatusOr<std::string> build =
      BuildCommit("echo building {commit}; echo /bin/sh", "abc123",
                  [&](const std::string& line) { announced = line; });
  ASSERT_TRUE(build.ok()) << build.status();
  EXPECT_EQ(*build, "/bin/sh");
  EXPECT_EQ(announced, "echo building abc123; echo /bin/sh") << "told the command line before it runs";
}

TEST(BuildCommit, Exit125IsNotFoundOtherFailuresUnavailable) {
  absl::StatusOr<std::string> skipped = BuildCommit("exit 125", "abc123");
  ASSERT_TRUE(absl::IsNotFound(skipped.status())) << skipped.status();
  EXPECT_NE(skipped.status().message().find("abc123 does not build"), std::string::npos);
  EXPECT_EQ(BuildCommit("exit 1", "abc123").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(BuildCommit("true", "abc123").status().code(), absl::StatusCode::kUnavailable) << "no path printed";
  EXPECT_EQ(BuildCommit("echo /no/such/fusetune", "abc123").status().code(), absl::StatusCode::kUnavailable);
}

TEST(IsCapiLibrary, ByTheFileName) {
  EXPECT_TRUE(IsCapiLibrary("/builds/abc/lib/libfusetune_capi.so"));
  EXPECT_TRUE(IsCapiLibrary("libfusetune_capi.so.1"));
  EXPECT_FALSE(IsCapiLibrary("/builds/abc/bin/fusetune"));
  EXPECT_FALSE(IsCapiLibrary("/builds/libfusetune_capi.so/fusetune"));
}

TEST(RunShell, ReadsStdoutAndStatus) {
  ShellResult ok = RunShell("printf 'a\\nb\\n'");
  EXPECT_EQ(ok.status, 0);
  EXPECT_EQ(ok.out, "a\nb\n");
  EXPECT_NE(RunShell("exit 3").status, 0);
}

TEST(ResolveCommitFlag, AbbreviationsResolveAgainstTheKnownCommits) {
  EXPECT_EQ(*ResolveCommitFlag("--baseline", "aaaaaaa", {testing::kCommitA, testing::kCommitB}, "the database"),
            testing::kCommitA);
  absl::StatusOr<std::string> none = ResolveCommitFlag("--baseline", "ccccccc", {testing::kCommitA}, "the database");
  ASSERT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_NE(none.status().message().find("--baseline"), std::string::npos);
  EXPECT_NE(none.status().message().find("at least 12 hex digits"), std::string::npos);
  absl::StatusOr<std::string> several =
      ResolveCommitFlag("--baseline", "aaaaaaa", {"aaaaaaaa1111", "aaaaaaaa2222"}, "the database");
  EXPECT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument) << several.status();
}

TEST(StoredCommitsAbbreviated, OnlyForAnAbbreviationAndAStore) {
  auto store = testing::MemoryStore();
  testing::RecordBenchRun(*store, testing::kCommitA,
                          {testing::MeasuredBenchCell(testing::kProblemKey, testing::kConfigA, {1, 2, 3})});
  EXPECT_EQ(*StoredCommitsAbbreviated(store.get(), "aaaaaaa"), std::vector<std::string>{testing::kCommitA});
  EXPECT_TRUE(StoredCommitsAbbreviated(store.get(), testing::kCommitA)->empty()) << "a full hash needs no lookup";
  EXPECT_TRUE(StoredCommitsAbbreviated(nullptr, "aaaaaaa")->empty());
}

TEST(TimingCpu, ExplicitWinsAndTheCpuBackendIsUnpinned) {
  EXPECT_EQ(TimingCpu(3, "cuda"), 3);
  EXPECT_EQ(TimingCpu(-1, "cuda"), -1);
  EXPECT_EQ(TimingCpu(kAutoTimingCpu, "cpu"), -1);
  EXPECT_GE(TimingCpu(kAutoTimingCpu, "cuda"), 0) << "a GPU backend launches from an allowed CPU";
}

}  // namespace
}  // namespace fusetune::regress
