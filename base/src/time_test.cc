#include "fusetune/base/time.h"

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(NowUnixMs, IsAfter2020AndDoesNotGoBackwards) {
  const int64_t first = NowUnixMs();
  EXPECT_GT(first, int64_t{1577836800000});  // 2020-01-01T00:00:00Z
  EXPECT_GE(NowUnixMs(), first);
}

TEST(FormatUtc, FormatsInUtcAndDropsMilliseconds) {
  // 2026-12-02T13:17:08.999Z
  EXPECT_EQ(FormatUtc(int64_t{1796217428999}, "%Y-%m-%d %H:%M"), "2026-12-02 13:17");
  EXPECT_EQ(Rfc3339Utc(int64_t{1796217428999}), "2026-12-02T13:17:08Z");
}

TEST(FormatUtc, TimesBeforeTheEpochFallInTheirSecond) {
  EXPECT_EQ(Rfc3339Utc(-1), "1969-12-31T23:59:59Z");
  EXPECT_EQ(Rfc3339Utc(0), "1970-01-01T00:00:00Z");
}

}  // namespace
}  // namespace fusetune
