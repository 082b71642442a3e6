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

TEST(NaturalLess, ComparesRunsOfDigitsAsNumbers) {
  EXPECT_TRUE(NaturalLess("prefill/q128/k128", "prefill/q1024/k1024"));
  EXPECT_FALSE(NaturalLess("prefill/q1024/k1024", "prefill/q128/k128"));
  EXPECT_TRUE(NaturalLess("a2", "a10"));
  EXPECT_TRUE(NaturalLess("a007", "a10"));
  EXPECT_TRUE(NaturalLess("abc", "abd"));
  EXPECT_TRUE(NaturalLess("ab", "abc"));
  EXPECT_FALSE(NaturalLess("same", "same"));
}

}  // namespace
}  // namespace fusetune
