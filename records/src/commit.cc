#include "fusetune/records/commit.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "fusetune/base/strings.h"

namespace fusetune {
namespace {

bool IsHexDigits(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); });
}

std::string Lowercase(std::string_view text) {
  std::string out(text);
  absl::AsciiStrToLower(&out);
  return out;
}

}  // namespace

absl::StatusOr<CommitName> ParseCommitName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("a commit name must not be empty");
  for (char c : name) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("a commit name has no whitespace or non-printable characters");
    }
  }
  if (!IsHexDigits(name) || name.size() < kMinCommitAbbreviation) return CommitName{CommitNameKind::kLabel, std::string(name)};
  if (name.size() < kCommitHashDigits) return CommitName{CommitNameKind::kAbbreviation, Lowercase(name)};
  return CommitName{CommitNameKind::kHash, Lowercase(name.substr(0, kCommitHashDigits))};
}

absl::StatusOr<std::string> CanonicalCommit(std::string_view name) {
  absl::StatusOr<CommitName> parsed = ParseCommitName(name);
  if (!parsed.ok()) return parsed.status();
  if (parsed->kind == CommitNameKind::kAbbreviation) {
    return absl::InvalidArgumentError(Cat("commit '", name, "' is abbreviated (", name.size(),
                                          " hex digits) and cannot be resolved here: give at least ",
                                          kCommitHashDigits, " digits"));
  }
  return std::move(parsed->text);
}

absl::StatusOr<std::string> ResolveCommitName(std::string_view name, const std::vector<std::string>& known,
                                              std::string_view where) {
  absl::StatusOr<CommitName> parsed = ParseCommitName(name);
  if (!parsed.ok()) return parsed.status();
  if (parsed->kind != CommitNameKind::kAbbreviation) return std::move(parsed->text);
  std::vector<std::string> matches;
  for (const std::string& commit : known) {
    absl::StatusOr<CommitName> k = ParseCommitName(commit);
    if (!k.ok() || k->kind != CommitNameKind::kHash || k->text != commit) continue;  // not canonical
    if (commit.compare(0, parsed->text.size(), parsed->text) != 0) continue;
    if (std::find(matches.begin(), matches.end(), commit) == matches.end()) matches.push_back(commit);
  }
  if (matches.empty()) return absl::NotFoundError(Cat("commit '", name, "' matches no commit of ", where));
  if (matches.size() > 1) {
    std::sort(matches.begin(), matches.end());
    return absl::InvalidArgumentError(Cat("commit '", name, "' is ambiguous in ", where, ": it abbreviates ",
                                          absl::StrJoin(matches, ", "), "; give more digits"));
  }
  return matches.front();
}

}  // namespace fusetune
