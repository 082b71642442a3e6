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

}  // namespace fusetune
