#include "sql.h"

#include <cmath>
#include <limits>

namespace fusetune::db_internal {

Statement& Statement::Bind(int index, double value) {
  if (std::isnan(value)) {
    impl_->BindNull(index);
  } else {
    impl_->BindDouble(index, value);
  }
  return *this;
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

double Statement::Double(int col) const {
  if (IsNull(col)) return std::numeric_limits<double>::quiet_NaN();
  return impl_->Double(col);
}

}  // namespace fusetune::db_internal
