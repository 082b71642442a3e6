// Commit names: how fusetune names the commit a build, run, verdict or job belongs to, and the
// one form in which every commit is stored and compared.
//
// A commit name is one of three kinds:
//   hash          12 or more hex digits, either case (git's 40, a SHA-256 repository's 64, the
//                 12 a build bakes in). Canonical form: its first kCommitHashDigits digits,
//                 lowercased.
//   abbreviation  kMinCommitAbbreviation to 11 hex digits (what people type; git's default
//                 --short). It names a commit only once resolved against commits known in full
//                 (a repository, a database's rows, a build's own commit): ResolveCommitName.
//                 Never stored.
//   label         anything else, kept verbatim: builds outside git report kUnknownCommit, tests and
//                 local runs use names like "local-dirty", and an all-hex name shorter than an
//                 abbreviation is too short to be taken for a commit.
// A commit name is one printable word: empty names and names with whitespace or control
// characters are refused.
//
// Every place where a commit enters fusetune (a command-line flag, a build's report of its own
// commit, an RPC field) turns it into its canonical form once; from there on two commits are
// the same exactly when their strings are equal. Two commits whose first 12 digits agree would
// be taken for one: a 48-bit prefix, which makes that a remote chance for a repository of
// fusetune's size.
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_RECORDS_COMMIT_H_
#define FUSETUNE_RECORDS_COMMIT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fusetune {

// The length of a canonical hash.
inline constexpr size_t kCommitHashDigits = 12;
// The shortest abbreviation: all-hex names shorter than this are labels.
inline constexpr size_t kMinCommitAbbreviation = 7;
// The label of a build outside git, which knows no commit of its own.
inline constexpr char kUnknownCommit[] = "unknown";

enum class CommitNameKind { kHash, kAbbreviation, kLabel };

struct CommitName {
  CommitNameKind kind = CommitNameKind::kLabel;
  // A hash's canonical form, an abbreviation's digits lowercased, a label verbatim.
  std::string text;
};

// `name` classified (see above). InvalidArgument for an empty name or one with whitespace or
// control characters.
absl::StatusOr<CommitName> ParseCommitName(std::string_view name);

// The canonical form of a hash or a label. InvalidArgument as ParseCommitName, and for an
// abbreviation (the message says to give at least kCommitHashDigits digits): callers that can
// resolve abbreviations use ResolveCommitName.
absl::StatusOr<std::string> CanonicalCommit(std::string_view name);

// `name` in canonical form, abbreviations resolved against `known`, the commits at hand
// (`where` says what they are, for messages: "the database", "the candidate build"): a hash or
// a label is its canonical form whatever `known` holds; an abbreviation is the one canonical
// hash in `known` that starts with it (entries of `known` that are not canonical hashes are
// ignored). NotFound when no entry does, InvalidArgument when several do (the message lists
// them); InvalidArgument as ParseCommitName.
absl::StatusOr<std::string> ResolveCommitName(std::string_view name, const std::vector<std::string>& known,
                                              std::string_view where);

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_COMMIT_H_
