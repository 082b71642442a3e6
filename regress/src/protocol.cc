#include "protocol.h"

#include <cmath>
#include <exception>

#include "absl/strings/str_cat.h"
#include "fusetune/base/strings.h"
#include "fusetune/regress/suite.h"
#include "fusetune/records/commit.h"
#include "fusetune/records/json.h"

namespace fusetune::regress::protocol {
namespace {

// The parsed reply, or the child's error as a status (Unavailable: the other build failed).
absl::StatusOr<nlohmann::json> ParseReply(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::UnavailableError(Cat("malformed reply from bench-serve: ", line.substr(0, 200)));
  }
  if (j.contains("error")) {
    const std::string message = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
    return absl::UnavailableError(Cat("bench-serve: ", message));
  }
  return j;
}

}  // namespace

std::string RequestLine(Op op, const AttentionProblem& problem, const KernelConfig& config, int side) {
  if (op == Op::kQuit) return R"({"op":"quit"})";
  const char* name = op == Op::kCanRun ? "can_run" : op == Op::kVerify ? "verify" : "block";
  nlohmann::json j = {{"op", name},
                      {"problem", nlohmann::json::parse(ProblemToJson(problem))},
                      {"config", config.Key()}};
  if (side != 0) j["side"] = side;
  return j.dump();
}

std::string OpenSideLine(const std::string& library, const std::string& commit, bool planted) {
  nlohmann::json j = {{"op", "open_side"}, {"library", library}, {"commit", commit}};
  if (planted) j["planted"] = true;
  return j.dump();
}

absl::StatusOr<Request> ParseRequest(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("op") || !j["op"].is_string()) {
    return absl::InvalidArgumentError("a request is a JSON object with a string \"op\"");
  }
  Request r;
  const std::string op = j["op"].get<std::string>();
  if (op == "quit") return r;
  if (op == "can_run") {
    r.op = Op::kCanRun;
  } else if (op == "verify") {
    r.op = Op::kVerify;
  } else if (op == "block") {
    r.op = Op::kBlock;
  } else if (op == "open_side") {
    r.op = Op::kOpenSide;
    if (!j.contains("library") || !j["library"].is_string() || j["library"].get<std::string>().empty() ||
        !j.contains("commit") || !j["commit"].is_string()) {
      return absl::InvalidArgumentError("open_side needs a non-empty string \"library\" and a string \"commit\"");
    }
    absl::StatusOr<std::string> commit = CanonicalCommit(j["commit"].get<std::string>());
    if (!commit.ok()) return absl::InvalidArgumentError(Cat("open_side: ", commit.status().message()));
    if (j.contains("planted") && !j["planted"].is_boolean()) {
      return absl::InvalidArgumentError("open_side's \"planted\" is a boolean");
    }
    r.library = j["library"].get<std::string>();
    r.commit = *std::move(commit);
    r.planted = j.value("planted", false);
    return r;
  } else {
    return absl::InvalidArgumentError(Cat("unknown op \"", op, "\" (can_run, verify, block, open_side, quit)"));
  }
  if (j.contains("side")) {
    if (!j["side"].is_number_integer() || j["side"].get<int64_t>() < 0 || j["side"].get<int64_t>() > 1000) {
      return absl::InvalidArgumentError("\"side\" is a side's number, an integer from 0");
    }
    r.side = static_cast<int>(j["side"].get<int64_t>());
  }
  if (!j.contains("problem") || !j.contains("config") || !j["config"].is_string()) {
    return absl::InvalidArgumentError("can_run, verify and block need \"problem\" and a string \"config\"");
  }
  absl::StatusOr<AttentionProblem> problem = ProblemFromJson(j["problem"].dump());
  if (!problem.ok()) return problem.status();
  absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(j["config"].get<std::string>());
  if (!config.ok()) return config.status();
  r.problem = *std::move(problem);
  r.config = *config;
  return r;
}

nlohmann::json HelloToJson(const SourceInfo& info) {
  return {{"protocol", kVersion},
          {"commit", info.commit},
          {"device", nlohmann::json::parse(DeviceInfoToJson(info.device))},
          {"environment", info.environment}};
}

absl::StatusOr<SourceInfo> ParseHello(std::string_view line) {
  absl::StatusOr<nlohmann::json> j = ParseReply(line);
  if (!j.ok()) return j.status();
  if (!j->contains("protocol") || !(*j)["protocol"].is_number_integer() || (*j)["protocol"].get<int>() != kVersion) {
    return absl::UnavailableError(Cat("bench-serve speaks another protocol than ", kVersion, ": ",
                                               line.substr(0, 200)));
  }
  try {
    SourceInfo info;
    // A build's own commit enters here: in canonical form from now on.
    absl::StatusOr<std::string> commit = CanonicalCommit(j->at("commit").get<std::string>());
    if (!commit.ok()) return absl::UnavailableError(Cat("bench-serve's hello: ", commit.status().message()));
    info.commit = *std::move(commit);
    info.environment = j->value("environment", "");
    absl::StatusOr<DeviceInfo> device = DeviceInfoFromJson(j->at("device").dump());
    if (!device.ok()) return absl::UnavailableError(device.status().message());
    info.device = *std::move(device);
    return info;
  } catch (const std::exception& e) {
    return absl::UnavailableError(Cat("malformed hello from bench-serve: ", e.what()));
  }
}

nlohmann::json CheckToJson(const CellCheck& check) {
  return {{"outcome", std::string(TrialOutcomeName(check.outcome))},
          {"message", check.message},
          {"max_abs_error", check.max_abs_error},
          {"max_rel_error", check.max_rel_error},
          {"tolerance", check.tolerance}};
}

absl::StatusOr<CellCheck> ParseCheck(std::string_view line) {
  absl::StatusOr<nlohmann::json> j = ParseReply(line);
  if (!j.ok()) return j.status();
  try {
    CellCheck check;
    absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(j->at("outcome").get<std::string>());
    if (!outcome.ok()) return absl::UnavailableError(outcome.status().message());
    check.outcome = *outcome;
    check.message = j->value("message", "");
    // A NaN error is sent as null by the JSON writer: it reads back as NaN, failing the cell.
    auto number = [&](const char* key) {
      const nlohmann::json& v = j->at(key);
      return v.is_null() ? std::nan("") : v.get<double>();
    };
    check.max_abs_error = number("max_abs_error");
    check.max_rel_error = number("max_rel_error");
    check.tolerance = number("tolerance");
    return check;
  } catch (const std::exception& e) {
    return absl::UnavailableError(Cat("malformed check from bench-serve: ", e.what()));
  }
}

absl::StatusOr<OpenedSide> ParseOpenSide(std::string_view line) {
  absl::StatusOr<nlohmann::json> j = ParseReply(line);
  if (!j.ok()) return j.status();
  if (!j->contains("side") || !(*j)["side"].is_number_integer() || (*j)["side"].get<int64_t>() < 1 ||
      (*j)["side"].get<int64_t>() > 1000) {
    return absl::UnavailableError(Cat("malformed open_side reply from bench-serve: ", line.substr(0, 200)));
  }
  for (const char* flag : {"shared_scratch", "shared_workers"}) {
    if (j->contains(flag) && !(*j)[flag].is_boolean()) {
      return absl::UnavailableError(Cat("malformed open_side reply from bench-serve: ", line.substr(0, 200)));
    }
  }
  return OpenedSide{static_cast<int>((*j)["side"].get<int64_t>()), j->value("shared_scratch", false),
                    j->value("shared_workers", false)};
}

absl::StatusOr<bool> ParseCanRun(std::string_view line, std::string* why) {
  absl::StatusOr<nlohmann::json> j = ParseReply(line);
  if (!j.ok()) return j.status();
  if (!j->contains("can_run") || !(*j)["can_run"].is_boolean()) {
    return absl::UnavailableError(Cat("malformed can_run reply from bench-serve: ", line.substr(0, 200)));
  }
  if (why != nullptr) *why = j->value("why", "");
  return (*j)["can_run"].get<bool>();
}

nlohmann::json BlockToJson(const SampleBlock& block) {
  return {{"block", nlohmann::json::parse(SampleBlocksToJson({block}))}};
}

absl::StatusOr<SampleBlock> ParseBlock(std::string_view line) {
  absl::StatusOr<nlohmann::json> j = ParseReply(line);
  if (!j.ok()) return j.status();
  if (!j->contains("block")) return absl::UnavailableError("malformed block reply from bench-serve");
  absl::StatusOr<std::vector<SampleBlock>> blocks = SampleBlocksFromJson((*j)["block"].dump());
  if (!blocks.ok() || blocks->size() != 1 || !((*blocks)[0].median_us > 0) || !std::isfinite((*blocks)[0].median_us)) {
    return absl::UnavailableError(Cat("malformed block reply from bench-serve: ", line.substr(0, 200)));
  }
  return (*blocks)[0];
}

}  // namespace fusetune::regress::protocol
