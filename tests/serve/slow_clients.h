#pragma once
// Clients for the HTTP servers' slow-client tests (serve and the network coordinator): sockets
// that trickle a request a byte at a time, and one real request, timed, from a chosen loopback
// address.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace orchard::testing {

inline int connect_loopback(int port, const char* from = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (from) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &local.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// n connections from 127.0.0.1 that each send a request one byte at a time and never finish its
// headers (a slow-loris).
class SlowLoris {
 public:
  SlowLoris(int port, int n) {
    for (int i = 0; i < n; ++i) fds_.push_back(connect_loopback(port));
    trickle();
  }
  ~SlowLoris() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  // One more byte on every socket the server has not closed.
  void trickle() {
    for (int fd : fds_) {
      const char byte = kHead[sent_ % (sizeof kHead - 1)];
      if (fd >= 0) {
        [[maybe_unused]] ssize_t n = ::send(fd, &byte, 1, MSG_NOSIGNAL_OR_0);
      }
    }
    ++sent_;
  }
  // Sockets the server closed (the connect refused, or an answer and the end of the stream read).
  int closed_by_server() {
    int closed = 0;
    for (int fd : fds_) {
      if (fd < 0) {
        ++closed;
        continue;
      }
      char buf[1024];
      ssize_t n;
      bool ended = false;
      while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ended = true;
      closed += ended;
    }
    return closed;
  }
  int size() const { return static_cast<int>(fds_.size()); }

 private:
#ifdef MSG_NOSIGNAL
  static constexpr int MSG_NOSIGNAL_OR_0 = MSG_NOSIGNAL;
#else
  static constexpr int MSG_NOSIGNAL_OR_0 = 0;
#endif
  static constexpr char kHead[] = "GET /health HTTP/1.1\r\nX-Slow: ";  // the value never ends
  std::vector<int> fds_;
  size_t sent_ = 0;
};

struct Timed {
  int status = 0;  // 0: no answer
  double seconds = 0;
};

// GET path from source address `from`: the status and the seconds until the whole answer came;
// nullopt when `from` cannot be bound (127.0.0.2 on macOS without an alias).
inline std::optional<Timed> timed_get(const char* from, int port, const std::string& path, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = connect_loopback(port, from);
  if (fd < 0) return std::nullopt;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), 0);
  std::string got;
  char buf[4096];
  for (;;) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  Timed t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (got.starts_with("HTTP/1.1 ")) t.status = std::stoi(got.substr(9, 3));
  return t;
}

}  // namespace orchard::testing
