// BestConfigFetcher over gRPC: TuningService.BatchGetBestConfig.
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fusetune/client/config_cache.h"
#include "fusetune/proto/fusetune.grpc.pb.h"
#include "fusetune/wire/connection.h"
#include "fusetune/wire/convert.h"
#include "fusetune/wire/failover.h"
#include "fusetune/wire/status.h"
#include "grpcpp/grpcpp.h"

namespace fusetune {
namespace {

class GrpcFetcher : public BestConfigFetcher {
 public:
  explicit GrpcFetcher(GrpcFetcherOptions options) : options_(std::move(options)) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (options_.tls_root_certs.empty()) {
      creds = grpc::InsecureChannelCredentials();
    } else {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options_.tls_root_certs;
      creds = grpc::SslCredentials(ssl);
    }
    // Several replicas' addresses ("a:1,b:2"): a fetch that finds one away moves the next
    // fetch (the cache's retry) to the next. A list that does not parse is one target, as before.
    absl::StatusOr<std::vector<std::string>> addresses = ParseServiceAddresses(options_.target, "target");
    channels_ = FailoverChannels::Create(addresses.ok() && addresses->size() > 1 ? *addresses
                                                                                   : std::vector<std::string>{options_.target},
                                         creds,
                                         ReconnectChannelArguments(absl::ToInt64Milliseconds(options_.reconnect_initial),
                                                                   absl::ToInt64Milliseconds(options_.reconnect_max)));
    for (size_t i = 0; i < channels_->size(); ++i) stubs_.push_back(v1::TuningService::NewStub(channels_->channel(i)));
  }

  absl::StatusOr<std::vector<absl::StatusOr<CachedConfig>>> Fetch(
      std::span<const AttentionProblem> problems) override {
    v1::BatchGetBestConfigRequest request;
    for (const AttentionProblem& p : problems) {
      v1::GetBestConfigRequest* r = request.add_requests();
      ProblemToProto(p, r->mutable_problem());
      r->set_device_class(options_.device_class);
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(options_.deadline));
    AddBearerToken(context, options_.token);
    v1::BatchGetBestConfigResponse response;
    grpc::Status status = stubs_[channels_->current()]->BatchGetBestConfig(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    if (response.entries_size() != static_cast<int>(problems.size())) {
      return absl::InternalError(absl::StrCat("service answered ", response.entries_size(),
                                              " entries for ", problems.size(), " problems"));
    }
    std::vector<absl::StatusOr<CachedConfig>> out;
    out.reserve(problems.size());
    for (const v1::BatchGetBestConfigResponse::Entry& e : response.entries()) {
      if (!e.error().empty()) {
        out.push_back(absl::InvalidArgumentError(e.error()));
        continue;
      }
      absl::StatusOr<KernelConfig> config = ConfigFromProto(e.response().config());
      if (!config.ok()) {
        out.push_back(config.status());
        continue;
      }
      out.push_back(CachedConfig{*config, ConfigProvenanceFromProto(e.response().provenance()),
                                 e.response().median_us()});
    }
    return out;
  }

 private:
  GrpcFetcherOptions options_;
  std::shared_ptr<FailoverChannels> channels_;
  std::vector<std::unique_ptr<v1::TuningService::Stub>> stubs_;  // one per address
};

}  // namespace

std::unique_ptr<BestConfigFetcher> CreateGrpcFetcher(const GrpcFetcherOptions& options) {
  return std::make_unique<GrpcFetcher>(options);
}

}  // namespace fusetune
