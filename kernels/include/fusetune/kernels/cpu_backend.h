// The CPU backend: the whole kernel family (fused, partial, materialized) on host threads,
// with the same tunable parameters as the GPU backends (threads = worker threads), over
// contiguous or paged K/V, prefill and decode; split_kv splits the keys of the fused variant
// on decode problems only (otherwise CanImplement refuses split_kv other than 1, and
// kAutoSplitKv plans 1).
//
// Thread-safety: as Backend (one instance per thread).
#ifndef FUSETUNE_KERNELS_CPU_BACKEND_H_
#define FUSETUNE_KERNELS_CPU_BACKEND_H_

#include <memory>

#include "fusetune/kernels/backend.h"

namespace fusetune {

std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace fusetune

#endif  // FUSETUNE_KERNELS_CPU_BACKEND_H_
