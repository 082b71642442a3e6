#include "fusetune/base/time.h"

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(NowUnixMs, IsAfter2020AndDoesNotGoBackwards) {
  const int64_t first = NowUnixMs();
  EXPECT_GT(first, int64_t{1577836800000});  // 2020-01-01T00:00:00Z
  EXPECT_GE(NowUnixMs(), first);
}

}  // namespace
}  // namespace fusetune
