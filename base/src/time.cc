#include "fusetune/base/time.h"

#include <chrono>

namespace fusetune {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace fusetune
