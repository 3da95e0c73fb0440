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
#include <string_view>
#include <thread>
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
// headers (a slow-loris), or with Part::kBody send a whole head at once and trickle its body,
// which never finishes either.
class SlowLoris {
 public:
  enum class Part { kHead, kBody };
  SlowLoris(int port, int n, Part part = Part::kHead) : trickled_(part == Part::kHead ? kHead : kBodyByte) {
    for (int i = 0; i < n; ++i) {
      const int fd = connect_loopback(port);
      if (fd >= 0 && part == Part::kBody) {
        [[maybe_unused]] ssize_t sent = ::send(fd, kBodyHead, sizeof kBodyHead - 1, MSG_NOSIGNAL_OR_0);
      }
      fds_.push_back(fd);
    }
    trickle();
  }
  ~SlowLoris() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  // One more byte on every socket the server has not closed.
  void trickle() {
    for (int fd : fds_) {
      const char byte = trickled_[sent_ % trickled_.size()];
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
  static constexpr char kBodyHead[] =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100000\r\n\r\n";
  static constexpr char kBodyByte[] = " ";
  std::string_view trickled_;
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

// A legitimate client on a slow link: sends `head`, waits for the server's go-ahead when the head
// asks for one (Expect: 100-continue), then `body` in `pieces` parts `every` apart, and returns
// all it got back by `timeout_s` (the head should say Connection: close).
inline std::string paced_request(int port, const std::string& head, const std::string& body, int pieces,
                                 std::chrono::milliseconds every, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  std::string got;
  auto receive = [&](int wait_ms) {
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
    return true;
  };
  [[maybe_unused]] ssize_t sent = ::send(fd, head.data(), head.size(), 0);
  if (head.find("Expect: 100-continue") != std::string::npos) receive(2000);
  const size_t piece = (body.size() + pieces - 1) / pieces;
  for (size_t at = 0; at < body.size(); at += piece) {
    if (at > 0) std::this_thread::sleep_for(every);
    sent = ::send(fd, body.data() + at, std::min(piece, body.size() - at), 0);
  }
  for (;;) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (left <= 0 || !receive(static_cast<int>(left * 1000) + 1)) break;
  }
  ::close(fd);
  return got;
}

}  // namespace orchard::testing
