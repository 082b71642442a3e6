// Problem and tuning flags shared by the sweep, best and bench commands, and the
// conversions from their text to core types (each a usage error when malformed).
#ifndef FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_
#define FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {
class Store;
}

namespace fusetune::cli {

struct ProblemFlags {
  std::string preset;            // "seed" or empty
  std::string problem_key;       // a canonical problem key instead of the shape flags
  std::string kind = "prefill";
  int batch = 1;
  int heads = 12;
  int kv_heads = 0;              // 0 = heads
  std::vector<int> seq;          // query lengths (one problem per entry)
  std::vector<int> kv_seq;       // key lengths: empty = seq; one entry = for all; else per seq
  int head_dim = 64;
  bool causal = false;
  std::string dtype = "fp32";

  // `allow_list`: several --seq values (and --preset) allowed; else exactly one problem.
  void Register(CLI::App* command, bool allow_list);
  // The problems the flags describe, each validated. InvalidArgument with a message naming
  // the flag when they do not describe valid problems.
  absl::StatusOr<std::vector<AttentionProblem>> Build() const;
};

// "fused,partial" -> variants; InvalidArgument on an unknown name. Empty -> empty.
absl::StatusOr<std::vector<Variant>> ParseVariants(const std::vector<std::string>& names);
absl::StatusOr<std::vector<Precision>> ParsePrecisions(const std::vector<std::string>& names);

// Adds `--db` (the SQLite database file) to `command`, storing into `path` (whose value is
// the default). An empty path is a usage error: SQLite would open a private temporary
// database in its place and a sweep's results would vanish.
CLI::Option* AddDatabaseOption(CLI::App* command, std::string* path, const std::string& description);

// Opens an existing database read-only for reading commands: never creates, migrates or
// changes it, and works in a directory this process cannot write. NotFound ("no database at
// PATH", with a hint) when the file does not exist, so that a typo in --db does not create
// an empty database; other errors name the file and say what to do.
absl::StatusOr<std::unique_ptr<Store>> OpenExistingStore(const std::string& path);

// Opens an existing database for a command that reads recorded results and adds to them
// (audit): migrates it like any writer, but a missing file is NotFound with the same hint as
// OpenExistingStore instead of a new empty database.
absl::StatusOr<std::unique_ptr<Store>> OpenExistingStoreForWriting(const std::string& path);

// Prints "fusetune <command>: <message>" and a hint to stderr; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// Prints "fusetune <command>: <message>" to stderr; returns kExitFailure.
int Failure(const std::string& command, const std::string& message);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_
