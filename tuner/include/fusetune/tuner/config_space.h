// ConfigSpace: the kernel configs worth trying for one problem on one device.
//
// The space is the cross product of the option lists below, filtered by constraints written
// in code (ConfigSpace::Create): a block larger than the sequence it tiles is dropped
// unless it is the smallest such block (it would only repeat the smallest one), threads
// are capped by the device (CPU: hardware threads; GPU: 1024 and a warp multiple), and
// precisions follow the storage dtype. Whether the backend can really run a config is
// Backend::CanImplement's question, asked by the Runner; a "no" is recorded as an
// unsupported trial, not hidden.
//
// Thread-safety: a ConfigSpace is an immutable value after Create(); safe to share.
#ifndef FUSETUNE_TUNER_CONFIG_SPACE_H_
#define FUSETUNE_TUNER_CONFIG_SPACE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"

namespace fusetune {

// Each empty list means "the default for this problem and device" (see DefaultSpaceOptions).
struct ConfigSpaceOptions {
  std::vector<Variant> variants;      // empty = fused, partial, materialized
  std::vector<Precision> precisions;  // empty = DefaultPrecisions(dtype, device)
  std::vector<int> block_m;           // empty = {16, 32, 64, 128} (GPU: {64, 128, 192})
  std::vector<int> block_s;           // empty = {16, 32, 64, 128}
  std::vector<int> threads;           // empty = CPU: powers of two up to the hardware
                                      //   threads (and that count); GPU: {128, 256, 384, 512}
  std::vector<int> stages;            // empty = CPU: {1}; GPU: {1, 2, 3}
};

// Precisions tried by default for a storage dtype: fp32 storage -> fp32 (plus tf32 on GPU
// backends); fp16 -> fp16 and fp32; bf16 -> bf16 and fp32.
std::vector<Precision> DefaultPrecisions(DType dtype, const DeviceInfo& device);

// `options` with every empty list replaced by its default for `device`.
ConfigSpaceOptions DefaultSpaceOptions(const ConfigSpaceOptions& options, DType dtype,
                                       const DeviceInfo& device);

class ConfigSpace {
 public:
  // Enumerates the space. InvalidArgument when the problem is invalid, a list holds an
  // out-of-range value (block sizes and threads in [1, 1024], stages in [1, 8]), or the
  // constraints leave nothing to try.
  static absl::StatusOr<ConfigSpace> Create(const AttentionProblem& problem,
                                            const DeviceInfo& device,
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
