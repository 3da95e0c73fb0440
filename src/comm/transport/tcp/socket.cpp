#include "comm/transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/group.h"

namespace orchard::comm::tcp {
namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left) + 1;
}

void no_sigpipe([[maybe_unused]] int fd) {
#ifdef SO_NOSIGPIPE
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
}

// Waits until fd is ready for `events`; false when the deadline passed.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the following call report the error
    if (n == 0 && Clock::now() >= deadline) return false;
  }
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int send_flags() {
#ifdef MSG_NOSIGNAL
  return MSG_NOSIGNAL;
#else
  return 0;
#endif
}

Endpoint parse_endpoint(const std::string& text) {
  Endpoint e;
  size_t colon;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw Error(error_message("comm", "endpoint '{}' is not [address]:port", text));
    }
    e.host = text.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw Error(error_message("comm", "endpoint '{}' is not host:port", text));
    }
    e.host = text.substr(0, colon);
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value <= 0 || value > 65535) {
    throw Error(error_message("comm", "endpoint '{}' has no valid port", text));
  }
  e.port = static_cast<uint16_t>(value);
  return e;
}

Fd listen_on(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) throw Error(error_message("comm", "cannot resolve '{}': {}", host, gai_strerror(rc)));
  std::string last_error = "no address";
  Fd result;
  for (addrinfo* a = list; a && result.get() < 0; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    if (fd.get() < 0) continue;
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) {
      int zero = 0;  // dual-stack: also accept IPv4 peers on a wildcard address
      setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 128) == 0) {
      result = std::move(fd);
    } else {
      last_error = std::strerror(errno);
    }
  }
  ::freeaddrinfo(list);
  if (result.get() < 0) {
    throw Error(error_message("comm", "cannot listen on {}:{}: {}", host.empty() ? "*" : host, port, last_error));
  }
  return result;
}

uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

Fd connect_to(const Endpoint& endpoint, Clock::time_point deadline, const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const std::string service = std::to_string(endpoint.port);
  std::string last_error;
  for (;;) {
    addrinfo* list = nullptr;
    int rc = ::getaddrinfo(endpoint.host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* a = list; a; a = a->ai_next) {
        Fd fd(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
        if (fd.get() < 0) continue;
        set_nonblocking(fd.get(), true);
        int r = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS && wait_ready(fd.get(), POLLOUT, deadline)) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          r = err == 0 ? 0 : -1;
          errno = err;
        }
        if (r == 0) {
          ::freeaddrinfo(list);
          set_nonblocking(fd.get(), false);
          no_sigpipe(fd.get());
          return fd;
        }
        last_error = std::strerror(errno);
      }
      ::freeaddrinfo(list);
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(error_message("comm", "{} did not accept a connection before the deadline ({})", peer,
                                       last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void read_exact(int fd, void* data, size_t bytes, Clock::time_point deadline, const std::string& peer) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) {
      throw TimeoutError(error_message("comm", "{} did not answer before the deadline", peer));
    }
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n == 0) throw PeerError(error_message("comm", "{} closed the connection", peer));
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw PeerError(error_message("comm", "reading from {}: {}", peer, std::strerror(errno)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void write_exact(int fd, const void* data, size_t bytes, Clock::time_point deadline, const std::string& peer) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLOUT, deadline)) {
      throw TimeoutError(error_message("comm", "{} did not take data before the deadline", peer));
    }
    ssize_t n = ::send(fd, p, bytes, MSG_DONTWAIT | send_flags());
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      throw PeerError(error_message("comm", "writing to {}: {}", peer, std::strerror(errno)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

Fd accept_until(int listen_fd, Clock::time_point deadline, std::string* from) {
  if (!wait_ready(listen_fd, POLLIN, deadline)) return Fd();
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  Fd fd(::accept(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len));
  if (fd.get() < 0) return Fd();
  no_sigpipe(fd.get());
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  }
  if (from) *from = std::string(host) + ":" + std::to_string(port);
  return fd;
}

}  // namespace orchard::comm::tcp
