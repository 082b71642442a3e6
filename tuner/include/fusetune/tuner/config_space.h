// ConfigSpace: the kernel configs worth trying for one problem on one device.
//
// The space is what the backend says it can run (Backend::CandidateConfigs: every config
// CanImplement accepts, for every variant and precision), narrowed by the user's option
// lists, minus redundant tiles: a config whose block_m is larger than the smallest
// candidate block_m that already covers the query length, everything else equal, is
// dropped (it would rerun the same single, partly empty tile), and likewise block_s against
// the key length. So no config the backend can run is unreachable, and every config in the
// space passes CanImplement.
//
// Thread-safety: a ConfigSpace is an immutable value after Create(); safe to share. Create()
// calls the backend (CandidateConfigs, Describe), so it runs on the thread that owns it.
#ifndef FUSETUNE_TUNER_CONFIG_SPACE_H_
#define FUSETUNE_TUNER_CONFIG_SPACE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {

// Filters on the backend's candidates: a config stays when each non-empty list holds its
// value. An empty list filters nothing, so the default space is everything the backend can
// run for the problem.
struct ConfigSpaceOptions {
  std::vector<Variant> variants;
  std::vector<Precision> precisions;
  std::vector<int> block_m;
  std::vector<int> block_s;
  std::vector<int> threads;
  std::vector<int> stages;
};

class ConfigSpace {
 public:
  // Enumerates the space from backend.CandidateConfigs(problem). InvalidArgument when the
  // problem is invalid, a list holds an out-of-range value (block sizes and threads in
  // [1, 1024], stages in [1, 8]), the backend can run nothing for the problem, or the
  // options leave nothing (the message names the option that removed the last configs).
  static absl::StatusOr<ConfigSpace> Create(const AttentionProblem& problem, const Backend& backend,
                                            const ConfigSpaceOptions& options = {});

  // Every config, sorted by ConfigOrderLess, without duplicates.
  const std::vector<KernelConfig>& configs() const { return configs_; }
  // The configs of one variant, in the same order (empty if the variant was not asked for).
  std::vector<KernelConfig> ForVariant(Variant variant) const;
  // The variants present, in enum order.
  std::vector<Variant> variants() const;
  size_t size() const { return configs_.size(); }

 private:
  explicit ConfigSpace(std::vector<KernelConfig> configs) : configs_(std::move(configs)) {}
  std::vector<KernelConfig> configs_;
};

}  // namespace fusetune

#endif  // FUSETUNE_TUNER_CONFIG_SPACE_H_
