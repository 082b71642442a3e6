#include "fusetune/wire/failover.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "fusetune/base/strings.h"
#include "fusetune/wire/connection.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

namespace fusetune {
namespace {

// Sees how every call on channel `index` ends and moves the current address on when the
// service did not answer.
class FailoverInterceptor : public grpc::experimental::Interceptor {
 public:
  FailoverInterceptor(std::shared_ptr<std::atomic<size_t>> current, size_t index, size_t count)
      : current_(std::move(current)), index_(index), count_(count) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status* status = methods->GetRecvStatus();
      if (status != nullptr && IsFailoverCode(status->error_code())) {
        size_t expected = index_;
        current_->compare_exchange_strong(expected, (index_ + 1) % count_);
      }
    }
    methods->Proceed();
  }

 private:
  std::shared_ptr<std::atomic<size_t>> current_;
  size_t index_;
  size_t count_;
};

class FailoverInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  FailoverInterceptorFactory(std::shared_ptr<std::atomic<size_t>> current, size_t index, size_t count)
      : current_(std::move(current)), index_(index), count_(count) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new FailoverInterceptor(current_, index_, count_);
  }

 private:
  std::shared_ptr<std::atomic<size_t>> current_;
  size_t index_;
  size_t count_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseServiceAddresses(std::string_view addresses, std::string_view flag) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(ToAbsl(addresses), ',')) {
    const std::string address(absl::StripAsciiWhitespace(part));
    if (address.empty()) {
      return absl::InvalidArgumentError(Cat(flag, " '", addresses, "': an empty address in the list (expected host:port[,host:port...], e.g. ",
                                            kDefaultServiceAddress, ")"));
    }
    if (absl::Status st = ValidateServiceAddress(address, flag); !st.ok()) return st;
    out.push_back(address);
  }
  return out;
}

bool IsFailoverCode(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::shared_ptr<FailoverChannels> FailoverChannels::Create(const std::vector<std::string>& addresses,
                                                           const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                                           const grpc::ChannelArguments& arguments) {
  std::shared_ptr<FailoverChannels> out(new FailoverChannels());
  out->addresses_ = addresses;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses.size() == 1) {
      out->channels_.push_back(grpc::CreateCustomChannel(addresses[i], credentials, arguments));
      continue;
    }
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
    factories.push_back(std::make_unique<FailoverInterceptorFactory>(out->current_, i, addresses.size()));
    out->channels_.push_back(grpc::experimental::CreateCustomChannelWithInterceptors(
        addresses[i], credentials, arguments, std::move(factories)));
  }
  return out;
}

void FailoverChannels::Failed(size_t failed) {
  if (channels_.empty()) return;
  size_t expected = failed;
  current_->compare_exchange_strong(expected, (failed + 1) % channels_.size());
}

}  // namespace fusetune
