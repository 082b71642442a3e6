// fusetune db copy: an SQLite database copied into PostgreSQL (all tables, one transaction,
// idempotent), with a row count per table.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "fusetune/db/copy.h"
#include "fusetune/db/store.h"
#include "problem_flags.h"

namespace fusetune::cli {
namespace {

struct CopyFlags {
  std::string from;
  std::string to;
};

int RunCopyCommand(const CopyFlags& f) {
  const std::string cmd = "db copy";
  absl::StatusOr<std::vector<TableCopy>> copied = CopySqliteToPostgres(f.from, f.to);
  if (!copied.ok()) {
    if (absl::IsInvalidArgument(copied.status())) return UsageError(cmd, std::string(copied.status().message()));
    if (absl::IsNotFound(copied.status())) return Failure(cmd, std::string(copied.status().message()), kExitNotFound);
    return Failure(cmd, std::string(copied.status().message()));
  }
  std::printf("copied %s into %s\n\n", f.from.c_str(), RedactDatabaseUrl(f.to).c_str());
  std::printf("| table | source rows | copied | already there | rows in target |\n|---|---:|---:|---:|---:|\n");
  int64_t total_copied = 0;
  for (const TableCopy& t : *copied) {
    std::printf("| %s | %lld | %lld | %lld | %lld |\n", t.table.c_str(), static_cast<long long>(t.source_rows),
                static_cast<long long>(t.copied_rows), static_cast<long long>(t.present_rows),
                static_cast<long long>(t.target_rows));
    total_copied += t.copied_rows;
  }
  std::printf("\n%lld rows copied; every source row is in the target\n", static_cast<long long>(total_copied));
  return kExitOk;
}

}  // namespace

void AddDbCommand(CLI::App& app, CommandContext& context) {
  CLI::App* db = app.add_subcommand("db", "Database maintenance: 'fusetune db copy'.");
  db->require_subcommand(1);
  auto flags = std::make_shared<CopyFlags>();
  CLI::App* copy = db->add_subcommand(
      "copy",
      "Copy every row of an SQLite database into a PostgreSQL one (created or migrated first), keeping ids, in one "
      "transaction (nothing is copied on failure). Idempotent: rows already copied are skipped, so a second run "
      "copies nothing; a target row with the same key but other content stops the copy. Prints per table the "
      "source rows, the rows copied and those already there. Exit 0 ok, 1 failure, 2 bad flags, 3 no such file.");
  copy->add_option("--from", flags->from, "the SQLite database file (only read)")->required();
  copy->add_option("--to", flags->to, "the PostgreSQL database: a postgresql:// URL")->required();
  SetAction(copy, context, [flags] { return RunCopyCommand(*flags); });
}

}  // namespace fusetune::cli
