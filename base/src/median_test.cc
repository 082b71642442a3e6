#include "fusetune/base/median.h"

#include <cmath>

#include <gtest/gtest.h>

namespace fusetune {
namespace {

TEST(Median, OddCountIsTheMiddleElement) {
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({3, 1, 2}), 2);
}

TEST(Median, EvenCountIsTheMeanOfTheTwoMiddleElements) { EXPECT_EQ(Median({4, 1, 3, 2}), 2.5); }

TEST(Median, OneValueIsItself) { EXPECT_EQ(Median({7.25}), 7.25); }

TEST(Median, NoValuesIsNaN) { EXPECT_TRUE(std::isnan(Median({}))); }

TEST(Median, RepeatedValuesAreKept) { EXPECT_EQ(Median({2, 2, 9, 2}), 2); }

}  // namespace
}  // namespace fusetune
