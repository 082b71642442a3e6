// The bench protocol between a driver and a child `fusetune bench-serve`: one JSON object per
// line each way. Requests: {"op": "can_run" | "verify" | "block", "problem": <problem JSON>,
// "config": KEY}
// and {"op": "quit"}. Replies: the hello first ({"protocol": 1, "commit", "device",
// "environment"}), then one reply per request: {"can_run": bool, "why": reason}, a check ({"outcome", "message", "max_abs_error",
// "max_rel_error", "tolerance"}), a block ({"block": [one block in the records JSON form]}), or
// {"error": MESSAGE[, "fatal": true]}.
#ifndef FUSETUNE_REGRESS_SRC_PROTOCOL_H_
#define FUSETUNE_REGRESS_SRC_PROTOCOL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fusetune/regress/block_source.h"
#include "nlohmann/json.hpp"

namespace fusetune::regress::protocol {

inline constexpr int kVersion = 1;

enum class Op { kCanRun, kVerify, kBlock, kQuit };

struct Request {
  Op op = Op::kQuit;
  AttentionProblem problem;
  KernelConfig config;
};

std::string RequestLine(Op op, const AttentionProblem& problem, const KernelConfig& config);
absl::StatusOr<Request> ParseRequest(std::string_view line);

nlohmann::json HelloToJson(const SourceInfo& info);
absl::StatusOr<SourceInfo> ParseHello(std::string_view line);

nlohmann::json CheckToJson(const CellCheck& check);
absl::StatusOr<CellCheck> ParseCheck(std::string_view line);

// The reply to can_run: whether, and why not.
absl::StatusOr<bool> ParseCanRun(std::string_view line, std::string* why);

nlohmann::json BlockToJson(const SampleBlock& block);
absl::StatusOr<SampleBlock> ParseBlock(std::string_view line);

}  // namespace fusetune::regress::protocol

#endif  // FUSETUNE_REGRESS_SRC_PROTOCOL_H_
