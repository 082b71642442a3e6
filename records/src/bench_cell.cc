#include "fusetune/records/bench_cell.h"

namespace fusetune {

std::vector<double> BenchCell::SamplesUs() const {
  std::vector<double> out;
  out.reserve(blocks.size());
  for (const SampleBlock& b : blocks) out.push_back(b.median_us);
  return out;
}

}  // namespace fusetune
