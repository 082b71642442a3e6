#include "fusetune/wire/provenance.h"

namespace fusetune {

std::string_view ConfigProvenanceName(ConfigProvenance p) {
  switch (p) {
    case ConfigProvenance::kExact: return "exact";
    case ConfigProvenance::kNearest: return "nearest";
    case ConfigProvenance::kDefault: return "default";
    case ConfigProvenance::kFallback: return "fallback";
  }
  return "unknown";
}

}  // namespace fusetune
