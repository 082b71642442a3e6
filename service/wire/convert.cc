#include "fusetune/wire/convert.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fusetune/base/strings.h"
#include "field_error.h"

namespace fusetune {
namespace {

using wire_internal::InvalidField;

absl::Status CheckLength(std::string_view value, size_t max, std::string_view field) {
  if (value.size() > max) {
    return InvalidField(field, Cat("longer than ", max, " characters (", value.size(), ")"));
  }
  return absl::OkStatus();
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '+' || c == '-';
}

template <typename Repeated>
absl::Status CopyLengths(const Repeated& from, std::vector<int32_t>* to, std::string_view field) {
  if (from.size() > kMaxBatch + 1) {
    return InvalidField(field, Cat("more than ", kMaxBatch + 1, " entries"));
  }
  to->assign(from.begin(), from.end());
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateDeviceClass(std::string_view device_class) {
  if (device_class.empty()) return InvalidField("device_class", "must not be empty");
  if (auto s = CheckLength(device_class, kMaxDeviceClassLength, "device_class"); !s.ok()) return s;
  // CPU model names bring '(', ')', '@' ("Intel(R)-Xeon(R)-CPU-@-2.20GHz"): printable ASCII
  // is allowed except whitespace, quotes and backslashes.
  for (char c : device_class) {
    if (c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '\'' || c == '`') {
      return InvalidField("device_class", "has whitespace, a quote, a backslash or a non-ASCII character");
    }
  }
  std::vector<absl::string_view> parts = absl::StrSplit(ToAbsl(device_class), '/');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
    return InvalidField("device_class",
                   Cat("'", device_class, "' is not of the form backend/name/arch"));
  }
  if (parts[0] != "cpu" && parts[0] != "cuda" && parts[0] != "hip") {
    return InvalidField("device_class", Cat("unknown backend '", parts[0],
                                                "' (expected cpu, cuda or hip)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateId(std::string_view id, std::string_view field) {
  if (id.empty()) return InvalidField(field, "must not be empty");
  if (auto s = CheckLength(id, kMaxIdLength, field); !s.ok()) return s;
  for (char c : id) {
    if (!IsIdChar(c)) return InvalidField(field, "has a character outside [A-Za-z0-9._:@+-]");
  }
  return absl::OkStatus();
}

absl::Status ValidateText(std::string_view value, size_t max, std::string_view field) {
  return CheckLength(value, max, field);
}

absl::StatusOr<int> ListLimitFromProto(int32_t limit, int default_limit, int max_limit, std::string_view field) {
  if (limit < 0 || limit > max_limit) {
    return InvalidField(field, Cat("must be in [1, ", max_limit, "] (0 = ", default_limit, ")"));
  }
  return limit == 0 ? default_limit : limit;
}

absl::StatusOr<AttentionProblem> ProblemFromProto(const v1::Problem& proto) {
  AttentionProblem p;
  if (!proto.kind().empty()) {
    auto kind = ParseProblemKind(proto.kind());
    if (!kind.ok()) return InvalidField("problem.kind", kind.status().message());
    p.kind = *kind;
  }
  p.batch = proto.batch();
  p.q_heads = proto.q_heads();
  p.kv_heads = proto.kv_heads() == 0 ? proto.q_heads() : proto.kv_heads();
  p.q_len = proto.q_len();
  p.kv_len = proto.kv_len();
  p.head_dim = proto.head_dim();
  p.causal = proto.causal();
  if (!proto.dtype().empty()) {
    auto dtype = ParseDType(proto.dtype());
    if (!dtype.ok()) return InvalidField("problem.dtype", dtype.status().message());
    p.dtype = *dtype;
  }
  p.softmax_scale = proto.softmax_scale();
  p.page_block_size = proto.page_block_size();
  p.kv_pool_pages = proto.kv_pool_pages();
  p.block_table_width = proto.block_table_width();
  p.shared_prefix_pages = proto.shared_prefix_pages();
  if (auto s = CopyLengths(proto.cu_seqlens_q(), &p.cu_seqlens_q, "problem.cu_seqlens_q"); !s.ok()) return s;
  if (auto s = CopyLengths(proto.cu_seqlens_k(), &p.cu_seqlens_k, "problem.cu_seqlens_k"); !s.ok()) return s;
  if (auto s = CopyLengths(proto.kv_valid_lens(), &p.kv_valid_lens, "problem.kv_valid_lens"); !s.ok()) return s;
  if (auto s = p.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(Cat("problem: ", s.message()));
  }
  return p;
}

absl::StatusOr<AttentionProblem> JobProblemFromProto(const v1::Problem& proto) {
  auto p = ProblemFromProto(proto);
  if (!p.ok()) return p.status();
  if (p->QElements() > kMaxJobTensorElements || p->KVElements() > kMaxJobTensorElements) {
    return InvalidField("problem", Cat("too large to tune: a tensor exceeds ",
                                           kMaxJobTensorElements, " elements (", p->Key(), ")"));
  }
  return p;
}

void ProblemToProto(const AttentionProblem& p, v1::Problem* proto) {
  proto->Clear();
  proto->set_kind(std::string(ProblemKindName(p.kind)));
  proto->set_batch(p.batch);
  proto->set_q_heads(p.q_heads);
  proto->set_kv_heads(p.kv_heads);
  proto->set_q_len(p.q_len);
  proto->set_kv_len(p.kv_len);
  proto->set_head_dim(p.head_dim);
  proto->set_causal(p.causal);
  proto->set_dtype(std::string(DTypeName(p.dtype)));
  proto->set_softmax_scale(p.softmax_scale);
  proto->set_page_block_size(p.page_block_size);
  proto->set_kv_pool_pages(p.kv_pool_pages);
  proto->set_block_table_width(p.block_table_width);
  proto->set_shared_prefix_pages(p.shared_prefix_pages);
  proto->mutable_cu_seqlens_q()->Add(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end());
  proto->mutable_cu_seqlens_k()->Add(p.cu_seqlens_k.begin(), p.cu_seqlens_k.end());
  proto->mutable_kv_valid_lens()->Add(p.kv_valid_lens.begin(), p.kv_valid_lens.end());
}

absl::StatusOr<KernelConfig> ConfigFromProto(const v1::Config& proto) {
  if (auto s = CheckLength(proto.key(), kMaxKeyLength, "config.key"); !s.ok()) return s;
  if (proto.variant().empty()) {
    if (proto.key().empty()) return InvalidField("config", "neither variant nor key is set");
    auto c = KernelConfig::FromKey(proto.key());
    if (!c.ok()) return InvalidField("config.key", c.status().message());
    return c;
  }
  KernelConfig c;
  auto variant = ParseVariant(proto.variant());
  if (!variant.ok()) return InvalidField("config.variant", variant.status().message());
  c.variant = *variant;
  auto precision = ParsePrecision(proto.precision().empty() ? "fp32" : proto.precision());
  if (!precision.ok()) return InvalidField("config.precision", precision.status().message());
  c.precision = *precision;
  c.block_m = proto.block_m();
  c.block_s = proto.block_s();
  c.threads = proto.threads();
  c.stages = proto.stages();
  // 0 is both proto3's "unset" and kAutoSplitKv: the key, when given, says which (a malformed
  // key fails the comparison below).
  c.split_kv = proto.split_kv();
  if (c.split_kv == 0) {
    c.split_kv = 1;
    if (!proto.key().empty()) {
      if (auto from_key = KernelConfig::FromKey(proto.key()); from_key.ok()) c.split_kv = from_key->split_kv;
    }
  }
  // false is proto3's default and the flags' default alike, so a key that sets one must come
  // with the field set (the comparison below).
  c.pingpong = proto.pingpong();
  c.persistent = proto.persistent();
  if (auto s = c.Validate(); !s.ok()) return InvalidField("config", s.message());
  if (!proto.key().empty() && proto.key() != c.Key()) {
    return InvalidField("config.key", Cat("'", proto.key(), "' disagrees with the fields ('",
                                              c.Key(), "')"));
  }
  return c;
}

void ConfigToProto(const KernelConfig& c, v1::Config* proto) {
  proto->Clear();
  proto->set_variant(std::string(VariantName(c.variant)));
  proto->set_block_m(c.block_m);
  proto->set_block_s(c.block_s);
  proto->set_threads(c.threads);
  proto->set_precision(std::string(PrecisionName(c.precision)));
  proto->set_stages(c.stages);
  proto->set_split_kv(c.split_kv);
  proto->set_key(c.Key());
  proto->set_pingpong(c.pingpong);
  proto->set_persistent(c.persistent);
}

std::string_view JobKindName(v1::JobKind kind) {
  switch (kind) {
    case v1::JOB_KIND_TUNE: return "tune";
    case v1::JOB_KIND_AUDIT: return "audit";
    default: break;
  }
  return "?";
}

absl::StatusOr<v1::JobKind> ParseJobKind(std::string_view name) {
  for (v1::JobKind kind : {v1::JOB_KIND_TUNE, v1::JOB_KIND_AUDIT}) {
    if (JobKindName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(Cat("unknown job kind '", name, "' (expected tune or audit)"));
}

absl::StatusOr<DeviceInfo> DeviceInfoFromProto(const v1::DeviceInfo& proto) {
  if (proto.backend() != "cpu" && proto.backend() != "cuda" && proto.backend() != "hip") {
    return InvalidField("device.backend", Cat("unknown backend '", proto.backend().substr(0, 64),
                                                  "' (expected cpu, cuda or hip)"));
  }
  for (auto [v, name] : {std::pair{&proto.name(), "device.name"}, std::pair{&proto.arch(), "device.arch"},
                         std::pair{&proto.driver(), "device.driver"}}) {
    if (auto s = CheckLength(*v, kMaxKeyLength, name); !s.ok()) return s;
  }
  if (proto.device_index() < 0 || proto.sm_count() < 0 || proto.shared_mem_per_block() < 0 ||
      proto.l2_bytes() < 0 || proto.memory_bytes() < 0 || proto.max_clock_mhz() < 0) {
    return InvalidField("device", "counts and sizes must be >= 0");
  }
  if (!proto.device_class().empty()) {
    if (auto s = ValidateDeviceClass(proto.device_class()); !s.ok()) return s;
  }
  DeviceInfo d;
  d.backend = proto.backend();
  d.name = proto.name();
  d.arch = proto.arch();
  d.device_index = proto.device_index();
  d.sm_count = proto.sm_count();
  d.shared_mem_per_block = proto.shared_mem_per_block();
  d.l2_bytes = proto.l2_bytes();
  d.memory_bytes = proto.memory_bytes();
  d.driver = proto.driver();
  d.max_clock_mhz = proto.max_clock_mhz();
  return d;
}

void DeviceInfoToProto(const DeviceInfo& d, v1::DeviceInfo* proto) {
  proto->Clear();
  proto->set_backend(d.backend);
  proto->set_name(d.name);
  proto->set_arch(d.arch);
  proto->set_device_index(d.device_index);
  proto->set_sm_count(d.sm_count);
  proto->set_shared_mem_per_block(d.shared_mem_per_block);
  proto->set_l2_bytes(d.l2_bytes);
  proto->set_memory_bytes(d.memory_bytes);
  proto->set_driver(d.driver);
  proto->set_max_clock_mhz(d.max_clock_mhz);
  proto->set_device_class(d.DeviceClass());
}

v1::GetBestConfigResponse::Provenance ConfigProvenanceToProto(ConfigProvenance provenance) {
  switch (provenance) {
    case ConfigProvenance::kExact: return v1::GetBestConfigResponse::EXACT;
    case ConfigProvenance::kNearest: return v1::GetBestConfigResponse::NEAREST;
    case ConfigProvenance::kDefault: return v1::GetBestConfigResponse::DEFAULT;
    case ConfigProvenance::kFallback: break;
  }
  return v1::GetBestConfigResponse::PROVENANCE_UNSPECIFIED;
}

ConfigProvenance ConfigProvenanceFromProto(v1::GetBestConfigResponse::Provenance provenance) {
  switch (provenance) {
    case v1::GetBestConfigResponse::EXACT: return ConfigProvenance::kExact;
    case v1::GetBestConfigResponse::NEAREST: return ConfigProvenance::kNearest;
    case v1::GetBestConfigResponse::DEFAULT: return ConfigProvenance::kDefault;
    default: return ConfigProvenance::kFallback;
  }
}

}  // namespace fusetune
