#include "fusetune/base/strings.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(Cat, JoinsStdStringViewsStringsAndNumbers) {
  const std::string_view view = "prefill";
  const std::string text = "/b";
  EXPECT_EQ(Cat(view, text, 4, "/d", 128), "prefill/b4/d128");
}

TEST(FormatBytes, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(FormatBytes(-5), "0 B");
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 40), "5.0 TiB");
}

}  // namespace
}  // namespace fusetune
