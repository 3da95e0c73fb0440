#include "cluster/local_machine.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <bit>
#include <memory>

#include "cluster/hardware_catalog.h"

namespace orchard::cluster {
namespace {

std::string dotted(const sockaddr* sa) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof text);
  return text;
}

uint32_t host_order(const std::string& dotted_address) {
  in_addr a{};
  if (inet_pton(AF_INET, dotted_address.c_str(), &a) != 1) return 0;
  return ntohl(a.s_addr);
}

}  // namespace

std::vector<NetInterface> list_interfaces() {
  ifaddrs* list = nullptr;
  std::vector<NetInterface> out;
  if (getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    NetInterface n;
    n.name = i->ifa_name;
    n.address = dotted(i->ifa_addr);
    if (i->ifa_netmask) n.prefix_length = std::popcount(host_order(dotted(i->ifa_netmask)));
    if ((i->ifa_flags & IFF_BROADCAST) && i->ifa_broadaddr) n.broadcast = dotted(i->ifa_broadaddr);
    n.link_gbps = detail::interface_gbps(n.name);
    out.push_back(std::move(n));
  }
  return out;
}

bool same_subnet(const std::string& a, const std::string& b, int prefix_length) {
  if (prefix_length <= 0 || prefix_length > 32) return false;
  const uint32_t mask = prefix_length == 32 ? ~0u : ~((1u << (32 - prefix_length)) - 1);
  return (host_order(a) & mask) == (host_order(b) & mask);
}

LocalMachine detect_local_machine() {
  LocalMachine m;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) m.hostname = name;
  detail::detect_platform(m);
  if (const ChipSpec* chip = HardwareCatalog::builtin().match_brand(m.cpu_brand)) m.chip = chip->name;
  m.interfaces = list_interfaces();
  return m;
}

}  // namespace orchard::cluster
