#pragma once
// PointToPoint over TCP: a full mesh of links (the ring algorithms use the neighbours, the
// direct exchanges every pair), each link `sockets_per_link` sockets spread over the peer's
// interfaces; messages of kStripeMinBytes and more are cut into one part per socket so that a
// second cable adds bandwidth. Non-blocking sockets driven by one poll loop on the caller's
// thread; receive-side sums run as bytes arrive, through a fixed scratch buffer per socket.
#include <poll.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/point_to_point.h"
#include "comm/link_emulator.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::comm::tcp {

inline constexpr size_t kStripeMinBytes = 256 * 1024;
inline constexpr size_t kReduceScratchBytes = 256 * 1024;

class TcpTransport final : public PointToPoint {
 public:
  // Listens, dials the lower ranks, accepts the higher ones (refusing and logging anything that
  // fails the handshake) and returns when every link is up. Throws TimeoutError naming the
  // ranks still missing at config.connect_timeout.
  explicit TcpTransport(const Config& config);

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  void transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void abort() noexcept override;
  std::string peer_name(int peer) const override { return links_[static_cast<size_t>(peer)].name; }

 private:
  struct Socket {
    Fd fd;
    uint32_t send_sequence = 0;
    uint32_t recv_sequence = 0;
    std::vector<uint8_t> scratch;  // receive-side sums
  };
  struct Link {
    std::vector<Socket> sockets;
    std::string name;
  };
  // One frame in flight on one socket.
  struct Stream {
    int peer;
    Socket* socket;
    bool is_send;
    FrameHeader header;
    size_t header_done;
    const uint8_t* src;  // send
    uint8_t* dst;        // receive
    size_t bytes;
    size_t done;  // payload bytes sent, received, or received and summed
    // Receive with sum: dst = addend + payload; `fill` bytes wait in the scratch buffer.
    bool reduce;
    const uint8_t* addend;
    DType dtype;
    size_t fill;
    FrameExpectation expected;
    Clock::time_point release;
    bool complete;
  };

  void connect_all(const Config& config);
  void add_streams(WireOp op, uint32_t tag, const SendOp* send, const RecvOp* recv);
  // Moves bytes of one stream without blocking; true when any moved.
  bool advance_send(Stream& s, WireOp op);
  bool advance_recv(Stream& s, WireOp op);
  [[noreturn]] void fail_io(const Stream& s, WireOp op, int err) const;

  int rank_;
  int world_;
  int sockets_per_link_;
  bool busy_poll_;
  std::chrono::milliseconds timeout_;
  LinkEmulator emulator_;
  std::vector<Link> links_;
  std::vector<Stream> streams_;
  std::vector<pollfd> pollfds_;
};

}  // namespace orchard::comm::tcp
