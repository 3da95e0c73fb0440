#pragma once
// Thin POSIX socket helpers (IPv4 and IPv6) used by the TCP transport, its handshake and the
// bare ping-pong baseline of bench-comm. Every blocking helper takes a deadline and a name for
// the other side so that a timeout says who did not answer.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace orchard::comm::tcp {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct Endpoint {
  std::string host;  // without brackets
  uint16_t port = 0;
};
// "host:port" or "[v6addr]:port"; throws Error on anything else.
Endpoint parse_endpoint(const std::string& text);

// A listening socket on `port` on every local address (IPv6 dual-stack where the system has it,
// else IPv4); port 0 picks a free port.
Fd listen_on(const std::string& host, uint16_t port);
uint16_t local_port(int fd);

// Dials endpoint until it answers or the deadline passes (peers start at different times).
Fd connect_to(const Endpoint& endpoint, Clock::time_point deadline, const std::string& peer);

void set_nodelay(int fd);
void set_nonblocking(int fd, bool on);
// Exactly `bytes`, or throws PeerError (closed) / TimeoutError (deadline), naming `peer`.
void read_exact(int fd, void* data, size_t bytes, Clock::time_point deadline, const std::string& peer);
void write_exact(int fd, const void* data, size_t bytes, Clock::time_point deadline, const std::string& peer);
// Accepts one connection; an invalid Fd when the deadline passed. `from` gets the peer address.
Fd accept_until(int listen_fd, Clock::time_point deadline, std::string* from);

// Flags for send(): no SIGPIPE on a peer that went away, where the system has MSG_NOSIGNAL
// (elsewhere sockets get SO_NOSIGPIPE at creation).
int send_flags();

}  // namespace orchard::comm::tcp
