#include "fusetune/tuner/config_space.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fusetune {
namespace {

absl::Status CheckRange(const std::vector<int>& values, int lo, int hi, const char* name) {
  for (int v : values) {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " value ", v, " is outside [", lo, ", ", hi, "]"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
bool Allows(const std::vector<T>& filter, const T& value) {
  return filter.empty() || std::find(filter.begin(), filter.end(), value) != filter.end();
}

// One option list as a filter: its name, its values as text, and the test.
struct Filter {
  const char* name;
  std::string values;
  std::function<bool(const KernelConfig&)> allows;
};

std::vector<Filter> Filters(const ConfigSpaceOptions& o) {
  auto names = [](const auto& list, auto name) {
    std::vector<std::string> out;
    for (const auto& v : list) out.emplace_back(name(v));
    return absl::StrJoin(out, ",");
  };
  auto ints = [](const std::vector<int>& list) { return absl::StrJoin(list, ","); };
  std::vector<Filter> out;
  if (!o.variants.empty()) {
    out.push_back({"variants", names(o.variants, VariantName),
                   [&o](const KernelConfig& c) { return Allows(o.variants, c.variant); }});
  }
  if (!o.precisions.empty()) {
    out.push_back({"precisions", names(o.precisions, PrecisionName),
                   [&o](const KernelConfig& c) { return Allows(o.precisions, c.precision); }});
  }
  if (!o.block_m.empty()) {
    out.push_back({"block_m", ints(o.block_m), [&o](const KernelConfig& c) { return Allows(o.block_m, c.block_m); }});
  }
  if (!o.block_s.empty()) {
    out.push_back({"block_s", ints(o.block_s), [&o](const KernelConfig& c) { return Allows(o.block_s, c.block_s); }});
  }
  if (!o.threads.empty()) {
    out.push_back({"threads", ints(o.threads), [&o](const KernelConfig& c) { return Allows(o.threads, c.threads); }});
  }
  if (!o.stages.empty()) {
    out.push_back({"stages", ints(o.stages), [&o](const KernelConfig& c) { return Allows(o.stages, c.stages); }});
  }
  return out;
}

// A config's fields other than the one block size being compared.
using Rest = std::tuple<int, int, int, int, int, int, bool, bool>;
Rest WithoutBlockM(const KernelConfig& c) {
  return {static_cast<int>(c.variant), static_cast<int>(c.precision), c.block_s, c.threads, c.stages, c.split_kv,
          c.pingpong, c.persistent};
}
Rest WithoutBlockS(const KernelConfig& c) {
  return {static_cast<int>(c.variant), static_cast<int>(c.precision), c.block_m, c.threads, c.stages, c.split_kv,
          c.pingpong, c.persistent};
}

// For each group of configs equal but for one block size, the smallest block size that
// covers `length` (absent when none does).
std::map<Rest, int> SmallestCovering(const std::vector<KernelConfig>& configs, int length,
                                     Rest (*rest)(const KernelConfig&), int KernelConfig::*block) {
  std::map<Rest, int> out;
  for (const KernelConfig& c : configs) {
    if (c.*block < length) continue;
    auto [it, inserted] = out.emplace(rest(c), c.*block);
    if (!inserted) it->second = std::min(it->second, c.*block);
  }
  return out;
}

}  // namespace

absl::StatusOr<ConfigSpace> ConfigSpace::Create(const AttentionProblem& problem, const Backend& backend,
                                                const ConfigSpaceOptions& options) {
  if (auto s = problem.Validate(); !s.ok()) return s;
  if (auto s = CheckRange(options.block_m, 1, 1024, "block_m"); !s.ok()) return s;
  if (auto s = CheckRange(options.block_s, 1, 1024, "block_s"); !s.ok()) return s;
  if (auto s = CheckRange(options.threads, 1, 1024, "threads"); !s.ok()) return s;
  if (auto s = CheckRange(options.stages, 1, 8, "stages"); !s.ok()) return s;

  const std::string where =
      absl::StrCat("problem ", problem.Key(), " on ", backend.Describe().DeviceClass());
  std::vector<KernelConfig> configs = backend.CandidateConfigs(problem);
  if (configs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the backend can run no config for ", where));
  }
  // The filters one at a time, so that the error can name the one that removed the rest.
  const size_t offered = configs.size();
  for (const Filter& f : Filters(options)) {
    const size_t before = configs.size();
    std::erase_if(configs, [&](const KernelConfig& c) { return !f.allows(c); });
    if (configs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no config left for ", where, ": the backend offers ", offered, " configs and none",
          before == offered ? "" : absl::StrCat(" of the ", before, " the earlier options kept"),
          " has ", f.name, " in {", f.values, "}"));
    }
  }

  // Longest query / key run a tile can cover (the maxima for a varlen batch).
  const int max_q = std::max(1, problem.q_len);
  const int max_k = std::max(1, problem.kv_len);
  const std::map<Rest, int> cover_m = SmallestCovering(configs, max_q, &WithoutBlockM, &KernelConfig::block_m);
  const std::map<Rest, int> cover_s = SmallestCovering(configs, max_k, &WithoutBlockS, &KernelConfig::block_s);
  std::erase_if(configs, [&](const KernelConfig& c) {
    auto m = cover_m.find(WithoutBlockM(c));
    if (m != cover_m.end() && c.block_m > m->second) return true;
    auto s = cover_s.find(WithoutBlockS(c));
    return s != cover_s.end() && c.block_s > s->second;
  });

  std::sort(configs.begin(), configs.end(), ConfigOrderLess);
  configs.erase(std::unique(configs.begin(), configs.end()), configs.end());
  return ConfigSpace(std::move(configs));
}

std::vector<KernelConfig> ConfigSpace::ForVariant(Variant variant) const {
  std::vector<KernelConfig> out;
  for (const KernelConfig& c : configs_) {
    if (c.variant == variant) out.push_back(c);
  }
  return out;
}

std::vector<Variant> ConfigSpace::variants() const {
  std::set<int> seen;
  for (const KernelConfig& c : configs_) seen.insert(static_cast<int>(c.variant));
  std::vector<Variant> out;
  for (int v : seen) out.push_back(static_cast<Variant>(v));
  return out;
}

}  // namespace fusetune
