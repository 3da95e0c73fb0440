#include "core/memory_info.h"

#include <unistd.h>

#if defined(__APPLE__)
#include <mach/mach.h>
#else
#include <fstream>
#include <sstream>
#include <string>
#endif

namespace orchard::core {

#if defined(__APPLE__)

uint64_t available_memory_bytes() {
  vm_statistics64_data_t stats{};
  mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
  if (host_statistics64(mach_host_self(), HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&stats), &count) != KERN_SUCCESS)
    return 0;
  const long page = sysconf(_SC_PAGESIZE);
  // What vm_stat calls free, inactive and purgeable can all be handed to a new program.
  return page > 0 ? (static_cast<uint64_t>(stats.free_count) + stats.inactive_count + stats.purgeable_count) *
                        static_cast<uint64_t>(page)
                  : 0;
}

#else

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  // No /proc (or a kernel before 3.14): free pages only.
#ifdef _SC_AVPHYS_PAGES
  const long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_AVPHYS_PAGES);
  if (page > 0 && pages > 0) return static_cast<uint64_t>(page) * static_cast<uint64_t>(pages);
#endif
  return 0;
}

#endif

}  // namespace orchard::core
