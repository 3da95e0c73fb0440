#pragma once
// Facts about the machine this process runs on: identity, OS, CPU, memory and IPv4 interfaces.
// The OS-specific half lives in local_machine_macos.cpp (sysctl, Mach host statistics) or
// local_machine_linux.cpp (/proc, sysfs); CMake compiles one of them.
#include <cstdint>
#include <string>
#include <vector>

namespace orchard::cluster {

struct NetInterface {
  std::string name;       // "en0", "veth1"
  std::string address;    // dotted IPv4
  int prefix_length = 0;  // of the netmask
  std::string broadcast;  // dotted IPv4; empty when the interface has none
  double link_gbps = 0;   // as the OS reports the interface speed; 0: unknown
};

struct LocalMachine {
  std::string hostname;
  std::string os;          // "macOS", "Linux"
  std::string os_version;  // "26.2", "6.1.0-18-amd64"
  std::string cpu_brand;   // "Apple M4 Max", "AMD EPYC 9R14 96-Core Processor"
  std::string chip;        // catalog name when known ("M4 Max"), else empty
  int cores = 0;
  int performance_cores = 0;  // the fastest cluster (all cores where the CPU has one kind)
  uint64_t memory_total_bytes = 0;
  uint64_t memory_free_bytes = 0;  // free plus reclaimable (page cache) memory
  std::vector<NetInterface> interfaces;  // IPv4, up, not loopback
};

LocalMachine detect_local_machine();

// IPv4 interfaces that are up and not loopback, from getifaddrs().
std::vector<NetInterface> list_interfaces();

// True when a and b are in one IPv4 subnet of the given prefix length.
bool same_subnet(const std::string& a, const std::string& b, int prefix_length);

namespace detail {
// Fills os, os_version, cpu_brand, cores, performance_cores and memory from the OS; defined by
// the platform's source file.
void detect_platform(LocalMachine& machine);
// The speed the OS reports for an interface (Gb/s), 0 when unknown.
double interface_gbps(const std::string& name);
}  // namespace detail

}  // namespace orchard::cluster
