#include "fusetune/kernels/config.h"

#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fusetune/base/strings.h"

namespace fusetune {

std::string_view VariantName(Variant v) {
  switch (v) {
    case Variant::kFused: return "fused";
    case Variant::kPartial: return "partial";
    case Variant::kMaterialized: return "materialized";
  }
  return "?";
}

absl::StatusOr<Variant> ParseVariant(std::string_view name) {
  if (name == "fused") return Variant::kFused;
  if (name == "partial") return Variant::kPartial;
  if (name == "materialized") return Variant::kMaterialized;
  return absl::InvalidArgumentError(
      Cat("unknown variant '", name, "' (expected fused, partial or materialized)"));
}

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "fp16") return Precision::kFp16;
  if (name == "bf16") return Precision::kBf16;
  return absl::InvalidArgumentError(
      Cat("unknown precision '", name, "' (expected fp32, tf32, fp16 or bf16)"));
}

absl::Status KernelConfig::Validate() const {
  if (block_m < 1 || block_m > 1024) return absl::InvalidArgumentError("block_m must be in [1, 1024]");
  if (block_s < 1 || block_s > 1024) return absl::InvalidArgumentError("block_s must be in [1, 1024]");
  if (threads < 1 || threads > 1024) return absl::InvalidArgumentError("threads must be in [1, 1024]");
  if (stages < 1 || stages > 8) return absl::InvalidArgumentError("stages must be in [1, 8]");
  if (split_kv != kAutoSplitKv && (split_kv < 1 || split_kv > 64)) {
    return absl::InvalidArgumentError("split_kv must be in [1, 64], or 0 (planned at launch)");
  }
  return absl::OkStatus();
}

std::string KernelConfig::Key() const {
  std::string key = Cat(VariantName(variant), "/bm", block_m, "/bs", block_s, "/t",
                                 threads, "/", PrecisionName(precision), "/st", stages);
  if (split_kv > 1) absl::StrAppend(&key, "/sk", split_kv);
  if (split_kv == kAutoSplitKv) absl::StrAppend(&key, "/skauto");
  if (pingpong) absl::StrAppend(&key, "/pingpong");
  if (persistent) absl::StrAppend(&key, "/persistent");
  return key;
}

absl::StatusOr<KernelConfig> KernelConfig::FromKey(std::string_view key) {
  std::vector<std::string> parts = absl::StrSplit(ToAbsl(key), '/');
  auto bad = [&] { return absl::InvalidArgumentError(Cat("malformed config key '", key, "'")); };
  // Six fixed parts, then at most three optional ones: a split, /pingpong, /persistent.
  if (parts.size() < 6 || parts.size() > 9) return bad();
  KernelConfig c;
  auto variant = ParseVariant(parts[0]);
  if (!variant.ok()) return variant.status();
  c.variant = *variant;
  auto field = [](std::string_view part, std::string_view prefix, int* out) {
    return part.substr(0, prefix.size()) == prefix && absl::SimpleAtoi(ToAbsl(part.substr(prefix.size())), out);
  };
  if (!field(parts[1], "bm", &c.block_m) || !field(parts[2], "bs", &c.block_s) ||
      !field(parts[3], "t", &c.threads) || !field(parts[5], "st", &c.stages)) {
    return bad();
  }
  auto precision = ParsePrecision(parts[4]);
  if (!precision.ok()) return precision.status();
  c.precision = *precision;
  // Optional parts in Key()'s order, each at most once: anything left over is malformed.
  size_t i = 6;
  if (i < parts.size() && parts[i].substr(0, 2) == "sk") {
    if (parts[i] == "skauto") {
      c.split_kv = kAutoSplitKv;
    } else if (!field(parts[i], "sk", &c.split_kv) || c.split_kv < 2) {
      return bad();
    }
    ++i;
  }
  if (i < parts.size() && parts[i] == "pingpong") {
    c.pingpong = true;
    ++i;
  }
  if (i < parts.size() && parts[i] == "persistent") {
    c.persistent = true;
    ++i;
  }
  if (i != parts.size()) return bad();
  if (auto s = c.Validate(); !s.ok()) return s;
  return c;
}

bool ConfigOrderLess(const KernelConfig& a, const KernelConfig& b) {
  auto tie = [](const KernelConfig& c) {
    return std::make_tuple(static_cast<int>(c.variant), static_cast<int>(c.precision), c.block_m,
                           c.block_s, c.threads, c.stages, c.split_kv, c.pingpong, c.persistent);
  };
  return tie(a) < tie(b);
}

}  // namespace fusetune
