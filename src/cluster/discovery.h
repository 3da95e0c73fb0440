#pragma once
// Agents find each other on the LAN: each one sends an announcement every second to a
// multicast group and to every interface's broadcast address (networks that drop multicast
// still pass broadcast), and listens for the others on the same UDP port.
//
// Datagram (version 1): Header, the cluster name, the JSON payload, then HMAC-SHA256 under the
// cluster secret over everything before it. A datagram with another cluster's name, a bad MAC,
// another version or inconsistent lengths is dropped, so clusters sharing a LAN ignore each
// other and nobody without the secret can join one.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cluster/local_machine.h"

namespace orchard::cluster {

using Clock = std::chrono::steady_clock;

inline constexpr uint16_t kDiscoveryPort = 52416;     // UDP: announcements
inline constexpr uint16_t kAgentPort = 52417;         // TCP: link probes and queries
inline constexpr const char* kDiscoveryGroup = "239.255.77.77";  // administratively scoped
inline constexpr uint32_t kAnnounceMagic = 0x4f524341;  // "ORCA"
inline constexpr uint16_t kAnnounceVersion = 1;
inline constexpr size_t kMaxDatagram = 60000;  // below UDP's 65507 with room for headers
inline constexpr size_t kMacBytes = 32;

#pragma pack(push, 1)
struct AnnounceHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t cluster_bytes;  // the cluster name follows the header
  uint32_t payload_bytes;  // then the JSON payload, then the MAC
};
static_assert(sizeof(AnnounceHeader) == 12);
#pragma pack(pop)

// One link this agent measured to a peer, per interface pair.
struct LinkMeasurement {
  std::string from_node, from_iface, from_addr;
  std::string to_node, to_iface, to_addr;
  double rtt_us_p50 = 0;  // ping-pong round trip, median
  double gbps = 0;        // one-way bulk transfer
};

struct Announcement {
  std::string node_id;  // random per agent start: the key of a machine
  std::string hostname, os, os_version, cpu_brand, chip;
  int cores = 0, performance_cores = 0;
  uint64_t memory_total_bytes = 0, memory_free_bytes = 0;
  double decode_gbs = 0, compute_gflops = 0;  // measured by the agent's probe; 0 when not run
  std::vector<std::string> models;            // GGUF files it holds (names)
  std::vector<NetInterface> interfaces;
  uint16_t agent_port = kAgentPort;
  std::vector<LinkMeasurement> links;         // what this agent measured to its peers
};

nlohmann::json to_json(const Announcement& a);
// Throws FormatError naming the field.
Announcement announcement_from_json(const nlohmann::json& j);
nlohmann::json to_json(const LinkMeasurement& l);
LinkMeasurement link_from_json(const nlohmann::json& j);

// HMAC-SHA256 of data under key.
std::vector<uint8_t> hmac_sha256(const std::string& key, std::span<const uint8_t> data);

std::vector<uint8_t> encode_announcement(const Announcement& a, const std::string& cluster, const std::string& secret);
// The announcement when the datagram is one of `cluster`'s, else nullopt with the reason in
// *why (for logs and tests).
std::optional<Announcement> decode_announcement(std::span<const uint8_t> datagram, const std::string& cluster,
                                                const std::string& secret, std::string* why = nullptr);

// A UDP socket bound to `port` on every address, member of the discovery group on every
// interface; several processes on one machine may share the port.
class DiscoverySocket {
 public:
  explicit DiscoverySocket(uint16_t port);
  ~DiscoverySocket();
  DiscoverySocket(const DiscoverySocket&) = delete;
  DiscoverySocket& operator=(const DiscoverySocket&) = delete;

  // Sends to the group through each interface and to each interface's broadcast address.
  // Interfaces come from list_interfaces() at each call (cables come and go).
  void send(std::span<const uint8_t> datagram);
  // One datagram, or false when the deadline passes first.
  bool receive(std::vector<uint8_t>& datagram, Clock::time_point deadline);

 private:
  void join_groups();
  int fd_ = -1;
  uint16_t port_;
  std::vector<std::string> joined_;  // interface addresses already members of the group
};

// Listens for `wait` without announcing and returns the machines of `cluster` heard, one per
// node id (the newest announcement), in the order first heard.
std::vector<Announcement> listen_for_peers(const std::string& cluster, const std::string& secret, uint16_t port,
                                           std::chrono::milliseconds wait);

}  // namespace orchard::cluster
