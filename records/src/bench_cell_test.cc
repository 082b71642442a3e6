#include "fusetune/records/bench_cell.h"

#include "gtest/gtest.h"

namespace fusetune {
namespace {

TEST(BenchCell, SamplesAreTheBlocksMediansInMeasurementOrder) {
  BenchCell cell;
  EXPECT_TRUE(cell.SamplesUs().empty());
  for (double median : {12.5, 10.0, 11.25}) {
    SampleBlock b;
    b.samples = 5;
    b.median_us = median;
    cell.blocks.push_back(b);
  }
  EXPECT_EQ(cell.SamplesUs(), (std::vector<double>{12.5, 10.0, 11.25}));
}

}  // namespace
}  // namespace fusetune
