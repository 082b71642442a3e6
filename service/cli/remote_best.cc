// `fusetune best --server ADDR`: the service's answer (exact, nearest or default).
#include <cstdio>
#include <string>

#include "best_config_json.h"
#include "commands.h"
#include "fusetune/wire/convert.h"
#include "fusetune/base/strings.h"
#include "fusetune/wire/provenance.h"
#include "fusetune/wire/records_convert.h"
#include "nlohmann/json.hpp"
#include "problem_flags.h"
#include "server_connection.h"

namespace fusetune::cli {

int RunRemoteBest(const AttentionProblem& problem, const std::string& device_class,
                  const ServerConnectionFlags& flags, bool json) {
  const std::string cmd = "best";
  if (auto s = ValidateDeviceClass(device_class); !s.ok()) return UsageError(cmd, std::string(s.message()));
  auto connection = ServerConnection::Open(flags);
  if (!connection.ok()) return UsageError(cmd, std::string(connection.status().message()));
  v1::GetBestConfigRequest req;
  ProblemToProto(problem, req.mutable_problem());
  req.set_device_class(device_class);
  v1::GetBestConfigResponse r;
  grpc::Status status = connection->Read(&v1::TuningService::Stub::GetBestConfig, req, &r);
  if (!status.ok()) return RpcFailure(cmd, status);
  absl::StatusOr<BestConfigAnswer> answer = BestConfigAnswerFromProto(r);
  if (!answer.ok()) return Failure(cmd, Cat("the service's answer: ", answer.status().message()));
  const BestConfig& source = answer->source;
  const std::string provenance(ConfigProvenanceName(answer->provenance));
  if (json) {
    // The JSON names the asked-for problem; its latency and error are the source problem's.
    BestConfig asked = source;
    asked.device_class = device_class;
    asked.problem_key = answer->problem_key;
    const BestConfigProvenance from{provenance, source.problem_key, answer->distance};
    std::printf("%s\n", BestConfigJson(asked, from).dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s\n", source.config_key.c_str());
  std::printf("  problem   %s\n  device    %s\n  answer    %s", answer->problem_key.c_str(), device_class.c_str(),
              provenance.c_str());
  if (answer->provenance == ConfigProvenance::kNearest) {
    std::printf(" (from %s, distance %.2f)", source.problem_key.c_str(), answer->distance);
  } else if (answer->provenance == ConfigProvenance::kDefault) {
    std::printf(" (nothing comparable tuned: submit a job)");
  }
  std::printf("\n");
  if (answer->provenance != ConfigProvenance::kDefault) {
    std::printf("  median    %.1f us on the source problem\n  speedup   %.2fx vs materialized\n"
                "  error     %.3g max rel\n  from      run %lld, commit %s\n",
                source.median_us, source.speedup_vs_materialized, source.max_rel_error,
                static_cast<long long>(source.run_id), source.commit.c_str());
  }
  return kExitOk;
}

}  // namespace fusetune::cli
