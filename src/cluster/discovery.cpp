#include "cluster/discovery.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace orchard::cluster {
namespace {

using nlohmann::json;

template <typename T>
T get(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) throw FormatError(error_message("cluster", "announcement without '{}'", key));
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    throw FormatError(error_message("cluster", "announcement field '{}': {}", key, e.what()));
  }
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw Error(error_message("cluster", "{}: {}", what, std::strerror(errno)));
}

sockaddr_in ipv4(const std::string& address, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  return a;
}

}  // namespace

json to_json(const LinkMeasurement& l) {
  return {{"from_node", l.from_node}, {"from_iface", l.from_iface}, {"from_addr", l.from_addr},
          {"to_node", l.to_node},     {"to_iface", l.to_iface},     {"to_addr", l.to_addr},
          {"rtt_us_p50", l.rtt_us_p50}, {"gbps", l.gbps}};
}

LinkMeasurement link_from_json(const json& j) {
  return {get<std::string>(j, "from_node"), get<std::string>(j, "from_iface"), get<std::string>(j, "from_addr"),
          get<std::string>(j, "to_node"),   get<std::string>(j, "to_iface"),   get<std::string>(j, "to_addr"),
          get<double>(j, "rtt_us_p50"),     get<double>(j, "gbps")};
}

json to_json(const Announcement& a) {
  json interfaces = json::array(), links = json::array();
  for (const NetInterface& n : a.interfaces)
    interfaces.push_back({{"name", n.name}, {"address", n.address}, {"prefix_length", n.prefix_length},
                          {"broadcast", n.broadcast}, {"link_gbps", n.link_gbps}});
  for (const LinkMeasurement& l : a.links) links.push_back(to_json(l));
  return {{"node_id", a.node_id},
          {"hostname", a.hostname},
          {"os", a.os},
          {"os_version", a.os_version},
          {"cpu_brand", a.cpu_brand},
          {"chip", a.chip},
          {"cores", a.cores},
          {"performance_cores", a.performance_cores},
          {"memory_total_bytes", a.memory_total_bytes},
          {"memory_free_bytes", a.memory_free_bytes},
          {"decode_gbs", a.decode_gbs},
          {"compute_gflops", a.compute_gflops},
          {"models", a.models},
          {"interfaces", std::move(interfaces)},
          {"agent_port", a.agent_port},
          {"links", std::move(links)}};
}

Announcement announcement_from_json(const json& j) {
  Announcement a;
  a.node_id = get<std::string>(j, "node_id");
  a.hostname = get<std::string>(j, "hostname");
  a.os = get<std::string>(j, "os");
  a.os_version = get<std::string>(j, "os_version");
  a.cpu_brand = get<std::string>(j, "cpu_brand");
  a.chip = get<std::string>(j, "chip");
  a.cores = get<int>(j, "cores");
  a.performance_cores = get<int>(j, "performance_cores");
  a.memory_total_bytes = get<uint64_t>(j, "memory_total_bytes");
  a.memory_free_bytes = get<uint64_t>(j, "memory_free_bytes");
  a.decode_gbs = get<double>(j, "decode_gbs");
  a.compute_gflops = get<double>(j, "compute_gflops");
  a.models = get<std::vector<std::string>>(j, "models");
  for (const json& n : get<json>(j, "interfaces"))
    a.interfaces.push_back({get<std::string>(n, "name"), get<std::string>(n, "address"), get<int>(n, "prefix_length"),
                            get<std::string>(n, "broadcast"), get<double>(n, "link_gbps")});
  a.agent_port = get<uint16_t>(j, "agent_port");
  for (const json& l : get<json>(j, "links")) a.links.push_back(link_from_json(l));
  return a;
}

std::vector<uint8_t> hmac_sha256(const std::string& key, std::span<const uint8_t> data) {
  std::vector<uint8_t> mac(kMacBytes);
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), mac.data(), &len);
  return mac;
}

std::vector<uint8_t> encode_announcement(const Announcement& a, const std::string& cluster, const std::string& secret) {
  const std::string payload = to_json(a).dump();
  const size_t total = sizeof(AnnounceHeader) + cluster.size() + payload.size() + kMacBytes;
  if (cluster.size() > 0xffff || total > kMaxDatagram)
    throw Error(error_message("cluster", "announcement of {} bytes exceeds the {}-byte datagram limit", total, kMaxDatagram));
  AnnounceHeader h{kAnnounceMagic, kAnnounceVersion, static_cast<uint16_t>(cluster.size()), static_cast<uint32_t>(payload.size())};
  std::vector<uint8_t> out(total);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, cluster.data(), cluster.size());
  std::memcpy(out.data() + sizeof h + cluster.size(), payload.data(), payload.size());
  const size_t signed_bytes = total - kMacBytes;
  const std::vector<uint8_t> mac = hmac_sha256(secret, std::span<const uint8_t>(out).first(signed_bytes));
  std::memcpy(out.data() + signed_bytes, mac.data(), kMacBytes);
  return out;
}

std::optional<Announcement> decode_announcement(std::span<const uint8_t> d, const std::string& cluster,
                                                const std::string& secret, std::string* why) {
  auto reject = [&](std::string reason) -> std::optional<Announcement> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  AnnounceHeader h{};
  if (d.size() < sizeof h) return reject("shorter than a header");
  std::memcpy(&h, d.data(), sizeof h);
  if (h.magic != kAnnounceMagic) return reject("not an Orchard announcement");
  if (h.version != kAnnounceVersion) return reject("announcement version " + std::to_string(h.version));
  const size_t expected = sizeof h + h.cluster_bytes + size_t{h.payload_bytes} + kMacBytes;
  if (d.size() != expected)
    return reject("length " + std::to_string(d.size()) + " where the header says " + std::to_string(expected));
  const std::string name(reinterpret_cast<const char*>(d.data() + sizeof h), h.cluster_bytes);
  if (name != cluster) return reject("from cluster '" + name + "'");
  const size_t signed_bytes = d.size() - kMacBytes;
  const std::vector<uint8_t> mac = hmac_sha256(secret, d.first(signed_bytes));
  if (CRYPTO_memcmp(mac.data(), d.data() + signed_bytes, kMacBytes) != 0) return reject("bad MAC (another secret)");
  try {
    const auto* payload = reinterpret_cast<const char*>(d.data() + sizeof h + h.cluster_bytes);
    return announcement_from_json(json::parse(payload, payload + h.payload_bytes));
  } catch (const std::exception& e) {
    return reject(std::string("payload: ") + e.what());
  }
}

DiscoverySocket::DiscoverySocket(uint16_t port) : port_(port) {
  fd_ = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd_ < 0) throw_errno("UDP socket");
  const int on = 1;
  // Several listeners on one machine (an agent and `orchard cluster`) share the port.
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  setsockopt(fd_, SOL_SOCKET, SO_BROADCAST, &on, sizeof on);
  sockaddr_in any = ipv4("0.0.0.0", port);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
    const int saved = errno;
    close(fd_);
    errno = saved;
    throw_errno("bind UDP port " + std::to_string(port));
  }
  join_groups();
}

DiscoverySocket::~DiscoverySocket() {
  if (fd_ >= 0) close(fd_);
}

void DiscoverySocket::join_groups() {
  for (const NetInterface& n : list_interfaces()) {
    if (std::find(joined_.begin(), joined_.end(), n.address) != joined_.end()) continue;
    ip_mreq m{};
    inet_pton(AF_INET, kDiscoveryGroup, &m.imr_multiaddr);
    inet_pton(AF_INET, n.address.c_str(), &m.imr_interface);
    // An interface without multicast refuses: broadcast still reaches it.
    if (setsockopt(fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) == 0) joined_.push_back(n.address);
  }
}

void DiscoverySocket::send(std::span<const uint8_t> datagram) {
  join_groups();
  const sockaddr_in group = ipv4(kDiscoveryGroup, port_);
  for (const NetInterface& n : list_interfaces()) {
    in_addr via{};
    inet_pton(AF_INET, n.address.c_str(), &via);
    // Failures are expected on interfaces without multicast or broadcast; the next one may
    // carry it, and the next announcement retries.
    if (setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &via, sizeof via) == 0)
      sendto(fd_, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&group), sizeof group);
    if (!n.broadcast.empty()) {
      const sockaddr_in b = ipv4(n.broadcast, port_);
      sendto(fd_, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&b), sizeof b);
    }
  }
}

bool DiscoverySocket::receive(std::vector<uint8_t>& datagram, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno != EINTR) throw_errno("poll on the discovery socket");
    if (ready <= 0) continue;
    datagram.resize(65536);
    const ssize_t n = recv(fd_, datagram.data(), datagram.size(), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw_errno("recv on the discovery socket");
    }
    datagram.resize(static_cast<size_t>(n));
    return true;
  }
}

std::vector<Announcement> listen_for_peers(const std::string& cluster, const std::string& secret, uint16_t port,
                                           std::chrono::milliseconds wait) {
  DiscoverySocket socket(port);
  std::vector<Announcement> heard;
  const auto end = Clock::now() + wait;
  std::vector<uint8_t> datagram;
  while (socket.receive(datagram, end)) {
    std::optional<Announcement> a = decode_announcement(datagram, cluster, secret);
    if (!a) continue;
    auto it = std::find_if(heard.begin(), heard.end(), [&](const Announcement& h) { return h.node_id == a->node_id; });
    if (it == heard.end()) heard.push_back(std::move(*a));
    else *it = std::move(*a);  // the newest one carries the newest links
  }
  return heard;
}

}  // namespace orchard::cluster
