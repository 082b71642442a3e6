#include "fusetune/report/device_peaks.h"

#include <string>

#include "fmt/format.h"

namespace fusetune::report {
namespace {

struct KnownDevice {
  const char* match;  // found in the device class or name, '-' and ' ' alike
  const char* name;
  double fp32, tf32, fp16, bf16;  // dense TFLOP/s
  double tbps;
};

// Data-sheet numbers (dense, no sparsity). The most specific match comes first.
constexpr KnownDevice kDevices[] = {
    {"H200", "NVIDIA H200 SXM", 66.9, 494.7, 989.4, 989.4, 4.8},
    {"H100", "NVIDIA H100 SXM", 66.9, 494.7, 989.4, 989.4, 3.35},
    {"A100", "NVIDIA A100 SXM 80GB", 19.5, 156, 312, 312, 2.039},
};

std::string Normalised(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '-' || c == '_') c = ' ';
  }
  return out;
}

}  // namespace

std::optional<DevicePeak> KnownPeak(std::string_view device_class_or_name, Precision precision) {
  const std::string text = Normalised(device_class_or_name);
  for (const KnownDevice& d : kDevices) {
    if (text.find(d.match) == std::string::npos) continue;
    double tflops = d.fp32;
    switch (precision) {
      case Precision::kFp32: tflops = d.fp32; break;
      case Precision::kTf32: tflops = d.tf32; break;
      case Precision::kFp16: tflops = d.fp16; break;
      case Precision::kBf16: tflops = d.bf16; break;
    }
    return DevicePeak{d.name, tflops, d.tbps,
                      fmt::format("{} data sheet: {} dense {:g} TFLOP/s, memory {:g} TB/s", d.name,
                                  PrecisionName(precision), tflops, d.tbps)};
  }
  return std::nullopt;
}

}  // namespace fusetune::report
