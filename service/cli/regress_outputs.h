// What `fusetune regress` leaves behind: the candidate's bench run and the verdict rows in the
// database, the JUnit and markdown reports, the markdown on stdout, and (service builds, with
// --server) the verdict rows on a fusetune server.
#ifndef FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_
#define FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "fusetune/regress/compare.h"
#include "fusetune/regress/regress_run.h"
#include "fusetune/regress/suite.h"
#include "fusetune/db/store.h"

#ifdef FUSETUNE_WITH_SERVICE
#include "server_connection.h"
#endif

namespace fusetune::cli {

// The flags of `fusetune regress`: what the run compares (regress::RegressOptions) and where its
// outputs go.
struct RegressFlags : regress::RegressOptions {
  std::string suite;
  std::string junit;
  std::string markdown;
  std::string json;               // the whole comparison, both sides' blocks (regress::ComparisonToJson)
  std::string html;               // the HTML report (report/.../regress_report.h)
  std::string html_history_link;  // the history page its cells link to, relative to it
  bool fail_on_unknown = false;  // an unknown cell fails the run (not a calibration's)
#ifdef FUSETUNE_WITH_SERVICE
  ServerConnectionFlags server;  // server.server empty: upload nothing
#endif
};

// --server, --token-file, --tls-ca, --timeout in service builds; nothing otherwise.
void AddRegressServerOptions(CLI::App* command, RegressFlags* flags);

// --correction NAME (regress::CorrectionName's names), stored in *correction when given.
void AddCorrectionOption(CLI::App* command, std::optional<regress::Correction>* correction);
// --round-order NAME (regress::RoundOrderName's names), stored in *order when given.
void AddRoundOrderOption(CLI::App* command, std::optional<regress::RoundOrder>* order);

// OK when the output file `path` (given with `flag`) can be written at the end of a command:
// it is not a directory, and the nearest existing directory above it lets this process create
// a file (probed with a temporary file, removed at once; missing directories below it are
// created when the file is written). Empty `path`: nothing asked, OK. InvalidArgument naming the
// flag otherwise. Called before anything is measured or stored, so bad output paths cost nothing.
absl::Status CheckOutputFile(const std::string& flag, const std::string& path);

// Stores the candidate's measurement as a bench run and the verdict rows (creating the database
// when `store` is null), writes the reports, prints the markdown, uploads with --server. A
// calibration's reports say so, with what it measured (a JUnit property "calibration"). The
// first failure is returned; what was written before it stays.
absl::Status WriteRegressOutputs(const RegressFlags& flags, const regress::Suite& suite,
                                 const regress::Comparison& comparison, const std::vector<std::string>& notes,
                                 std::unique_ptr<Store>& store);

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_REGRESS_OUTPUTS_H_
