// `fusetune best --server ADDR`: the service's answer (exact, nearest or default).
#include <cstdio>
#include <string>

#include "best_config_json.h"
#include "commands.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/provenance.h"
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
  grpc::Status status = connection->tuning().GetBestConfig(connection->Context().get(), req, &r);
  if (!status.ok()) return RpcFailure(cmd, status);
  const std::string provenance(ConfigProvenanceName(ConfigProvenanceFromProto(r.provenance())));
  if (json) {
    BestConfig answer;
    answer.device_class = device_class;
    answer.problem_key = r.problem_key();
    answer.config_key = r.config().key();
    answer.median_us = r.median_us();
    answer.speedup_vs_materialized = r.speedup_vs_materialized();
    answer.max_rel_error = r.max_rel_error();
    answer.run_id = r.run_id();
    answer.commit = r.commit();
    const BestConfigProvenance from{provenance, r.source_problem_key(), r.distance()};
    std::printf("%s\n", BestConfigJson(answer, from).dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s\n", r.config().key().c_str());
  std::printf("  problem   %s\n  device    %s\n  answer    %s", r.problem_key().c_str(), device_class.c_str(),
              provenance.c_str());
  if (r.provenance() == v1::GetBestConfigResponse::NEAREST) {
    std::printf(" (from %s, distance %.2f)", r.source_problem_key().c_str(), r.distance());
  } else if (r.provenance() == v1::GetBestConfigResponse::DEFAULT) {
    std::printf(" (nothing comparable tuned: submit a job)");
  }
  std::printf("\n");
  if (r.provenance() != v1::GetBestConfigResponse::DEFAULT) {
    std::printf("  median    %.1f us on the source problem\n  speedup   %.2fx vs materialized\n"
                "  error     %.3g max rel\n  from      run %lld, commit %s\n",
                r.median_us(), r.speedup_vs_materialized(), r.max_rel_error(), static_cast<long long>(r.run_id()),
                r.commit().c_str());
  }
  return kExitOk;
}

}  // namespace fusetune::cli
