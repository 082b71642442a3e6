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

}  // namespace
}  // namespace fusetune
