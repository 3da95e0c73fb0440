#include "comm/transport/tcp/tcp_transport.h"

#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/reduce.h"
#include "comm/transport/tcp/handshake.h"

namespace orchard::comm::tcp {
namespace {

// How long the loop retries non-blocking sockets before it sleeps in poll(). A split's ranks
// wait for each other at every layer, tens to a few hundred microseconds when one has more of
// the layer's work; a rank that slept pays its wake-up before its next layer, on the critical
// path, so the spin covers such waits. Yielding instead of spinning measured far worse on a
// loaded host (a yield hands the core to another program for its whole slice, while a task
// woken from poll() preempts it), and a wait longer than this is not a layer's imbalance.
constexpr auto kSpinBeforePoll = std::chrono::microseconds(250);
// A connection has this long to complete the handshake, so a silent foreign client cannot
// hold up the accept loop.
constexpr auto kHandshakeTimeout = std::chrono::seconds(2);
constexpr int kSocketBufferBytes = 4 << 20;
// Most payload bytes one sendmsg takes. A rank that hands the kernel megabytes at once fills
// the peer's receive buffer while its own incoming data waits unread; smaller writes alternate
// sending and receiving so both directions keep flowing (16 MiB all-reduce on loopback: about
// 9.7 ms -> 7.0 ms).
constexpr size_t kMaxBytesPerCall = 512 << 10;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

TcpTransport::TcpTransport(const Config& config)
    : rank_(config.rank),
      world_(config.world),
      sockets_per_link_(std::max(1, config.sockets_per_link)),
      busy_poll_(config.busy_poll),
      timeout_(config.timeout),
      emulator_(config.link, config.world) {
  if (world_ > 1 && config.endpoints.size() != static_cast<size_t>(world_)) {
    throw Error(error_message("comm", "ring backend needs one endpoint per rank: {} endpoints for world {}",
                              config.endpoints.size(), world_));
  }
  links_.resize(static_cast<size_t>(world_));
  for (int p = 0; p < world_; ++p) {
    auto& link = links_[static_cast<size_t>(p)];
    link.name = world_ > 1 && !config.endpoints[static_cast<size_t>(p)].empty()
                    ? fmt::format("rank {} ({})", p, config.endpoints[static_cast<size_t>(p)][0])
                    : fmt::format("rank {}", p);
    if (p == rank_) continue;
    link.sockets.resize(static_cast<size_t>(sockets_per_link_));
    for (auto& s : link.sockets) s.scratch.resize(kReduceScratchBytes);
  }
  streams_.reserve(static_cast<size_t>(2 * world_ * sockets_per_link_));
  pollfds_.reserve(streams_.capacity());
  if (world_ > 1) connect_all(config);
}

void TcpTransport::connect_all(const Config& config) {
  const auto deadline = Clock::now() + config.connect_timeout;
  Fd listener;
  if (config.listen_fd >= 0) {
    listener = Fd(config.listen_fd);
  } else if (rank_ < world_ - 1) {
    listener = listen_on("", parse_endpoint(config.endpoints[static_cast<size_t>(rank_)][0]).port);
  }
  // Dial every lower rank; rank 0 only accepts, so this cannot deadlock.
  for (int p = 0; p < rank_; ++p) {
    auto& link = links_[static_cast<size_t>(p)];
    const auto& addresses = config.endpoints[static_cast<size_t>(p)];
    for (int s = 0; s < sockets_per_link_; ++s) {
      const Endpoint endpoint = parse_endpoint(addresses[static_cast<size_t>(s) % addresses.size()]);
      Fd fd = connect_to(endpoint, deadline, link.name);
      set_nodelay(fd.get());
      dial_handshake(fd.get(), config.secret, rank_, world_, s, sockets_per_link_, deadline, link.name);
      link.sockets[static_cast<size_t>(s)].fd = std::move(fd);
    }
  }
  int missing = (world_ - 1 - rank_) * sockets_per_link_;
  while (missing > 0) {
    if (Clock::now() >= deadline) {
      std::string who;
      for (int p = rank_ + 1; p < world_; ++p) {
        for (auto& s : links_[static_cast<size_t>(p)].sockets) {
          if (s.fd.get() < 0) {
            who += (who.empty() ? "" : ", ") + links_[static_cast<size_t>(p)].name;
            break;
          }
        }
      }
      throw TimeoutError(error_message("comm", "rank {}: {} did not connect within {} s", rank_, who,
                                       config.connect_timeout.count() / 1000.0));
    }
    std::string from;
    Fd fd = accept_until(listener.get(), deadline, &from);
    if (fd.get() < 0) continue;
    try {
      auto info = accept_handshake(fd.get(), config.secret, world_, sockets_per_link_,
                                   std::min(deadline, Clock::now() + kHandshakeTimeout), from);
      if (info.rank <= rank_ ||
          links_[static_cast<size_t>(info.rank)].sockets[static_cast<size_t>(info.socket_index)].fd.get() >= 0) {
        spdlog::warn("[comm] rank {} dropped a connection from {}: rank {} socket {} is not expected", rank_, from,
                     info.rank, info.socket_index);
        continue;
      }
      set_nodelay(fd.get());
      links_[static_cast<size_t>(info.rank)].sockets[static_cast<size_t>(info.socket_index)].fd = std::move(fd);
      --missing;
    } catch (const Error& e) {
      // Not a rank of this job (or too slow to prove it): log and keep waiting for the real ones.
      spdlog::warn("[comm] rank {} {}", rank_, e.what());
    }
  }
  for (auto& link : links_) {
    for (auto& s : link.sockets) {
      set_nonblocking(s.fd.get(), true);
      // Room for a whole ring step of a large message in flight (measured: 16 MiB all-reduce
      // about 1.5x faster on loopback than with the auto-tuned default).
      int bytes = kSocketBufferBytes;
      setsockopt(s.fd.get(), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
      setsockopt(s.fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
    }
  }
}

void TcpTransport::abort() noexcept {
  for (auto& link : links_) {
    for (auto& s : link.sockets) {
      if (s.fd.get() >= 0) ::shutdown(s.fd.get(), SHUT_RDWR);
    }
  }
}

void TcpTransport::add_streams(WireOp op, uint32_t tag, const SendOp* send, const RecvOp* recv) {
  const int peer = send ? send->peer : recv->peer;
  const size_t bytes = send ? send->bytes : recv->bytes;
  auto& link = links_[static_cast<size_t>(peer)];
  // Large messages: one part per socket, cut at 64-byte multiples so no element is split.
  const size_t parts = bytes >= kStripeMinBytes ? static_cast<size_t>(sockets_per_link_) : 1;
  const size_t part_bytes = (bytes / parts + 63) / 64 * 64;
  for (size_t i = 0; i < parts; ++i) {
    const size_t begin = std::min(bytes, i * part_bytes);
    const size_t length = i + 1 == parts ? bytes - begin : std::min(part_bytes, bytes - begin);
    Socket& socket = link.sockets[i];
    Stream s{};
    s.peer = peer;
    s.socket = &socket;
    s.is_send = send != nullptr;
    s.bytes = length;
    if (send) {
      s.header = make_frame_header(op, tag, socket.send_sequence++, length);
      s.src = static_cast<const uint8_t*>(send->data) + begin;
      s.release = emulator_.enabled() ? emulator_.release_time(peer, length) : Clock::time_point{};
    } else {
      s.expected = FrameExpectation{op, tag, socket.recv_sequence++, length};
      s.dst = static_cast<uint8_t*>(recv->data) + begin;
      s.reduce = recv->reduce;
      s.addend = recv->reduce ? static_cast<const uint8_t*>(recv->addend) + begin : nullptr;
      s.dtype = recv->dtype;
    }
    streams_.push_back(s);
  }
}

void TcpTransport::fail_io(const Stream& s, WireOp op, int err) const {
  const auto& name = links_[static_cast<size_t>(s.peer)].name;
  if (err == 0) {
    throw PeerError(error_message("comm", "rank {}: {} closed the connection during {}", rank_, name, wire_op_name(op)));
  }
  throw PeerError(error_message("comm", "rank {}: link to {} failed during {}: {}", rank_, name, wire_op_name(op),
                                std::strerror(err)));
}

bool TcpTransport::advance_send(Stream& s, WireOp op) {
  if (s.release != Clock::time_point{} && Clock::now() < s.release) return false;
  iovec iov[2];
  int n_iov = 0;
  if (s.header_done < sizeof s.header) {
    iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.header) + s.header_done, sizeof s.header - s.header_done};
  }
  if (s.done < s.bytes) iov[n_iov++] = {const_cast<uint8_t*>(s.src + s.done), std::min(s.bytes - s.done, kMaxBytesPerCall)};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n_iov;
  ssize_t n = ::sendmsg(s.socket->fd.get(), &msg, MSG_DONTWAIT | send_flags());
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    fail_io(s, op, errno);
  }
  size_t moved = static_cast<size_t>(n);
  const size_t to_header = std::min(moved, sizeof s.header - s.header_done);
  s.header_done += to_header;
  s.done += moved - to_header;
  s.complete = s.header_done == sizeof s.header && s.done == s.bytes;
  return true;
}

// Header and payload are read with one readv: the payload part never exceeds the expected
// length, so a bad header can at worst fill the caller's buffer (which the throw below makes
// unspecified) and never reads past the frame or the buffer.
bool TcpTransport::advance_recv(Stream& s, WireOp op) {
  const size_t elem = dtype_size(s.dtype);
  std::vector<uint8_t>& scratch = s.socket->scratch;
  iovec iov[2];
  int n_iov = 0;
  if (s.header_done < sizeof s.header) {
    iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.header) + s.header_done, sizeof s.header - s.header_done};
  }
  size_t payload_room;
  if (s.reduce) {
    payload_room = std::min(scratch.size() - s.fill, s.bytes - s.done - s.fill);
    if (payload_room > 0) iov[n_iov++] = {scratch.data() + s.fill, payload_room};
  } else {
    payload_room = s.bytes - s.done;
    if (payload_room > 0) iov[n_iov++] = {s.dst + s.done, payload_room};
  }
  ssize_t n = ::readv(s.socket->fd.get(), iov, n_iov);
  if (n == 0) fail_io(s, op, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    fail_io(s, op, errno);
  }
  size_t moved = static_cast<size_t>(n);
  const bool had_header = s.header_done == sizeof s.header;
  const size_t to_header = std::min(moved, sizeof s.header - s.header_done);
  s.header_done += to_header;
  moved -= to_header;
  if (!had_header && s.header_done == sizeof s.header) {
    std::string why = check_frame_header(s.header, s.expected);
    if (!why.empty()) {
      throw FormatError(error_message("comm", "rank {}: malformed frame from {} during {}: {}", rank_,
                                      links_[static_cast<size_t>(s.peer)].name, wire_op_name(op), why));
    }
  }
  if (s.reduce) {
    s.fill += moved;
    const size_t ready = s.fill / elem * elem;
    if (ready > 0) {
      sum_into(s.dst + s.done, s.addend + s.done, scratch.data(), ready / elem, s.dtype);
      s.done += ready;
      s.fill -= ready;
      if (s.fill > 0) std::memmove(scratch.data(), scratch.data() + ready, s.fill);
    }
  } else {
    s.done += moved;
  }
  s.complete = s.header_done == sizeof s.header && s.done == s.bytes;
  return true;
}

void TcpTransport::transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) {
  streams_.clear();
  for (const auto& s : sends) add_streams(op, tag, &s, nullptr);
  for (const auto& r : recvs) add_streams(op, tag, nullptr, &r);
  size_t remaining = streams_.size();
  auto last_progress = Clock::now();
  auto spin_from = last_progress;
  while (remaining > 0) {
    bool progressed = false;
    for (auto& s : streams_) {
      if (s.complete) continue;
      if (s.is_send ? advance_send(s, op) : advance_recv(s, op)) {
        progressed = true;
        if (s.complete) --remaining;
      }
    }
    if (remaining == 0) break;
    const auto now = Clock::now();
    if (progressed) {
      last_progress = spin_from = now;
      continue;
    }
    if (now - last_progress >= timeout_) {
      for (const auto& s : streams_) {
        if (s.complete) continue;
        throw TimeoutError(error_message("comm", "rank {}: {} did not answer within {} s during {}", rank_,
                                         links_[static_cast<size_t>(s.peer)].name, timeout_.count() / 1000.0,
                                         wire_op_name(op)));
      }
    }
    if (busy_poll_ || now - spin_from < kSpinBeforePoll) {
      cpu_relax();
      continue;
    }
    // Sleep until a socket is ready, the next emulated frame may leave, or the deadline.
    auto wake = last_progress + timeout_;
    pollfds_.clear();
    for (const auto& s : streams_) {
      if (s.complete) continue;
      if (s.is_send && s.release != Clock::time_point{} && s.release > now) {
        wake = std::min(wake, s.release);
        continue;
      }
      pollfds_.push_back({s.socket->fd.get(), static_cast<short>(s.is_send ? POLLOUT : POLLIN), 0});
    }
    const auto wait_us = std::chrono::duration_cast<std::chrono::microseconds>(wake - now).count();
    // poll() counts milliseconds: an emulated release sooner than that is waited for by spinning.
    if (pollfds_.empty() || wait_us < 2000) {
      if (wake < last_progress + timeout_) continue;
    }
    ::poll(pollfds_.data(), pollfds_.size(), static_cast<int>(std::max<int64_t>(0, (wait_us + 999) / 1000)));
  }
}

}  // namespace orchard::comm::tcp
