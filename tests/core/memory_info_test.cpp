// available_memory_bytes against the system's own figures.
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/memory_info.h"

namespace orchard::core {
namespace {

uint64_t physical_bytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

TEST(MemoryInfo, AvailableIsSomeOfThePhysicalMemory) {
  const uint64_t available = available_memory_bytes();
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, physical_bytes());
#ifdef _SC_AVPHYS_PAGES
  // It counts reclaimable memory (the page cache) besides free pages, so it is not below them
  // (MemAvailable holds back the kernel's low watermarks: a few percent at most).
  const uint64_t free_pages = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GE(static_cast<double>(available), static_cast<double>(free_pages) - 0.05 * static_cast<double>(physical_bytes()));
#endif
}

}  // namespace
}  // namespace orchard::core
