#pragma once
// TCP ports for the servers and ranks a test starts on this machine. A port the test picks is
// bound later by another process, so it must be one nothing else takes meanwhile: not a fixed
// or pid-derived number in the range the system draws ephemeral ports from (Linux's
// 32768–60999, macOS's 49152–65535), where any process's outgoing connection may land on it,
// and not a port the kernel just handed out from that range either.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>

namespace orchard::testing {

// Ephemeral ports start here: Linux's configured range where it says, else macOS's default.
inline int ephemeral_port_floor() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low ? low : 49152;
}

// Whether a TCP port can be bound on every address now (a listener or a connection in
// TIME_WAIT on it says no).
inline bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return bound;
}

// The first of `count` consecutive TCP ports that are free now, below the ephemeral range and
// below orchard's default rank ports (comm::kDefaultBasePort, 32323, and up). Tests choosing at
// the same time start at different places (from their process id and a count of calls), so two
// of them find the same ports only by wrapping around the whole range.
inline int free_ports(int count = 1) {
  constexpr int kLowest = 20000, kDefaultRankPorts = 32300;
  const int highest = std::min(ephemeral_port_floor(), kDefaultRankPorts) - count;  // the last first port
  if (highest < kLowest) {
    ADD_FAILURE() << "no room for test ports below the ephemeral range (it starts at " << ephemeral_port_floor() << ")";
    return 0;
  }
  static std::atomic<int> calls{0};
  const int span = highest - kLowest + 1;
  const int start = static_cast<int>((static_cast<long>(getpid()) * 97 + calls++ * 16) % span);
  for (int tried = 0; tried < span; ++tried) {
    const int first = kLowest + (start + tried) % span;
    int free = 0;
    while (free < count && port_is_free(first + free)) ++free;
    if (free == count) return first;
  }
  ADD_FAILURE() << "no " << count << " consecutive free TCP ports from " << kLowest << " to " << highest + count - 1;
  return 0;
}

}  // namespace orchard::testing
