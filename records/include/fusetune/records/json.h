// The one JSON form of the records that travel as text: a device's description, a trial's
// timing blocks (stored by the database, sent between two builds by the bench protocol) and a
// whole trial (the worker's spool).
//
// Blocks, compactly: [{"n": samples, "us": median_us, "b": before, "a": after, "u": unsteady,
// "g": graphed}], a device state as {"mhz": sm_clock_mhz, "mw": power_mw, "thr":
// throttle_reasons}; an unknown state is left out (its fields mean nothing) and reads back as
// DeviceState{}, and "g" is written only when true (a block without it, from before it existed
// too, reads back as not graphed). The database's trials and bench cells and the worker's spool
// store this form.
//
// Reading also accepts the form the worker's spool wrote before it used this one, so that a
// spool left by an older worker still uploads: [{"samples", "median_us", "unsteady",
// "before": state, "after": state}], a state as {"known", "sm_clock_mhz", "power_mw",
// "throttle_reasons"} (an unknown one reads back as DeviceState{}).
//
// Thread-safety: pure functions.
#ifndef FUSETUNE_RECORDS_JSON_H_
#define FUSETUNE_RECORDS_JSON_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fusetune/kernels/backend.h"
#include "fusetune/records/trial.h"

namespace fusetune {

std::string DeviceInfoToJson(const DeviceInfo& device);
// Missing fields read as their defaults. InvalidArgument for text that is not a JSON object
// of the right field types.
absl::StatusOr<DeviceInfo> DeviceInfoFromJson(std::string_view text);

std::string SampleBlocksToJson(const std::vector<SampleBlock>& blocks);
// InvalidArgument for text that is not an array of blocks in one of the forms above.
absl::StatusOr<std::vector<SampleBlock>> SampleBlocksFromJson(std::string_view text);

// A whole trial (the worker's spool payload): every Trial field under its own name, the
// outcome and stage by name, the blocks in the form above. Reading takes records written
// before a field existed: without stage (a screen trial), blocks, wall_seconds or
// unquantised_rel_error (0). InvalidArgument for text that is not such an object or has no
// trial_id.
std::string TrialToJson(const Trial& trial);
absl::StatusOr<Trial> TrialFromJson(std::string_view json);

}  // namespace fusetune

#endif  // FUSETUNE_RECORDS_JSON_H_
