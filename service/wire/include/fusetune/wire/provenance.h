// ConfigProvenance: where a best-config answer came from. The one definition shared by the
// server (BestConfigIndex answers exact, nearest or default) and the client cache (which
// adds its own fallback); fusetune/wire/convert.h maps it to and from the proto's
// GetBestConfigResponse.Provenance. A plain header (no proto, no gRPC) so that the client's
// public header can include it.
//
// Thread-safety: an enum and a pure function.
#ifndef FUSETUNE_WIRE_PROVENANCE_H_
#define FUSETUNE_WIRE_PROVENANCE_H_

#include <cstdint>
#include <string_view>

namespace fusetune {

enum class ConfigProvenance : uint8_t {
  kExact,     // the service tuned this exact problem on this device class
  kNearest,   // the service's nearest tuned shape (same head_dim, dtype, causal)
  kDefault,   // the service had nothing comparable and sent its default
  kFallback,  // not from the service (not fetched yet, unreachable, or refused): the
              // client cache's own default config; the server never answers with it
};

// "exact", "nearest", "default", "fallback" ("unknown" for a value outside the enum).
std::string_view ConfigProvenanceName(ConfigProvenance p);

}  // namespace fusetune

#endif  // FUSETUNE_WIRE_PROVENANCE_H_
