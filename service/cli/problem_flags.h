// Problem, space-filter and backend flags shared by the sweep, audit, best and bench commands, and the
// conversions from their text to core types (each a usage error when malformed).
#ifndef FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_
#define FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/tuner/config_space.h"

namespace fusetune {
class Store;
}

namespace fusetune::cli {

struct ProblemFlags {
  std::string preset;            // "seed", "decode" or empty
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
  std::string kv_storage = "dtype";  // --kv-storage: "dtype" (K/V like Q) or "e4m3" (FP8, per-head scales)
  // A KV cache: the keys each sequence holds (the new tokens' own included), one problem per
  // --cache-len value, or one problem whose sequences hold --cache-lens keys each (batch =
  // their count, kv_len = the longest).
  std::vector<int> cache_len;
  std::vector<int> cache_lens;
  int new_tokens = 0;            // queries per sequence against a cache; 0 = 1 for decode
  int page_size = 0;             // tokens per page of a paged cache; 0 = contiguous
  int pool_pages = 0;            // 0 = the pages the sequences need
  int shared_prefix_pages = 0;

  // `allow_list`: several --seq values (and --preset) allowed; else exactly one problem.
  void Register(CLI::App* command, bool allow_list);
  // The problems the flags describe, each validated. InvalidArgument with a message naming
  // the flag when they do not describe valid problems.
  absl::StatusOr<std::vector<AttentionProblem>> Build() const;

 private:
  // Exactly one source of problems, and only the flags that go with it.
  absl::Status CheckSources() const;
  // The shape flags' common problem (kind, heads, dtype, cache options; q_len for a cache).
  absl::StatusOr<AttentionProblem> BaseProblem() const;

  // To tell an explicit flag from its default (an explicit --new-tokens 0 or --page-size 0 is
  // an error, not "one token" or "contiguous").
  CLI::Option* batch_option_ = nullptr;
  CLI::Option* new_tokens_option_ = nullptr;
  CLI::Option* page_size_option_ = nullptr;
  CLI::Option* pool_pages_option_ = nullptr;
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

// Adds `--variants` and `--precisions` (comma-separated filters on the backend's configs).
void AddSpaceFilterOptions(CLI::App* command, std::vector<std::string>* variants,
                           std::vector<std::string>* precisions);
// The ConfigSpaceOptions those two flags give; InvalidArgument on an unknown name.
absl::StatusOr<ConfigSpaceOptions> ParseSpaceFilters(const std::vector<std::string>& variants,
                                                     const std::vector<std::string>& precisions);
// OK when every problem has a non-empty space on `backend` under `space`; otherwise the
// first ConfigSpace::Create error (a usage error: the filters leave nothing to run).
absl::Status CheckSpaces(const std::vector<AttentionProblem>& problems, const Backend& backend,
                         const ConfigSpaceOptions& space);

// Adds `--backend` (default as given in `*name`) and `--device`.
void AddBackendOptions(CLI::App* command, std::string* name, int* device);
// The local backend `name` on device `device`. On failure prints why and returns nullptr
// with `*exit_code` set: kExitUsage for an unknown name or a bad device index, kExitFailure
// when it is compiled out or no device is present.
std::unique_ptr<Backend> CreateLocalBackend(const std::string& command, const std::string& name, int device,
                                            int* exit_code);

// Prints "fusetune <command>: <message>" and a hint to stderr; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// Prints "fusetune <command>: <message>" to stderr; returns kExitFailure.
int Failure(const std::string& command, const std::string& message);
// The same with the exit code given (CI-style commands exit 2 on any error; bisect-step 128).
int Failure(const std::string& command, const std::string& message, int exit_code);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_PROBLEM_FLAGS_H_
