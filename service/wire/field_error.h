// The one form of a field's InvalidArgument message inside the wire library:
// "<field>: <what is wrong>". `what` is absl::string_view: it is usually a status message.
#ifndef FUSETUNE_WIRE_FIELD_ERROR_H_
#define FUSETUNE_WIRE_FIELD_ERROR_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fusetune/base/strings.h"

namespace fusetune::wire_internal {

inline absl::Status InvalidField(std::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(Cat(field, ": ", what));
}

}  // namespace fusetune::wire_internal

#endif  // FUSETUNE_WIRE_FIELD_ERROR_H_
