#include "fusetune/regress/suite.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fusetune/base/file.h"
#include "fusetune/base/strings.h"
#include "fusetune/kernels/default_config.h"
#include "nlohmann/json.hpp"

namespace fusetune::regress {
namespace {

// Ordered, so that written suites keep their fields in the order below.
using Json = nlohmann::ordered_json;

constexpr std::string_view kRoles[] = {"best", "reference", "materialized", "pick"};
constexpr std::string_view kPickRole = "pick";

// The integer and length-list fields of AttentionProblem, by their JSON names (the struct's).
struct IntField {
  std::string_view name;
  int AttentionProblem::*member;
};
constexpr IntField kProblemIntFields[] = {
    {"batch", &AttentionProblem::batch},       {"q_heads", &AttentionProblem::q_heads},
    {"kv_heads", &AttentionProblem::kv_heads}, {"q_len", &AttentionProblem::q_len},
    {"kv_len", &AttentionProblem::kv_len},     {"head_dim", &AttentionProblem::head_dim},
    {"page_block_size", &AttentionProblem::page_block_size},
    {"kv_pool_pages", &AttentionProblem::kv_pool_pages},
    {"block_table_width", &AttentionProblem::block_table_width},
    {"shared_prefix_pages", &AttentionProblem::shared_prefix_pages},
};
struct ListField {
  std::string_view name;
  std::vector<int32_t> AttentionProblem::*member;
};
constexpr ListField kProblemListFields[] = {
    {"cu_seqlens_q", &AttentionProblem::cu_seqlens_q},
    {"cu_seqlens_k", &AttentionProblem::cu_seqlens_k},
    {"kv_valid_lens", &AttentionProblem::kv_valid_lens},
};

// "where.field", or "field" at the top of a document.
std::string Path(std::string_view where, std::string_view field) {
  return where.empty() ? std::string(field) : Cat(where, ".", field);
}

absl::Status FieldError(std::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(where.empty() ? std::string(what) : Cat(where, ": ", what));
}

// The member `field` of an object, or null when it has none.
const Json* Find(const Json& object, std::string_view field) {
  auto it = object.find(std::string(field));
  return it == object.end() ? nullptr : &*it;
}

// Text that never throws: invalid UTF-8 (say, in a description) is replaced, not an exception.
std::string Dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

absl::StatusOr<Json> ParseJson(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(Cat("malformed JSON: ", e.what()));
  }
}

absl::Status CheckObject(const Json& value, std::string_view where, std::string_view what) {
  if (!value.is_object()) return FieldError(where, Cat("must be ", what));
  return absl::OkStatus();
}

// A typo in a field name must not be silently ignored.
absl::Status CheckKnownFields(const Json& object, const std::vector<std::string_view>& known,
                              std::string_view where) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string expected;
    for (std::string_view name : known) absl::StrAppend(&expected, expected.empty() ? "" : ", ", ToAbsl(name));
    return FieldError(Path(where, it.key()), Cat("unknown field (expected one of ", expected, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ReadInt(const Json& value, std::string_view where) {
  if (!value.is_number_integer()) return FieldError(where, "must be an integer");
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return FieldError(where, "out of range");
    }
    return static_cast<int>(value.get<uint64_t>());
  }
  const int64_t v = value.get<int64_t>();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return FieldError(where, "out of range");
  }
  return static_cast<int>(v);
}

absl::StatusOr<int> ReadIntIn(const Json& value, std::string_view where, int low, int high) {
  absl::StatusOr<int> v = ReadInt(value, where);
  if (!v.ok()) return v.status();
  if (*v < low || *v > high) return FieldError(where, Cat("must be in [", low, ", ", high, "], got ", *v));
  return v;
}

absl::StatusOr<double> ReadNumber(const Json& value, std::string_view where) {
  if (!value.is_number()) return FieldError(where, "must be a number");
  return value.get<double>();
}

absl::StatusOr<bool> ReadBool(const Json& value, std::string_view where) {
  if (!value.is_boolean()) return FieldError(where, "must be true or false");
  return value.get<bool>();
}

absl::StatusOr<std::string> ReadString(const Json& value, std::string_view where) {
  if (!value.is_string()) return FieldError(where, "must be a string");
  return value.get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> ReadIntList(const Json& value, std::string_view where) {
  if (!value.is_array()) return FieldError(where, "must be an array of integers");
  std::vector<int32_t> out;
  for (size_t i = 0; i < value.size(); ++i) {
    absl::StatusOr<int> v = ReadInt(value[i], Cat(where, "[", i, "]"));
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  return out;
}

Json ProblemObject(const AttentionProblem& problem) {
  Json j;
  j["kind"] = std::string(ProblemKindName(problem.kind));
  for (const IntField& f : kProblemIntFields) j[std::string(f.name)] = problem.*f.member;
  j["causal"] = problem.causal;
  j["dtype"] = std::string(DTypeName(problem.dtype));
  j["softmax_scale"] = static_cast<double>(problem.softmax_scale);
  for (const ListField& f : kProblemListFields) j[std::string(f.name)] = problem.*f.member;
  // Only when K/V are quantised, so that a build from before the field (the baseline of a
  // bench between two builds) still reads every other problem.
  if (problem.is_kv_quantized()) j["kv_storage"] = std::string(KvStorageName(problem.kv_storage));
  return j;
}

// Equal when every field is: ProblemObject holds them all.
bool SameProblem(const AttentionProblem& a, const AttentionProblem& b) {
  return ProblemObject(a) == ProblemObject(b);
}

// One field of a problem object onto `p`; false for a name that is not a problem field.
absl::StatusOr<bool> ReadProblemField(const std::string& name, const Json& value, std::string_view where,
                                      AttentionProblem& p) {
  for (const IntField& f : kProblemIntFields) {
    if (name != f.name) continue;
    absl::StatusOr<int> v = ReadInt(value, where);
    if (!v.ok()) return v.status();
    p.*f.member = *v;
    return true;
  }
  for (const ListField& f : kProblemListFields) {
    if (name != f.name) continue;
    absl::StatusOr<std::vector<int32_t>> v = ReadIntList(value, where);
    if (!v.ok()) return v.status();
    p.*f.member = std::move(*v);
    return true;
  }
  if (name == "causal") {
    absl::StatusOr<bool> v = ReadBool(value, where);
    if (!v.ok()) return v.status();
    p.causal = *v;
    return true;
  }
  if (name == "softmax_scale") {
    absl::StatusOr<double> v = ReadNumber(value, where);
    if (!v.ok()) return v.status();
    // Outside float's range the conversion is undefined: refuse it here, Validate does the rest.
    if (std::abs(*v) > std::numeric_limits<float>::max()) return FieldError(where, "out of range");
    p.softmax_scale = static_cast<float>(*v);
    return true;
  }
  if (name != "kind" && name != "dtype" && name != "kv_storage") return false;
  absl::StatusOr<std::string> text = ReadString(value, where);
  if (!text.ok()) return text.status();
  if (name == "kind") {
    absl::StatusOr<ProblemKind> kind = ParseProblemKind(*text);
    if (!kind.ok()) return FieldError(where, kind.status().message());
    p.kind = *kind;
  } else if (name == "kv_storage") {
    absl::StatusOr<KvStorage> storage = ParseKvStorage(*text);
    if (!storage.ok()) return FieldError(where, storage.status().message());
    p.kv_storage = *storage;
  } else {
    absl::StatusOr<DType> dtype = ParseDType(*text);
    if (!dtype.ok()) return FieldError(where, dtype.status().message());
    p.dtype = *dtype;
  }
  return true;
}

std::vector<std::string_view> ProblemFieldNames() {
  std::vector<std::string_view> names = {"kind"};
  for (const IntField& f : kProblemIntFields) names.push_back(f.name);
  names.insert(names.end(), {"causal", "dtype", "kv_storage", "softmax_scale"});
  for (const ListField& f : kProblemListFields) names.push_back(f.name);
  return names;
}

absl::StatusOr<AttentionProblem> ProblemFromValue(const Json& value, std::string_view where) {
  if (value.is_string()) {
    absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(value.get<std::string>());
    if (!p.ok()) return FieldError(where, p.status().message());
    return p;
  }
  if (auto s = CheckObject(value, where, "a problem key or an object of the problem's fields"); !s.ok()) {
    return s;
  }
  AttentionProblem p;
  for (auto it = value.begin(); it != value.end(); ++it) {
    absl::StatusOr<bool> known = ReadProblemField(it.key(), it.value(), Path(where, it.key()), p);
    if (!known.ok()) return known.status();
    if (!*known) return CheckKnownFields(value, ProblemFieldNames(), where);
  }
  if (absl::Status s = p.Validate(); !s.ok()) return FieldError(where, s.message());
  return p;
}

// A problem as a suite writes it: its key where the key parses back to the same problem.
Json ProblemValue(const AttentionProblem& problem) {
  const std::string key = problem.Key();
  absl::StatusOr<AttentionProblem> parsed = AttentionProblem::FromKey(key);
  if (parsed.ok() && SameProblem(*parsed, problem)) return key;
  return ProblemObject(problem);
}

absl::StatusOr<KernelConfig> ConfigFromValue(const Json& value, std::string_view where) {
  absl::StatusOr<std::string> key = ReadString(value, where);
  if (!key.ok()) return key.status();
  absl::StatusOr<KernelConfig> config = KernelConfig::FromKey(*key);
  if (!config.ok()) return FieldError(where, config.status().message());
  return config;
}

absl::Status ReadBlock(const Json& value, std::string_view where, TimingOptions& block) {
  if (auto s = CheckObject(value, where, "an object"); !s.ok()) return s;
  if (auto s = CheckKnownFields(value, {"warmup", "repeats", "max_seconds", "flush_l2", "graph"}, where); !s.ok()) {
    return s;
  }
  if (const Json* warmup = Find(value, "warmup")) {
    absl::StatusOr<int> v = ReadIntIn(*warmup, Path(where, "warmup"), 0, 1000);
    if (!v.ok()) return v.status();
    block.warmup = *v;
  }
  if (const Json* repeats = Find(value, "repeats")) {
    absl::StatusOr<int> v = ReadIntIn(*repeats, Path(where, "repeats"), 1, 100000);
    if (!v.ok()) return v.status();
    block.repeats = *v;
  }
  if (const Json* max_seconds = Find(value, "max_seconds")) {
    absl::StatusOr<double> v = ReadNumber(*max_seconds, Path(where, "max_seconds"));
    if (!v.ok()) return v.status();
    if (!(*v > 0) || !std::isfinite(*v)) return FieldError(Path(where, "max_seconds"), "must be > 0");
    block.max_seconds = *v;
  }
  if (const Json* flush_l2 = Find(value, "flush_l2")) {
    absl::StatusOr<bool> v = ReadBool(*flush_l2, Path(where, "flush_l2"));
    if (!v.ok()) return v.status();
    block.flush_l2 = *v;
  }
  if (const Json* graph = Find(value, "graph")) {
    absl::StatusOr<bool> v = ReadBool(*graph, Path(where, "graph"));
    if (!v.ok()) return v.status();
    block.graph = *v;
  }
  return absl::OkStatus();
}

absl::StatusOr<SuiteCell> CellFromValue(const Json& value, std::string_view where) {
  if (auto s = CheckObject(value, where, "an object"); !s.ok()) return s;
  if (auto s = CheckKnownFields(value, {"problem", "config", "role", "baseline_config"}, where); !s.ok()) {
    return s;
  }
  const Json* problem_value = Find(value, "problem");
  if (problem_value == nullptr) return FieldError(Path(where, "problem"), "missing");
  const Json* config_value = Find(value, "config");
  if (config_value == nullptr) return FieldError(Path(where, "config"), "missing");
  SuiteCell cell;
  absl::StatusOr<AttentionProblem> problem = ProblemFromValue(*problem_value, Path(where, "problem"));
  if (!problem.ok()) return problem.status();
  cell.problem = std::move(*problem);
  absl::StatusOr<KernelConfig> config = ConfigFromValue(*config_value, Path(where, "config"));
  if (!config.ok()) return config.status();
  cell.config = *config;
  if (const Json* role_value = Find(value, "role")) {
    absl::StatusOr<std::string> role = ReadString(*role_value, Path(where, "role"));
    if (!role.ok()) return role.status();
    if (std::find(std::begin(kRoles), std::end(kRoles), *role) == std::end(kRoles)) {
      return FieldError(Path(where, "role"),
                        Cat("unknown role '", *role, "' (expected best, reference, materialized or pick)"));
    }
    cell.role = *role;
  }
  if (const Json* old_value = Find(value, "baseline_config")) {
    absl::StatusOr<KernelConfig> old = ConfigFromValue(*old_value, Path(where, "baseline_config"));
    if (!old.ok()) return old.status();
    cell.baseline_config = *old;
  }
  if (cell.baseline_config.has_value() != (cell.role == kPickRole)) {
    return FieldError(Path(where, "baseline_config"), "a cell has one exactly when its role is \"pick\"");
  }
  return cell;
}

Json CellValue(const SuiteCell& cell) {
  Json j;
  j["problem"] = ProblemValue(cell.problem);
  j["config"] = cell.config.Key();
  j["role"] = cell.role;
  if (cell.baseline_config) j["baseline_config"] = cell.baseline_config->Key();
  return j;
}

// What makes two cells the same measurement.
std::string CellIdentity(const SuiteCell& cell) {
  return Cat(cell.problem.Key(), " ", cell.config.Key(), " ", cell.role, " ", cell.BaselineConfig().Key());
}

absl::Status ReadCells(const Json& doc, Suite& suite) {
  const Json* found = Find(doc, "cells");
  if (found == nullptr) return FieldError("cells", "missing");
  const Json& cells = *found;
  if (!cells.is_array()) return FieldError("cells", "must be an array");
  if (cells.empty()) return FieldError("cells", "a suite needs at least one cell");
  std::map<std::string, size_t> first_index;
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string where = Cat("cells[", i, "]");
    absl::StatusOr<SuiteCell> cell = CellFromValue(cells[i], where);
    if (!cell.ok()) return cell.status();
    const auto [it, inserted] = first_index.emplace(CellIdentity(*cell), i);
    if (!inserted) {
      return FieldError(where, Cat("the same problem, config, role and baseline config as cells[", it->second,
                                   "] (", cell->Name(), ")"));
    }
    suite.cells.push_back(std::move(*cell));
  }
  return absl::OkStatus();
}

// An optional top-level number in [low, high], kept in `out` when present; `rule` says what the
// field must be when it is not.
absl::Status OptionalNumberIn(const Json& doc, std::string_view field, double low, double high,
                              const char* rule, std::optional<double>& out) {
  const Json* value = Find(doc, field);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_number() || !(value->get<double>() >= low && value->get<double>() <= high)) {
    return FieldError(field, rule);
  }
  out = value->get<double>();
  return absl::OkStatus();
}

absl::StatusOr<std::string> OptionalString(const Json& doc, std::string_view field) {
  const Json* value = Find(doc, field);
  if (value == nullptr) return std::string();
  return ReadString(*value, field);
}

// The materialized trial to quote the pick against: the fastest verified one, ties to the
// config order so that the same trials always give the same suite.
std::optional<KernelConfig> FastestMaterialized(const SuiteSource& source) {
  std::optional<KernelConfig> best;
  double best_us = 0;
  for (const Trial& t : source.provenance_trials) {
    if (t.outcome != TrialOutcome::kOk || t.problem_key != source.best.problem_key || !(t.median_us > 0)) continue;
    absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(t.config_key);
    if (!c.ok() || c->variant != Variant::kMaterialized) continue;
    if (!best || t.median_us < best_us || (t.median_us == best_us && ConfigOrderLess(*c, *best))) {
      best = *c;
      best_us = t.median_us;
    }
  }
  return best;
}

}  // namespace

std::string SuiteCell::Name() const {
  std::string name = Cat(problem.Key(), " ", config.Key());
  if (baseline_config) absl::StrAppend(&name, " (was ", baseline_config->Key(), ")");
  return name;
}

std::string Suite::RunLabel() const { return Cat("bench:", name); }

absl::Status ValidateSuiteName(std::string_view name) {
  const bool allowed = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
  if (name.empty() || name.size() > 64 || !allowed) {
    return absl::InvalidArgumentError(
        Cat("suite name '", name, "' must be 1 to 64 characters of letters, digits, '.', '_' and '-'"));
  }
  return absl::OkStatus();
}

const char* RoundOrderName(RoundOrder order) {
  switch (order) {
    case RoundOrder::kShuffled:
      return "shuffled";
    case RoundOrder::kMirrored:
      return "mirrored";
  }
  return "shuffled";
}

absl::StatusOr<RoundOrder> ParseRoundOrderName(std::string_view name) {
  std::string valid;
  for (RoundOrder order : kRoundOrders) {
    if (name == RoundOrderName(order)) return order;
    absl::StrAppend(&valid, valid.empty() ? "" : ", ", RoundOrderName(order));
  }
  return absl::InvalidArgumentError(Cat("unknown round order '", name, "' (one of ", valid, ")"));
}

absl::StatusOr<Suite> ParseSuite(std::string_view json_text) {
  absl::StatusOr<Json> doc = ParseJson(json_text);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return absl::InvalidArgumentError("a suite must be a JSON object");
  if (auto s = CheckKnownFields(
          *doc, {"name", "description", "device_class", "block", "blocks", "rounds_across_problems", "min_floor", "calibrated_min_floor", "correction",
           "round_order", "max_measure_seconds", "cells"},
          "");
      !s.ok()) {
    return s;
  }
  Suite suite;
  const Json* name_value = Find(*doc, "name");
  if (name_value == nullptr) return FieldError("name", "missing");
  absl::StatusOr<std::string> name = ReadString(*name_value, "name");
  if (!name.ok()) return name.status();
  if (absl::Status s = ValidateSuiteName(*name); !s.ok()) return FieldError("name", s.message());
  suite.name = *name;
  absl::StatusOr<std::string> description = OptionalString(*doc, "description");
  if (!description.ok()) return description.status();
  suite.description = *description;
  absl::StatusOr<std::string> device_class = OptionalString(*doc, "device_class");
  if (!device_class.ok()) return device_class.status();
  suite.device_class = *device_class;
  if (const Json* block = Find(*doc, "block")) {
    if (auto s = ReadBlock(*block, "block", suite.block); !s.ok()) return s;
  }
  if (const Json* blocks_value = Find(*doc, "blocks")) {
    absl::StatusOr<int> blocks = ReadIntIn(*blocks_value, "blocks", 3, 1000);
    if (!blocks.ok()) return blocks.status();
    suite.blocks = *blocks;
  }
  if (const Json* across = Find(*doc, "rounds_across_problems")) {
    absl::StatusOr<bool> v = ReadBool(*across, "rounds_across_problems");
    if (!v.ok()) return v.status();
    suite.rounds_across_problems = *v;
  }
  constexpr const char* kFloorRule = "must be a number in [0, 0.1] (a relative change: 0.005 is 0.5 %)";
  if (auto s = OptionalNumberIn(*doc, "min_floor", 0, 0.1, kFloorRule, suite.min_floor); !s.ok()) return s;
  if (auto s = OptionalNumberIn(*doc, "calibrated_min_floor", 0, 0.1, kFloorRule, suite.calibrated_min_floor);
      !s.ok()) {
    return s;
  }
  if (const Json* correction = Find(*doc, "correction")) {
    absl::StatusOr<regress::Correction> c =
        correction->is_string() ? regress::ParseCorrectionName(correction->get<std::string>())
                                : absl::InvalidArgumentError("a string expected");
    if (!c.ok()) return FieldError("correction", std::string(c.status().message()));
    suite.correction = *c;
  }
  if (const Json* order = Find(*doc, "round_order")) {
    absl::StatusOr<RoundOrder> o = order->is_string() ? ParseRoundOrderName(order->get<std::string>())
                                                      : absl::InvalidArgumentError("a string expected");
    if (!o.ok()) return FieldError("round_order", std::string(o.status().message()));
    suite.round_order = *o;
  }
  if (auto s = OptionalNumberIn(*doc, "max_measure_seconds", 0, 86400,
                                "must be a number of seconds in [0, 86400] (0: no budget)", suite.max_measure_seconds);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadCells(*doc, suite); !s.ok()) return s;
  return suite;
}

absl::StatusOr<Suite> ReadSuiteFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return absl::Status(text.status().code(), Cat("suite: ", text.status().message()));
  absl::StatusOr<Suite> suite = ParseSuite(*text);
  if (!suite.ok()) return absl::Status(suite.status().code(), Cat(path, ": ", suite.status().message()));
  return suite;
}

std::string SuiteToJson(const Suite& suite) {
  Json head;
  head["name"] = suite.name;
  head["description"] = suite.description;
  if (!suite.device_class.empty()) head["device_class"] = suite.device_class;
  head["block"] = {{"warmup", suite.block.warmup},
                   {"repeats", suite.block.repeats},
                   {"max_seconds", suite.block.max_seconds},
                   {"flush_l2", suite.block.flush_l2}};
  // Written only when on, so that the suites without it read and diff as before.
  if (suite.block.graph) head["block"]["graph"] = true;
  head["blocks"] = suite.blocks;
  if (suite.rounds_across_problems) head["rounds_across_problems"] = true;
  if (suite.min_floor) head["min_floor"] = *suite.min_floor;
  if (suite.calibrated_min_floor) head["calibrated_min_floor"] = *suite.calibrated_min_floor;
  if (suite.correction) head["correction"] = regress::CorrectionName(*suite.correction);
  if (suite.round_order) head["round_order"] = RoundOrderName(*suite.round_order);
  if (suite.max_measure_seconds) head["max_measure_seconds"] = *suite.max_measure_seconds;
  // One cell a line: a suite file reads and diffs cell by cell.
  std::string out = "{\n";
  for (auto it = head.begin(); it != head.end(); ++it) {
    absl::StrAppend(&out, "  ", Dump(Json(it.key())), ": ", Dump(it.value()), ",\n");
  }
  out += "  \"cells\": [\n";
  for (size_t i = 0; i < suite.cells.size(); ++i) {
    absl::StrAppend(&out, "    ", Dump(CellValue(suite.cells[i])), i + 1 < suite.cells.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  return out;
}

std::string ProblemToJson(const AttentionProblem& problem) { return Dump(ProblemObject(problem)); }

absl::StatusOr<AttentionProblem> ProblemFromJson(std::string_view json_text) {
  absl::StatusOr<Json> value = ParseJson(json_text);
  if (!value.ok()) return value.status();
  return ProblemFromValue(*value, "");
}

absl::StatusOr<Suite> SuiteFromBestConfigs(std::string_view name, std::string_view device_class,
                                           std::string_view backend, const std::vector<SuiteSource>& sources,
                                           std::vector<std::string>* skipped) {
  if (absl::Status s = ValidateSuiteName(name); !s.ok()) return s;
  Suite suite;
  suite.name = std::string(name);
  suite.device_class = std::string(device_class);
  std::set<std::string> seen;
  size_t skipped_count = 0;
  for (const SuiteSource& source : sources) {
    absl::StatusOr<AttentionProblem> problem = AttentionProblem::FromKey(source.best.problem_key);
    absl::StatusOr<KernelConfig> pick = KernelConfig::FromKey(source.best.config_key);
    if (!problem.ok() || !pick.ok()) {
      ++skipped_count;
      if (skipped != nullptr) skipped->push_back(source.best.problem_key);
      continue;
    }
    if (!seen.insert(source.best.problem_key).second) continue;
    auto add = [&](const KernelConfig& config, std::string_view role) {
      SuiteCell cell;
      cell.problem = *problem;
      cell.config = config;
      cell.role = std::string(role);
      suite.cells.push_back(std::move(cell));
    };
    add(*pick, "best");
    absl::StatusOr<KernelConfig> reference = DefaultConfig(backend, *problem);
    if (reference.ok() && *reference != *pick) add(*reference, "reference");
    std::optional<KernelConfig> materialized = FastestMaterialized(source);
    if (materialized && *materialized != *pick) add(*materialized, "materialized");
  }
  if (suite.cells.empty()) {
    return absl::InvalidArgumentError(Cat("no suite cells from ", sources.size(), " best configs of '", device_class,
                                          "' (", skipped_count, " skipped: varlen or padded problems cannot be rebuilt from their keys)"));
  }
  suite.description = Cat("best configs of ", device_class, ": ", seen.size(), " problems");
  return suite;
}

}  // namespace fusetune::regress
