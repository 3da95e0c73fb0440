// Linux: /proc/cpuinfo, sysconf for memory, uname, and sysfs for interface speeds.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "cluster/local_machine.h"
#include "core/memory_info.h"

namespace orchard::cluster::detail {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

void detect_platform(LocalMachine& m) {
  utsname u{};
  m.os = "Linux";
  if (uname(&u) == 0) m.os_version = u.release;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  // Physical cores: distinct (package, core id) pairs; SMT siblings share one.
  std::set<std::pair<std::string, std::string>> physical;
  std::string package;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "model name" && m.cpu_brand.empty()) m.cpu_brand = value;
    if (key == "physical id") package = value;
    if (key == "core id") physical.insert({package, value});
  }
  m.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.performance_cores = physical.empty() ? m.cores : std::min(m.cores, static_cast<int>(physical.size()));
  // MemTotal, as the C library counts it; what is available is core's (one /proc/meminfo reader).
  m.memory_total_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  m.memory_free_bytes = core::available_memory_bytes();
}

double interface_gbps(const std::string& name) {
  std::ifstream in("/sys/class/net/" + name + "/speed");
  long mbps = 0;
  // Virtual interfaces report -1 or refuse the read.
  if (!(in >> mbps) || mbps <= 0) return 0;
  return static_cast<double>(mbps) / 1000.0;
}

}  // namespace orchard::cluster::detail
