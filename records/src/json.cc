#include "fusetune/records/json.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace fusetune {
namespace {

// nlohmann::json throws; every use is wrapped so that nothing escapes.
nlohmann::json DeviceStateToJson(const DeviceState& d) {
  return {{"mhz", d.sm_clock_mhz}, {"mw", d.power_mw}, {"thr", d.throttle_reasons}};
}

DeviceState DeviceStateFromJson(const nlohmann::json& j) {
  DeviceState d;
  d.known = true;
  d.sm_clock_mhz = j.at("mhz").get<int>();
  d.power_mw = j.at("mw").get<int>();
  d.throttle_reasons = j.at("thr").get<uint64_t>();
  return d;
}

// The worker spool's earlier form of a device state: every field spelled out, with "known".
DeviceState SpelledOutDeviceStateFromJson(const nlohmann::json& j) {
  if (!j.at("known").get<bool>()) return DeviceState{};
  DeviceState d;
  d.known = true;
  d.sm_clock_mhz = j.at("sm_clock_mhz").get<int>();
  d.power_mw = j.at("power_mw").get<int>();
  d.throttle_reasons = j.at("throttle_reasons").get<uint64_t>();
  return d;
}

SampleBlock SampleBlockFromJson(const nlohmann::json& block) {
  SampleBlock b;
  if (!block.contains("n") && block.contains("samples")) {
    b.samples = block.at("samples").get<int>();
    b.median_us = block.at("median_us").get<double>();
    b.unsteady = block.at("unsteady").get<bool>();
    b.before = SpelledOutDeviceStateFromJson(block.at("before"));
    b.after = SpelledOutDeviceStateFromJson(block.at("after"));
    return b;
  }
  b.samples = block.at("n").get<int>();
  b.median_us = block.at("us").get<double>();
  b.unsteady = block.at("u").get<bool>();
  b.graphed = block.value("g", false);
  if (block.contains("b")) b.before = DeviceStateFromJson(block.at("b"));
  if (block.contains("a")) b.after = DeviceStateFromJson(block.at("a"));
  return b;
}

}  // namespace

std::string DeviceInfoToJson(const DeviceInfo& d) {
  nlohmann::json j = {{"backend", d.backend},   {"name", d.name},
                      {"arch", d.arch},         {"device_index", d.device_index},
                      {"sm_count", d.sm_count}, {"shared_mem_per_block", d.shared_mem_per_block},
                      {"l2_bytes", d.l2_bytes}, {"memory_bytes", d.memory_bytes},
                      {"driver", d.driver},     {"max_clock_mhz", d.max_clock_mhz}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<DeviceInfo> DeviceInfoFromJson(std::string_view text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) return absl::InvalidArgumentError("device JSON is not an object");
    DeviceInfo d;
    d.backend = j.value("backend", "");
    d.name = j.value("name", "");
    d.arch = j.value("arch", "");
    d.device_index = j.value("device_index", 0);
    d.sm_count = j.value("sm_count", 0);
    d.shared_mem_per_block = j.value("shared_mem_per_block", int64_t{0});
    d.l2_bytes = j.value("l2_bytes", int64_t{0});
    d.memory_bytes = j.value("memory_bytes", int64_t{0});
    d.driver = j.value("driver", "");
    d.max_clock_mhz = j.value("max_clock_mhz", 0);
    return d;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed device JSON: ", e.what()));
  }
}

std::string SampleBlocksToJson(const std::vector<SampleBlock>& blocks) {
  nlohmann::json j = nlohmann::json::array();
  for (const SampleBlock& b : blocks) {
    nlohmann::json block = {{"n", b.samples}, {"us", b.median_us}, {"u", b.unsteady}};
    if (b.before.known) block["b"] = DeviceStateToJson(b.before);
    if (b.after.known) block["a"] = DeviceStateToJson(b.after);
    if (b.graphed) block["g"] = true;
    j.push_back(std::move(block));
  }
  return j.dump();
}

absl::StatusOr<std::vector<SampleBlock>> SampleBlocksFromJson(std::string_view text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_array()) return absl::InvalidArgumentError("blocks JSON is not an array");
    std::vector<SampleBlock> out;
    out.reserve(j.size());
    for (const auto& block : j) out.push_back(SampleBlockFromJson(block));
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed blocks JSON: ", e.what()));
  }
}

std::string TrialToJson(const Trial& t) {
  // The blocks in their one JSON form (above), as the database stores them.
  nlohmann::json blocks = nlohmann::json::parse(SampleBlocksToJson(t.blocks));
  nlohmann::json j = {
      {"trial_id", t.trial_id},
      {"run_id", t.run_id},
      {"problem_key", t.problem_key},
      {"config_key", t.config_key},
      {"attempt", t.attempt},
      {"outcome", std::string(TrialOutcomeName(t.outcome))},
      {"message", t.message},
      {"samples_us", t.samples_us},
      {"median_us", t.median_us},
      {"p10_us", t.p10_us},
      {"p90_us", t.p90_us},
      {"max_abs_error", t.max_abs_error},
      {"max_rel_error", t.max_rel_error},
      {"unquantised_rel_error", t.unquantised_rel_error},
      {"checked_elements", t.checked_elements},
      {"sm_clock_mhz", t.sm_clock_mhz},
      {"flops", t.flops},
      {"created_unix_ms", t.created_unix_ms},
      {"stage", std::string(TrialStageName(t.stage))},
      {"blocks", std::move(blocks)},
      {"wall_seconds", t.wall_seconds},
  };
  // Invalid UTF-8 in a message (from a driver, say) must not make the trial unwritable.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<Trial> TrialFromJson(std::string_view json) {
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    Trial t;
    t.trial_id = j.at("trial_id").get<std::string>();
    t.run_id = j.at("run_id").get<int64_t>();
    t.problem_key = j.at("problem_key").get<std::string>();
    t.config_key = j.at("config_key").get<std::string>();
    t.attempt = j.at("attempt").get<int>();
    absl::StatusOr<TrialOutcome> outcome = ParseTrialOutcome(j.at("outcome").get<std::string>());
    if (!outcome.ok()) return outcome.status();
    t.outcome = *outcome;
    t.message = j.at("message").get<std::string>();
    t.samples_us = j.at("samples_us").get<std::vector<double>>();
    t.median_us = j.at("median_us").get<double>();
    t.p10_us = j.at("p10_us").get<double>();
    t.p90_us = j.at("p90_us").get<double>();
    t.max_abs_error = j.at("max_abs_error").get<double>();
    t.max_rel_error = j.at("max_rel_error").get<double>();
    t.checked_elements = j.at("checked_elements").get<int64_t>();
    t.sm_clock_mhz = j.at("sm_clock_mhz").get<int>();
    t.flops = j.at("flops").get<double>();
    t.created_unix_ms = j.at("created_unix_ms").get<int64_t>();
    // A record of the older spool format has none of these keys (no stage, blocks or wall time):
    // such a trial is a screen trial without blocks whose wall time was not measured.
    if (auto it = j.find("stage"); it != j.end()) {
      absl::StatusOr<TrialStage> stage = ParseTrialStage(it->get<std::string>());
      if (!stage.ok()) return stage.status();
      t.stage = *stage;
    }
    // SampleBlocksFromJson also reads the spelled-out block form of spools written before
    // the spool used the records' form.
    if (auto it = j.find("blocks"); it != j.end()) {
      absl::StatusOr<std::vector<SampleBlock>> blocks = SampleBlocksFromJson(it->dump());
      if (!blocks.ok()) return blocks.status();
      t.blocks = *std::move(blocks);
    }
    if (auto it = j.find("wall_seconds"); it != j.end()) t.wall_seconds = it->get<double>();
    // Written since K/V could be stored as e4m3; older records read as 0 (not quantised).
    if (auto it = j.find("unquantised_rel_error"); it != j.end()) t.unquantised_rel_error = it->get<double>();
    if (t.trial_id.empty()) return absl::InvalidArgumentError("trial without trial_id");
    return t;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad trial JSON: ", e.what()));
  }
}

}  // namespace fusetune
