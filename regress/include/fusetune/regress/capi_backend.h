// CapiBackend: a Backend whose kernels are another build's, reached through that build's C ABI
// library (libfusetune_capi.so, fusetune/c_api.h) loaded into this process.
//
// What it is for: comparing and bisecting builds of fusetune older than `bench-serve`. Every
// build since the C ABI's version 1 ships the library, so this build's `bench-serve
// --capi-library PATH` can serve another commit's kernels over the bench protocol: the cells are
// verified by this build's Runner against the fp64 reference, and the blocks are timed by the
// library's own fusetune_time (its kernels, its timer).
//
// The library is loaded with RTLD_LOCAL; only its fusetune_* symbols are exported, so its
// internal copies of the kernels and libraries do not meet this build's. Memory (Allocate, the
// copies, Fill) goes through `memory`, this build's backend of the same name on the same device:
// both address the same device (the CUDA driver's primary context is shared by every runtime in
// the process). What the ABI cannot say is marked so: Describe() is `memory`'s description,
// CandidateConfigs() is empty (a served cell names its config), and timing blocks carry no
// device state (DeviceState::known is false).
//
// Problems: a contiguous prefill (uniform, padded or varlen) goes through fusetune_can_implement,
// fusetune_run and fusetune_time, which every library has. A decode problem or a paged KV cache
// (block table, pool, shared prefix) goes through the *_kv_cache functions, and K/V stored as
// e4m3 through the *_kv_quant ones; both are looked up when the library is loaded, and a library
// that predates them answers such problems Unimplemented (the plain functions would run a decode
// problem as a prefill and read a page pool or e4m3 bytes as contiguous K/V of the dtype). A
// config's split_kv 0 (/skauto, planned at launch) is handed over as it is: a library from before
// that meaning refuses it itself. Libraries of C ABI version 1 and 2 are served: version 2
// appended pingpong and persistent to fusetune_config, so a version-1 library reads the same
// struct, and a config that sets either is Unimplemented there. ScratchBytes and UseScratchArena
// go to fusetune_scratch_bytes and fusetune_use_scratch_arena where the library has both (and
// its backend takes an arena), UseWorkers to fusetune_use_workers where it has that; elsewhere
// they are Unimplemented and the library keeps its own scratch and threads. TimingOptions::graph
// reaches fusetune_use_graph_timing where the library has it and its handle can time through a
// graph (TakesGraphTiming); a block is graphed only when that call said yes, so a library
// without it times launch by launch and says so (TimingSamples::graphed false).
//
// Thread-safety: as the ABI's handle, not thread-safe; one CapiBackend per thread.
#ifndef FUSETUNE_REGRESS_CAPI_BACKEND_H_
#define FUSETUNE_REGRESS_CAPI_BACKEND_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"

namespace fusetune::regress {

// Loads `library` and creates its backend `backend` ("cpu" or "cuda") on device `device`.
// NotFound when the file does not exist; InvalidArgument when it is not a loadable library or
// lacks a fusetune_* function the adapter needs (named); FailedPrecondition when its ABI version
// is not one this build calls (1 or 2); the library's own error (its status code) when it cannot
// create the backend. `memory` must be this build's backend of the same name and device.
absl::StatusOr<std::unique_ptr<Backend>> OpenCapiBackend(const std::string& library, std::string_view backend,
                                                         int device, std::unique_ptr<Backend> memory);

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_CAPI_BACKEND_H_
