#include "fusetune/records/commit.h"

#include "gtest/gtest.h"

namespace fusetune {
namespace {

constexpr char kFull[] = "0DDB43A4D977c3b1e0f2a9d8c7b6a5f4e3d2c1b0";

TEST(CommitName, AHashOfAnyLengthFromTwelveDigitsIsItsFirstTwelveLowercased) {
  EXPECT_EQ(*CanonicalCommit(kFull), "0ddb43a4d977");
  EXPECT_EQ(*CanonicalCommit("0ddb43a4d977"), "0ddb43a4d977");
  EXPECT_EQ(*CanonicalCommit("0DDB43A4D977"), "0ddb43a4d977");
  EXPECT_EQ(*CanonicalCommit("0ddb43a4d977c"), "0ddb43a4d977");
  EXPECT_EQ(*CanonicalCommit(std::string(64, 'F')), std::string(12, 'f'));  // a SHA-256 repository
  EXPECT_EQ(ParseCommitName(kFull)->kind, CommitNameKind::kHash);
}

TEST(CommitName, LabelsAreKeptVerbatim) {
  for (const char* label : {"unknown", "local-dirty", "Release-1.2", "0ddb43a4d977-dirty", "abc123", "c0ffee", "b0"}) {
    ASSERT_TRUE(ParseCommitName(label).ok()) << label;
    EXPECT_EQ(ParseCommitName(label)->kind, CommitNameKind::kLabel) << label;
    EXPECT_EQ(*CanonicalCommit(label), label);
  }
}

TEST(CommitName, SevenToElevenHexDigitsAreAnAbbreviationThatMustBeResolved) {
  for (const char* abbreviation : {"0ddb43a", "0DDB43A4D97"}) {
    absl::StatusOr<CommitName> parsed = ParseCommitName(abbreviation);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed->kind, CommitNameKind::kAbbreviation) << abbreviation;
    absl::StatusOr<std::string> canonical = CanonicalCommit(abbreviation);
    EXPECT_EQ(canonical.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(canonical.status().message().find("at least 12 digits"), std::string::npos) << canonical.status();
  }
  EXPECT_EQ(ParseCommitName("0DDB43A")->text, "0ddb43a");
}

TEST(CommitName, AnEmptyNameOrOneWithWhitespaceIsRefused) {
  for (const char* bad : {"", "two words", "tab\there", "new\nline"}) {
    EXPECT_EQ(ParseCommitName(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(CanonicalCommit(bad).ok()) << bad;
  }
}

TEST(ResolveCommitName, AnAbbreviationIsTheOneKnownHashThatStartsWithIt) {
  const std::vector<std::string> known = {"0ddb43a4d977", "1234567890ab", "unknown", "0ddb43a"};
  EXPECT_EQ(*ResolveCommitName("0ddb43a", known, "the database"), "0ddb43a4d977");
  EXPECT_EQ(*ResolveCommitName("0DDB43A4D", known, "the database"), "0ddb43a4d977");
  // Hashes and labels need nothing known.
  EXPECT_EQ(*ResolveCommitName(kFull, {}, "the database"), "0ddb43a4d977");
  EXPECT_EQ(*ResolveCommitName("local-dirty", {}, "the database"), "local-dirty");
}

TEST(ResolveCommitName, NoMatchIsNotFoundAndSeveralAreAnErrorNamingThem) {
  absl::StatusOr<std::string> none = ResolveCommitName("fedcba9", {"0ddb43a4d977"}, "the candidate build");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("the candidate build"), std::string::npos) << none.status();
  absl::StatusOr<std::string> two =
      ResolveCommitName("0ddb43a", {"0ddb43a4d977", "0ddb43a00000", "0ddb43a4d977"}, "the database");
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("0ddb43a00000, 0ddb43a4d977"), std::string::npos) << two.status();
  // A stored abbreviation or a longer form is not a commit to resolve to.
  EXPECT_EQ(ResolveCommitName("0ddb43a", {"0ddb43a4d9", "0ddb43a4d977ff"}, "x").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fusetune
