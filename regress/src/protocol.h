// The bench protocol between a driver and a child `fusetune bench-serve`: one JSON object per
// line each way. Requests: {"op": "can_run" | "verify" | "block", "problem": <problem JSON>,
// "config": KEY[, "side": N]}, {"op": "open_side", "library": PATH, "commit": COMMIT[,
// "planted": true]} and
// {"op": "quit"}. Replies: the hello first ({"protocol": 1, "commit", "device",
// "environment"}), then one reply per request: {"can_run": bool, "why": reason}, a check ({"outcome", "message", "max_abs_error",
// "max_rel_error", "tolerance"}), a block ({"block": [one block in the records JSON form]}),
// {"side": N} for open_side, or {"error": MESSAGE[, "fatal": true]}.
//
// Sides: open_side loads another build's C ABI library into the child as side N (1, 2, ...),
// measured by the child's Runner on the same inputs as its own kernels (side 0, the default
// when a request names none); "planted" gives it the child's --plant-slowdown specs. A child older than sides answers open_side with an unknown-op
// error, so the driver can fall back to a process per build.
#ifndef FUSETUNE_REGRESS_SRC_PROTOCOL_H_
#define FUSETUNE_REGRESS_SRC_PROTOCOL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fusetune/regress/block_source.h"
#include "nlohmann/json.hpp"

namespace fusetune::regress::protocol {

inline constexpr int kVersion = 1;

enum class Op { kCanRun, kVerify, kBlock, kOpenSide, kQuit };

struct Request {
  Op op = Op::kQuit;
  AttentionProblem problem;
  KernelConfig config;
  int side = 0;          // can_run, verify, block: which side measures (0: the child's own kernels)
  std::string library;   // open_side: the C ABI library to load
  std::string commit;    // open_side: its build's commit, canonical
  bool planted = false;  // open_side: with the child's planted slowdowns
};

// A can_run, verify, block or quit request; `side` 0 is left out (what a child older than
// sides understands).
std::string RequestLine(Op op, const AttentionProblem& problem, const KernelConfig& config, int side = 0);
std::string OpenSideLine(const std::string& library, const std::string& commit, bool planted);
absl::StatusOr<Request> ParseRequest(std::string_view line);

nlohmann::json HelloToJson(const SourceInfo& info);
absl::StatusOr<SourceInfo> ParseHello(std::string_view line);

nlohmann::json CheckToJson(const CellCheck& check);
absl::StatusOr<CellCheck> ParseCheck(std::string_view line);

// The reply to open_side: the new side's number (>= 1) and whether its scratch lies in the arena
// the child shares between its sides (false from a child that does not say); the child's error
// as Unavailable.
struct OpenedSide {
  int side = 0;
  bool shared_scratch = false;
  bool shared_workers = false;
};
absl::StatusOr<OpenedSide> ParseOpenSide(std::string_view line);

// The reply to can_run: whether, and why not.
absl::StatusOr<bool> ParseCanRun(std::string_view line, std::string* why);

nlohmann::json BlockToJson(const SampleBlock& block);
absl::StatusOr<SampleBlock> ParseBlock(std::string_view line);

}  // namespace fusetune::regress::protocol

#endif  // FUSETUNE_REGRESS_SRC_PROTOCOL_H_
