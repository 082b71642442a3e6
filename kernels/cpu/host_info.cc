#include "host_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace fusetune::cpu {
namespace {

std::string Trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// Value of the first "key : value" line of a /proc file whose key equals `key`.
std::string ProcField(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (Trim(line.substr(0, colon)) == key) return Trim(line.substr(colon + 1));
  }
  return "";
}

int64_t ReadInt(const char* path) {
  std::ifstream in(path);
  int64_t v = 0;
  if (in >> v) return v;
  return 0;
}

// "32768K" / "2M" style sizes from /sys/devices/system/cpu/cpu0/cache/index*/size.
int64_t ParseCacheSize(const std::string& s) {
  if (s.empty()) return 0;
  int64_t v = 0;
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) v <<= 10;
  if (i < s.size() && (s[i] == 'M' || s[i] == 'm')) v <<= 20;
  return v;
}

}  // namespace

std::string BestKernelIsa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    return "avx512";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "generic";
}

int64_t LastLevelCacheBytes() {
  int64_t best = 0;
  int best_level = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream type_file(dir + "/type");
    std::string type;
    if (!(type_file >> type)) break;
    if (type == "Instruction") continue;
    const int level = static_cast<int>(ReadInt((dir + "/level").c_str()));
    std::ifstream size_file(dir + "/size");
    std::string size;
    size_file >> size;
    if (level >= best_level && ParseCacheSize(size) > 0) {
      best_level = level;
      best = ParseCacheSize(size);
    }
  }
  if (best == 0) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    best = l3 > 0 ? l3 : 32ll << 20;
  }
  return best;
}

DeviceInfo DescribeHost(const std::string& kernel_isa) {
  DeviceInfo info;
  info.backend = "cpu";
  info.name = ProcField("/proc/cpuinfo", "model name");
  if (info.name.empty()) info.name = ProcField("/proc/cpuinfo", "Hardware");
  if (info.name.empty()) info.name = "unknown-cpu";
  struct utsname uts {};
  std::string machine = "unknown";
  std::string release;
  if (uname(&uts) == 0) {
    machine = uts.machine;
    release = uts.release;
  }
  info.arch = machine;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    info.arch += "-avx512";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    info.arch += "-avx2";
  }
#endif
  info.device_index = 0;
  const unsigned hw = std::thread::hardware_concurrency();
  info.sm_count = hw == 0 ? 1 : static_cast<int>(hw);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  info.shared_mem_per_block = l2 > 0 ? l2 : 0;  // one worker's private cache
  info.l2_bytes = LastLevelCacheBytes();
  std::istringstream mem(ProcField("/proc/meminfo", "MemTotal"));
  int64_t kib = 0;
  mem >> kib;
  info.memory_bytes = kib * 1024;
  info.driver = "linux " + release + "; kernels " + kernel_isa;
  int64_t khz = ReadInt("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  if (khz > 0) {
    info.max_clock_mhz = static_cast<int>(khz / 1000);
  } else {
    std::istringstream mhz(ProcField("/proc/cpuinfo", "cpu MHz"));
    double v = 0;
    mhz >> v;
    info.max_clock_mhz = static_cast<int>(v);
  }
  return info;
}

}  // namespace fusetune::cpu
