#pragma once
// Measures a link between two agents over TCP: a ping-pong of small messages (round-trip
// median) and a bulk transfer (bandwidth), from one local address to one peer address, so each
// interface pair — each cable — is measured on its own.
//
// Protocol (version 1), on the agent's TCP port: the client sends ProbeHello, whose MAC proves
// it knows the cluster secret; the agent answers a ProbeVerdict; then
//   kOpPing:     `arg` times: 8 bytes there, the same 8 bytes back;
//   kOpBulk:     `arg` bytes there, then 8 bytes back (the count received);
//   kOpTopology: a 4-byte length and the agent's topology JSON back;
//   kOpStart:    a rank to start (cluster/rank_service.h: a challenge and a signed request).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "cluster/discovery.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::cluster {

inline constexpr uint32_t kProbeMagic = 0x4f524350;  // "ORCP"
inline constexpr uint16_t kProbeVersion = 1;
inline constexpr uint16_t kOpPing = 1;
inline constexpr uint16_t kOpBulk = 2;
inline constexpr uint16_t kOpTopology = 3;
inline constexpr uint16_t kOpStart = 4;
inline constexpr uint64_t kMaxBulkBytes = uint64_t{1} << 30;
inline constexpr uint32_t kMaxPings = 10000;
inline constexpr uint32_t kMaxTopologyBytes = 16u << 20;

#pragma pack(push, 1)
struct ProbeHello {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint64_t arg;
  uint8_t nonce[16];
  uint8_t mac[32];  // HMAC-SHA256(secret, the cluster name || every field above)
};
static_assert(sizeof(ProbeHello) == 64);
struct ProbeVerdict {
  uint32_t magic;
  uint32_t accepted;  // 1 accepted, 0 refused (wrong cluster or secret, unknown op, bad size)
};
static_assert(sizeof(ProbeVerdict) == 8);
#pragma pack(pop)

struct ProbeOptions {
  int pings = 50;
  uint64_t bulk_bytes = 32u << 20;
  std::chrono::milliseconds timeout{5000};  // for the whole probe of one pair
};

struct LinkFigures {
  double rtt_us_p50 = 0;
  double gbps = 0;
};

// Probes from local address `from_addr` (empty: any) to peer_addr:port. Throws Error /
// TimeoutError naming the peer.
LinkFigures probe_link(const std::string& from_addr, const std::string& peer_addr, uint16_t port,
                       const std::string& cluster, const std::string& secret, const ProbeOptions& options);

// Asks the agent at addr:port for its topology JSON text.
std::string query_topology(const std::string& addr, uint16_t port, const std::string& cluster, const std::string& secret,
                           std::chrono::milliseconds timeout);

// Dials the agent at addr:port from local address `from` (empty: any), sends a hello for `op`
// and returns the connection once the agent accepted it. Throws Error / TimeoutError naming the
// agent (a refusal: another cluster or secret).
comm::tcp::Fd open_agent_request(const std::string& from, const std::string& addr, uint16_t port,
                                 const std::string& cluster, const std::string& secret, uint16_t op, uint64_t arg,
                                 comm::tcp::Clock::time_point deadline);

// Serves one accepted connection (the agent calls it per connection) and returns the op it
// accepted: kOpStart is left to the caller (the rest of that exchange is rank_service's).
// topology() gives the JSON text for kOpTopology. Throws on protocol errors; the caller logs
// and closes.
uint16_t serve_probe_connection(int fd, const std::string& from, const std::string& cluster, const std::string& secret,
                            const std::function<std::string()>& topology, std::chrono::milliseconds timeout);

}  // namespace orchard::cluster
