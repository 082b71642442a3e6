// ChooseSplitKv: how many parts a decode launch splits each sequence's keys into
// (flash-decoding), when the config leaves it to the backend (KernelConfig::split_kv ==
// kAutoSplitKv). The one definition every backend's launch uses.
//
// A decode launch without splitting has one work item per (sequence, KV head): the query
// heads of a KV group and the new tokens share one pass over the group's keys. With few such
// items (small batch, long caches) most processors idle; splitting multiplies the items and
// adds a combine of the partial outputs by their log-sum-exp. The rule is FlashAttention-2's
// wave-efficiency rule: among split counts whose parts keep at least `min_keys_per_split`
// keys, the smallest whose wave efficiency (items / (waves * processors)) is within 85 % of
// the best one. `processors` is what runs items at once: CPU worker threads; on a GPU the
// resident block slots (multiprocessors x blocks of the kernel each holds), so a kernel small
// enough for three blocks per multiprocessor is planned for three times the items.
//
// Thread-safety: a pure function.
#ifndef FUSETUNE_KERNELS_SPLIT_KV_H_
#define FUSETUNE_KERNELS_SPLIT_KV_H_

#include "fusetune/kernels/problem.h"

namespace fusetune {

inline constexpr int kMaxSplitKv = 64;

// The split count for `problem` on a device of `processors` (SMs, CUs, or CPU worker
// threads), in [1, kMaxSplitKv]. 1 for prefill problems, for work that already fills
// 80 % of the processors, and for caches shorter than two parts. The problem must be valid.
int ChooseSplitKv(const AttentionProblem& problem, int processors, int min_keys_per_split = 256);

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_SPLIT_KV_H_
