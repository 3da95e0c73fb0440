#include "cluster/link_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "comm/transport/tcp/socket.h"
#include "core/error.h"

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;

std::string peer_name(const std::string& addr, uint16_t port) { return "agent " + addr + ":" + std::to_string(port); }

std::vector<uint8_t> hello_mac(const std::string& cluster, const std::string& secret, const ProbeHello& h) {
  std::vector<uint8_t> data(cluster.begin(), cluster.end());
  const auto* fields = reinterpret_cast<const uint8_t*>(&h);
  data.insert(data.end(), fields, fields + offsetof(ProbeHello, mac));
  return hmac_sha256(secret, data);
}

// Dials addr:port from local address `from` (so the packets leave through that interface),
// within the deadline.
tcp::Fd dial_from(const std::string& from, const std::string& addr, uint16_t port, tcp::Clock::time_point deadline) {
  const std::string peer = peer_name(addr, port);
  tcp::Fd fd(socket(AF_INET, SOCK_STREAM, 0));
  if (fd.get() < 0) throw Error(error_message("cluster", "socket for {}: {}", peer, std::strerror(errno)));
  sockaddr_in local{}, remote{};
  local.sin_family = remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &remote.sin_addr) != 1)
    throw Error(error_message("cluster", "'{}' is not an IPv4 address", addr));
  if (!from.empty()) {
    if (inet_pton(AF_INET, from.c_str(), &local.sin_addr) != 1 ||
        bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
      throw Error(error_message("cluster", "cannot bind {} to reach {}: {}", from, peer, std::strerror(errno)));
  }
  tcp::set_nonblocking(fd.get(), true);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0 && errno != EINPROGRESS)
    throw Error(error_message("cluster", "connect to {} from {}: {}", peer, from.empty() ? "any" : from, std::strerror(errno)));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - tcp::Clock::now()).count();
    if (left <= 0) throw TimeoutError(error_message("cluster", "{} did not accept a connection in time", peer));
    pollfd p{fd.get(), POLLOUT, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    int error = 0;
    socklen_t len = sizeof error;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) throw Error(error_message("cluster", "connect to {}: {}", peer, std::strerror(error)));
    break;
  }
  tcp::set_nodelay(fd.get());
  return fd;
}

}  // namespace

tcp::Fd open_agent_request(const std::string& from, const std::string& addr, uint16_t port, const std::string& cluster,
                           const std::string& secret, uint16_t op, uint64_t arg, tcp::Clock::time_point deadline) {
  const std::string peer = peer_name(addr, port);
  tcp::Fd fd = dial_from(from, addr, port, deadline);
  ProbeHello h{};
  h.magic = kProbeMagic;
  h.version = kProbeVersion;
  h.op = op;
  h.arg = arg;
  RAND_bytes(h.nonce, sizeof h.nonce);
  const std::vector<uint8_t> mac = hello_mac(cluster, secret, h);
  std::memcpy(h.mac, mac.data(), sizeof h.mac);
  tcp::write_exact(fd.get(), &h, sizeof h, deadline, peer);
  ProbeVerdict v{};
  tcp::read_exact(fd.get(), &v, sizeof v, deadline, peer);
  if (v.magic != kProbeMagic || v.accepted != 1)
    throw Error(error_message("cluster", "{} refused the request: it belongs to another cluster or has another secret "
                                         "(check --cluster/--secret, or ORCHARD_CLUSTER/ORCHARD_CLUSTER_SECRET)", peer));
  return fd;
}

LinkFigures probe_link(const std::string& from_addr, const std::string& peer_addr, uint16_t port,
                       const std::string& cluster, const std::string& secret, const ProbeOptions& options) {
  const std::string peer = peer_name(peer_addr, port);
  const auto deadline = tcp::Clock::now() + options.timeout;
  LinkFigures figures;
  {
    tcp::Fd fd = open_agent_request(from_addr, peer_addr, port, cluster, secret, kOpPing, static_cast<uint64_t>(options.pings), deadline);
    std::vector<double> rtts;
    for (int i = 0; i < options.pings; ++i) {
      uint64_t token = static_cast<uint64_t>(i), echo = 0;
      const auto start = tcp::Clock::now();
      tcp::write_exact(fd.get(), &token, sizeof token, deadline, peer);
      tcp::read_exact(fd.get(), &echo, sizeof echo, deadline, peer);
      rtts.push_back(std::chrono::duration<double, std::micro>(tcp::Clock::now() - start).count());
      if (echo != token) throw FormatError(error_message("cluster", "{} echoed {} for ping {}", peer, echo, token));
    }
    std::nth_element(rtts.begin(), rtts.begin() + static_cast<std::ptrdiff_t>(rtts.size() / 2), rtts.end());
    figures.rtt_us_p50 = rtts[rtts.size() / 2];
  }
  if (options.bulk_bytes > 0) {
    tcp::Fd fd = open_agent_request(from_addr, peer_addr, port, cluster, secret, kOpBulk, options.bulk_bytes, deadline);
    std::vector<uint8_t> buffer(1 << 20, 0x5a);
    const auto start = tcp::Clock::now();
    for (uint64_t sent = 0; sent < options.bulk_bytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), options.bulk_bytes - sent));
      tcp::write_exact(fd.get(), buffer.data(), n, deadline, peer);
      sent += n;
    }
    uint64_t received = 0;
    tcp::read_exact(fd.get(), &received, sizeof received, deadline, peer);
    if (received != options.bulk_bytes)
      throw FormatError(error_message("cluster", "{} received {} of {} bytes", peer, received, options.bulk_bytes));
    // The acknowledgement's trip back is latency, not bandwidth.
    const double seconds =
        std::max(1e-9, std::chrono::duration<double>(tcp::Clock::now() - start).count() - figures.rtt_us_p50 * 0.5e-6);
    figures.gbps = static_cast<double>(options.bulk_bytes) * 8 / seconds / 1e9;
  }
  return figures;
}

std::string query_topology(const std::string& addr, uint16_t port, const std::string& cluster, const std::string& secret,
                           std::chrono::milliseconds timeout) {
  const std::string peer = peer_name(addr, port);
  const auto deadline = tcp::Clock::now() + timeout;
  tcp::Fd fd = open_agent_request("", addr, port, cluster, secret, kOpTopology, 0, deadline);
  uint32_t length = 0;
  tcp::read_exact(fd.get(), &length, sizeof length, deadline, peer);
  if (length > kMaxTopologyBytes)
    throw FormatError(error_message("cluster", "{} announced a topology of {} bytes (limit {})", peer, length, kMaxTopologyBytes));
  std::string text(length, '\0');
  tcp::read_exact(fd.get(), text.data(), length, deadline, peer);
  return text;
}

uint16_t serve_probe_connection(int fd, const std::string& from, const std::string& cluster, const std::string& secret,
                            const std::function<std::string()>& topology, std::chrono::milliseconds timeout) {
  const std::string peer = "probe client " + from;
  const auto deadline = tcp::Clock::now() + timeout;
  tcp::set_nodelay(fd);
  ProbeHello h{};
  tcp::read_exact(fd, &h, sizeof h, deadline, peer);
  const std::vector<uint8_t> mac = hello_mac(cluster, secret, h);
  const bool valid_size = (h.op == kOpPing && h.arg <= kMaxPings) || (h.op == kOpBulk && h.arg <= kMaxBulkBytes) ||
                          ((h.op == kOpTopology || h.op == kOpStart) && h.arg == 0);
  const bool ok = h.magic == kProbeMagic && h.version == kProbeVersion && valid_size &&
                  CRYPTO_memcmp(mac.data(), h.mac, sizeof h.mac) == 0;
  const ProbeVerdict verdict{kProbeMagic, ok ? 1u : 0u};
  tcp::write_exact(fd, &verdict, sizeof verdict, deadline, peer);
  if (!ok) throw FormatError(error_message("cluster", "refused {}: wrong version, op, size, cluster or secret", peer));
  if (h.op == kOpPing) {
    for (uint64_t i = 0; i < h.arg; ++i) {
      uint64_t token = 0;
      tcp::read_exact(fd, &token, sizeof token, deadline, peer);
      tcp::write_exact(fd, &token, sizeof token, deadline, peer);
    }
  } else if (h.op == kOpBulk) {
    std::vector<uint8_t> buffer(1 << 20);
    uint64_t received = 0;
    while (received < h.arg) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), h.arg - received));
      tcp::read_exact(fd, buffer.data(), n, deadline, peer);
      received += n;
    }
    tcp::write_exact(fd, &received, sizeof received, deadline, peer);
  } else if (h.op == kOpTopology) {
    const std::string text = topology();
    const uint32_t length = static_cast<uint32_t>(text.size());
    tcp::write_exact(fd, &length, sizeof length, deadline, peer);
    tcp::write_exact(fd, text.data(), text.size(), deadline, peer);
  }
  return h.op;
}

}  // namespace orchard::cluster
