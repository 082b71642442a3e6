// The peak a report measures a kernel against: a small table of known devices by name, with
// the dense tensor/vector throughput per precision and the memory bandwidth of the data sheet.
// Prefill is compute-bound (% of peak TFLOP/s), decode memory-bound (% of peak TB/s).
//
// Thread-safety: pure functions over a constant table.
#ifndef FUSETUNE_REPORT_DEVICE_PEAKS_H_
#define FUSETUNE_REPORT_DEVICE_PEAKS_H_

#include <optional>
#include <string>
#include <string_view>

#include "fusetune/kernels/config.h"

namespace fusetune::report {

struct DevicePeak {
  std::string device;     // the table's name for it, e.g. "NVIDIA H200 SXM"
  double tflops = 0;      // dense peak at the asked precision, TFLOP/s
  double tbps = 0;        // memory bandwidth, TB/s (10^12 bytes per second)
  std::string basis;      // what the numbers are, for the page: "data sheet: bf16 dense 989 TFLOP/s, 4.8 TB/s"
};

// The peak of the device `device_class_or_name` names (a device class such as
// "cuda/NVIDIA-H200/sm90" or a device name such as "NVIDIA H200") at `precision`; nullopt
// when the table does not know the device (a CPU, an unlisted GPU): the report then says
// "unknown peak" instead of guessing.
std::optional<DevicePeak> KnownPeak(std::string_view device_class_or_name, Precision precision);

}  // namespace fusetune::report

#endif  // FUSETUNE_REPORT_DEVICE_PEAKS_H_
