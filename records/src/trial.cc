#include "fusetune/records/trial.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace fusetune {
namespace {

uint64_t Fnv1a(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string_view TrialOutcomeName(TrialOutcome o) {
  switch (o) {
    case TrialOutcome::kOk: return "ok";
    case TrialOutcome::kUnsupported: return "unsupported";
    case TrialOutcome::kLaunchFailed: return "launch_failed";
    case TrialOutcome::kVerifyFailed: return "verify_failed";
    case TrialOutcome::kTimedOut: return "timed_out";
    case TrialOutcome::kInterrupted: return "interrupted";
    case TrialOutcome::kResourceExhausted: return "resource_exhausted";
  }
  return "?";
}

absl::StatusOr<TrialOutcome> ParseTrialOutcome(std::string_view name) {
  for (TrialOutcome o : {TrialOutcome::kOk, TrialOutcome::kUnsupported, TrialOutcome::kLaunchFailed,
                         TrialOutcome::kVerifyFailed, TrialOutcome::kTimedOut, TrialOutcome::kInterrupted,
                         TrialOutcome::kResourceExhausted}) {
    if (TrialOutcomeName(o) == name) return o;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown trial outcome '", std::string(name), "'"));
}

std::string_view TrialStageName(TrialStage s) {
  switch (s) {
    case TrialStage::kScreen: return "screen";
    case TrialStage::kHalving: return "halving";
    case TrialStage::kFinal: return "final";
    case TrialStage::kAudit: return "audit";
  }
  return "?";
}

absl::StatusOr<TrialStage> ParseTrialStage(std::string_view name) {
  for (TrialStage s : {TrialStage::kScreen, TrialStage::kHalving, TrialStage::kFinal, TrialStage::kAudit}) {
    if (TrialStageName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown trial stage '", std::string(name), "'"));
}

std::string TrialId(int64_t run_id, std::string_view problem_key, std::string_view config_key,
                    int attempt, TrialStage stage) {
  // '\x1f' separates fields so that ("a/b", "c") and ("a", "b/c") differ.
  std::string text = absl::StrCat(run_id, "\x1f", std::string(problem_key), "\x1f",
                                   std::string(config_key), "\x1f", attempt);
  if (stage != TrialStage::kScreen) absl::StrAppend(&text, "\x1f", std::string(TrialStageName(stage)));
  // Two independent 64-bit FNV-1a lanes: 128 bits, stable across hosts and builds.
  const uint64_t a = Fnv1a(text, 1469598103934665603ull);
  const uint64_t b = Fnv1a(text, 0x9e3779b97f4a7c15ull);
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace fusetune
