// Block sources: one build of fusetune measuring suite cells, one block at a time, so that a
// driver can alternate the blocks of two builds (fusetune/regress/compare.h).
//
// RunnerBlockSource measures in this process over a Backend with the Runner (verification
// against the fp64 reference, then Backend::Time blocks). ProcessBlockSource drives another
// fusetune binary, typically another commit's build, started as `<binary> bench-serve ...`
// (ServeBlocks below) and spoken to over its stdin and stdout: both builds then measure on the
// same device, alternately, in one session.
//
// Errors: a config that cannot run or does not verify is a CellCheck outcome, not an error; an
// error Status means the source itself failed (the child process died, the device was lost,
// the reply was malformed) and nothing it measures afterwards can be trusted.
//
// Thread-safety: a source is not thread-safe (it drives one device); use one per thread.
#ifndef FUSETUNE_REGRESS_BLOCK_SOURCE_H_
#define FUSETUNE_REGRESS_BLOCK_SOURCE_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/kernels/config.h"
#include "fusetune/kernels/problem.h"
#include "fusetune/records/trial.h"
#include "fusetune/tuner/runner.h"

namespace fusetune::regress {

// Which build a source measures, on what.
struct SourceInfo {
  std::string commit;       // the build's commit, canonical (fusetune/records/commit.h); "unknown" outside git
  DeviceInfo device;        // device.DeviceClass() must match between compared sources
  std::string environment;  // toolkit, driver, compiler: free text
  // A side of a RunnerBlockSource with others beside it: its kernels lay their scratch out in
  // the arena its source shares between all of them (Backend::UseScratchArena), so sides differ
  // in their kernels and not in where their scratch lies. False for a source alone, and for
  // every side when one side's kernels keep their own scratch (a library from before the
  // scratch calls; the GPU backends by default).
  bool shared_scratch = false;
  // Likewise: its kernels run their tasks on the worker threads of its source's own backend
  // (Backend::UseWorkers), the threads every side of that source uses.
  bool shared_workers = false;
};

// A cell's verification: the Runner's screen of (problem, config) on its random and
// adversarial inputs.
struct CellCheck {
  TrialOutcome outcome = TrialOutcome::kOk;
  std::string message;       // why, for every outcome but kOk
  double max_abs_error = 0;  // vs the fp64 reference, random inputs
  double max_rel_error = 0;  // the Runner's error metric (runner.h)
  double tolerance = 0;      // what the metric was checked against (ToleranceFor)
};

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual absl::StatusOr<SourceInfo> Describe() = 0;
  // Whether the source's backend can run (problem, config) at all (Backend::CanImplement),
  // without preparing inputs: true, or false with the reason in *why.
  virtual absl::StatusOr<bool> CanRun(const AttentionProblem& problem, const KernelConfig& config,
                                      std::string* why) = 0;
  // Verifies (problem, config); must come before MeasureBlock of that pair (and again after
  // another problem was measured, which a source may handle by re-preparing inputs itself).
  virtual absl::StatusOr<CellCheck> Verify(const AttentionProblem& problem, const KernelConfig& config) = 0;
  // One block of the source's timing options: `samples` launches and their median, with the
  // device state around them. FailedPrecondition when (problem, config) did not verify.
  virtual absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& problem,
                                                   const KernelConfig& config) = 0;
};

// Measures in this process. `backend` must outlive the source; `block` is one block's timing.
//
// `timing_cpu` >= 0 pins the measuring thread to that CPU for the duration of each block (its
// affinity is restored after). Two builds measured interleaved as two processes then launch
// from the same core: on an H200 host, unpinned processes differed by 1.5-2.5 % on 12 us
// kernels (host launch speed shows in short kernels' times), pinned ones by under 0.5 %.
// Only for GPU backends: a CPU backend's worker threads would inherit the one core.
//
// Sides: AddSide puts another build's kernels beside this source's own, measured by the same
// Runner on the same inputs (the same device buffers, one process, one device context), so
// that two builds compared interleaved differ in nothing but their kernels and launch code.
// Two processes of one build differ by up to 2 % on some cells, and by a different amount
// each time (docs/perf.md); one process removes that term rather than measuring around it.
// Once a side is added, and when every side's kernels take them (all sides or none), every
// side gets the same scratch arena, grown to what each call needs, and this source's backend's
// worker threads: two handles' own scratch lies at addresses of their own, which moved
// single-thread CPU cells by 1-2.5 % for a whole run, and their own threads were scheduled
// differently enough to move two-thread cells by 12-26 % in one run of eight.
class RunnerBlockSource : public BlockSource {
 public:
  RunnerBlockSource(Backend& backend, std::string commit, const TimingOptions& block,
                    RunnerOptions runner_options = {}, int timing_cpu = -1);
  ~RunnerBlockSource() override;

  absl::StatusOr<SourceInfo> Describe() override;
  absl::StatusOr<bool> CanRun(const AttentionProblem& problem, const KernelConfig& config, std::string* why) override;
  absl::StatusOr<CellCheck> Verify(const AttentionProblem& problem, const KernelConfig& config) override;
  absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& problem, const KernelConfig& config) override;

  // Adds `kernels`, another build's (OpenCapiBackend over a backend of this one's name and
  // device), as side number sides() - 1, reporting `commit`. Its cells are verified and timed
  // by this source's Runner; its memory calls are never made (the inputs are this source's).
  // Returns the side's source, owned by this one and valid as long as it is. InvalidArgument
  // for a null backend or one on another device class.
  absl::StatusOr<BlockSource*> AddSide(std::unique_ptr<Backend> kernels, std::string commit);
  // This source's own kernels (side 0) and each added side's.
  size_t sides() const { return sides_.size(); }
  // Side `side`'s source (side 0: this one); nullptr when there is no such side.
  BlockSource* side(size_t side);

 private:
  class KernelSwitch;
  class Side;
  struct SideState {
    std::string commit;
    std::vector<std::string> verified;  // "<problem key> <config key>" that passed
    std::unique_ptr<Side> source;       // null for side 0, this source itself
  };
  absl::StatusOr<SourceInfo> DescribeSide(size_t side);
  absl::StatusOr<bool> CanRunSide(size_t side, const AttentionProblem& problem, const KernelConfig& config,
                                  std::string* why);
  absl::StatusOr<CellCheck> VerifySide(size_t side, const AttentionProblem& problem, const KernelConfig& config);
  absl::StatusOr<SampleBlock> MeasureBlockSide(size_t side, const AttentionProblem& problem,
                                               const KernelConfig& config);

  Backend& backend_;
  std::unique_ptr<KernelSwitch> kernels_;  // what the Runner calls: the selected side's kernels
  TimingOptions block_;
  Runner runner_;
  std::vector<SideState> sides_;
  uint64_t blocks_measured_ = 0;
  int timing_cpu_ = -1;
};

// Options of a child `fusetune bench-serve`.
struct ProcessOptions {
  std::string binary;                 // path of the other build's fusetune
  std::vector<std::string> args;      // after "bench-serve": e.g. --backend cuda --device 0
  TimingOptions block;                // passed to the child as its block flags
  int timing_cpu = -1;                // passed as --timing-cpu (RunnerBlockSource) when >= 0
  // A reply slower than this means the child hangs (a kernel that never finishes): it is
  // killed and the request fails with DeadlineExceeded.
  double reply_timeout_seconds = 600;
};

// Drives `<binary> bench-serve <args>`. Start() launches it and reads its hello (commit and
// device); the destructor asks it to quit and reaps it.
class ProcessBlockSource : public BlockSource {
 public:
  // Unavailable when the binary cannot be started or does not answer the protocol (an older
  // build without `bench-serve`), with the child's stderr in the message.
  static absl::StatusOr<std::unique_ptr<ProcessBlockSource>> Start(const ProcessOptions& options);
  ~ProcessBlockSource() override;

  absl::StatusOr<SourceInfo> Describe() override;
  absl::StatusOr<bool> CanRun(const AttentionProblem& problem, const KernelConfig& config, std::string* why) override;
  absl::StatusOr<CellCheck> Verify(const AttentionProblem& problem, const KernelConfig& config) override;
  absl::StatusOr<SampleBlock> MeasureBlock(const AttentionProblem& problem, const KernelConfig& config) override;

  // Has the child load another build's C ABI library (`library`, of the build at `commit`) as
  // a side measured on its inputs (RunnerBlockSource::AddSide): a source for that build, in
  // this child's process. It must not outlive this source. Unimplemented when the child is a
  // build older than sides; FailedPrecondition with the child's reason when it cannot load the
  // library (the child serves on either way); InvalidArgument for a malformed commit; the
  // transport's errors (Unavailable, DeadlineExceeded) when the child is gone.
  // `planted`: the side's times carry the child's --plant-slowdown specs, as its own kernels'.
  absl::StatusOr<std::unique_ptr<BlockSource>> OpenSide(const std::string& library, const std::string& commit,
                                                        bool planted = false);

 private:
  class Side;
  ProcessBlockSource() = default;
  // The requests of side `side` (0: the child's own kernels), for this source and its sides.
  absl::StatusOr<bool> CanRunOn(int side, const AttentionProblem& problem, const KernelConfig& config,
                                std::string* why);
  absl::StatusOr<CellCheck> VerifyOn(int side, const AttentionProblem& problem, const KernelConfig& config);
  absl::StatusOr<SampleBlock> MeasureBlockOn(int side, const AttentionProblem& problem, const KernelConfig& config);
  absl::StatusOr<std::string> Request(const std::string& line);
  // Kills and reaps the child; Unavailable with `what` and its stderr.
  absl::Status ChildGone(std::string_view what);

  int pid_ = -1;
  int socket_ = -1;       // the child's stdin and stdout
  std::string received_;  // read from the child, not yet a whole line
  std::string stderr_path_;
  double reply_timeout_seconds_ = 600;
  SourceInfo info_;
};

// How a child opens a side (the open_side request): another build's C ABI library `library`,
// of the build at `commit`, as a source measured beside the served one, with the child's
// planted slowdowns when `planted`. Its error is replied and serving goes on.
using SideOpener = std::function<absl::StatusOr<BlockSource*>(const std::string& library, const std::string& commit,
                                                              bool planted)>;

// The child side: reads one JSON request per line from `in`, measures with `source` (side 0)
// or a side opened by `open_side` (none when empty: open_side then gets an error), writes one
// JSON reply per line to `out`, until {"op": "quit"} or end of input. The first line written
// is the hello ({"protocol": 1, "commit": ..., "device": {...}}). A malformed request or an
// unknown side gets {"error": "..."} and serving goes on; an error of a source itself is
// replied and ends it. Returns OK at a clean end, else the source's error.
absl::Status ServeBlocks(BlockSource& source, std::FILE* in, std::FILE* out, const SideOpener& open_side = {});

}  // namespace fusetune::regress

#endif  // FUSETUNE_REGRESS_BLOCK_SOURCE_H_
