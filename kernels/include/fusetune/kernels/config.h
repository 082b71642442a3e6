// KernelConfig: one point of the tunable space of the attention kernel family.
//
// The same parameters mean the same thing on every backend:
//   variant   fused (QK^T -> online softmax -> PV, S/P never stored), partial (QK^T+softmax
//             fused, P stored, then PV), materialized (S stored, softmax pass, PV pass);
//   block_m   query rows per tile (GPU: per thread block; CPU: per task);
//   block_s   keys per tile of the inner loop;
//   threads   GPU: threads per block (a multiple of the warp size);
//             CPU: worker threads sharing the problem;
//   precision arithmetic of the two matrix products: fp32 exact, tf32, fp16 or bf16 operands;
//             the softmax state (running max m, sum l) and the accumulator are always fp32;
//   stages    K/V shared-memory buffers per tile stream. GPU: 1 = one K and one V buffer,
//             loaded in FlashAttention-2 order (the V load overlaps QK^T, the next K load
//             overlaps PV); 2 = double-buffered cp.async. CPU: always 1;
//   split_kv  number of KV splits combined afterwards (1 = none; decode uses more);
//             kAutoSplitKv (0) = the backend plans the count at launch from its processor
//             count and the work (ChooseSplitKv in split_kv.h);
//   pingpong  GPU only, the Hopper wgmma fused kernel: the two consumer warpgroups of a block
//             issue their GEMMs in alternation (ordered by named barriers), so one's softmax
//             overlaps the other's GEMMs;
//   persistent GPU only, the Hopper wgmma fused kernel: one block per multiprocessor, each
//             looping over query tiles from a tile scheduler (longest first when causal), so
//             one tile's epilogue overlaps the next tile's loads.
//             The CPU backend and the other kernel families never implement pingpong or
//             persistent; their CanImplement refuses a config that sets either.
//
// Thread-safety: a plain value type.
#ifndef FUSETUNE_KERNELS_CONFIG_H_
#define FUSETUNE_KERNELS_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fusetune {

enum class Variant { kFused, kPartial, kMaterialized };
std::string_view VariantName(Variant v);  // "fused", "partial", "materialized"
absl::StatusOr<Variant> ParseVariant(std::string_view name);

enum class Precision { kFp32, kTf32, kFp16, kBf16 };
std::string_view PrecisionName(Precision p);  // "fp32", "tf32", "fp16", "bf16"
absl::StatusOr<Precision> ParsePrecision(std::string_view name);

// split_kv value meaning "plan the split count at launch" (key suffix /skauto).
inline constexpr int kAutoSplitKv = 0;

struct KernelConfig {
  Variant variant = Variant::kFused;
  int block_m = 64;
  int block_s = 64;
  int threads = 1;
  Precision precision = Precision::kFp32;
  int stages = 1;
  int split_kv = 1;
  bool pingpong = false;
  bool persistent = false;

  // Range checks only (positive sizes, stages in [1, 8], split_kv kAutoSplitKv or in [1, 64]); whether a
  // backend can run it is Backend::CanImplement's question.
  absl::Status Validate() const;

  // Canonical key, e.g. fused/bm64/bs32/t4/fp32/st2; "/sk<N>" is appended when split_kv > 1,
  // "/skauto" when it is kAutoSplitKv, then "/pingpong" and "/persistent" when set, in that
  // order (fused/bm128/bs128/t384/bf16/st2/pingpong/persistent). Keys of configs that set
  // neither flag are the keys stored before the flags existed.
  std::string Key() const;
  // Inverse of Key(); InvalidArgument on anything Key() cannot produce.
  static absl::StatusOr<KernelConfig> FromKey(std::string_view key);

  friend bool operator==(const KernelConfig&, const KernelConfig&) = default;
};

// A fixed total order used to break ties deterministically (compares Key()-relevant fields:
// variant, precision, block_m, block_s, threads, stages, split_kv, pingpong, persistent, in
// that order).
bool ConfigOrderLess(const KernelConfig& a, const KernelConfig& b);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_CONFIG_H_
