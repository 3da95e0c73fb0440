// macOS: sysctl for the CPU and memory (free memory: core::available_memory_bytes), the
// interface speed from the link layer's baudrate.
#include <net/if.h>
#include <ifaddrs.h>
#include <sys/sysctl.h>

#include <memory>
#include <string>

#include "cluster/local_machine.h"
#include "core/memory_info.h"

namespace orchard::cluster::detail {
namespace {

std::string sysctl_string(const char* name) {
  size_t size = 0;
  if (sysctlbyname(name, nullptr, &size, nullptr, 0) != 0 || size == 0) return "";
  std::string value(size, '\0');
  if (sysctlbyname(name, value.data(), &size, nullptr, 0) != 0) return "";
  value.resize(size > 0 && value[size - 1] == '\0' ? size - 1 : size);
  return value;
}

template <typename T>
T sysctl_number(const char* name) {
  T value{};
  size_t size = sizeof value;
  return sysctlbyname(name, &value, &size, nullptr, 0) == 0 ? value : T{};
}

}  // namespace

void detect_platform(LocalMachine& m) {
  m.os = "macOS";
  m.os_version = sysctl_string("kern.osproductversion");
  m.cpu_brand = sysctl_string("machdep.cpu.brand_string");
  m.cores = sysctl_number<int32_t>("hw.ncpu");
  // perflevel0 is the fastest cluster on Apple silicon; Intel Macs have no perflevels.
  m.performance_cores = sysctl_number<int32_t>("hw.perflevel0.physicalcpu");
  if (m.performance_cores == 0) m.performance_cores = sysctl_number<int32_t>("hw.physicalcpu");
  m.memory_total_bytes = sysctl_number<uint64_t>("hw.memsize");
  m.memory_free_bytes = core::available_memory_bytes();
}

double interface_gbps(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_LINK || name != i->ifa_name || !i->ifa_data) continue;
    const auto* data = static_cast<const if_data*>(i->ifa_data);
    return static_cast<double>(data->ifi_baudrate) / 1e9;
  }
  return 0;
}

}  // namespace orchard::cluster::detail
