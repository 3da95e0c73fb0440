#pragma once
// PointToPoint through POSIX shared memory for ranks on one host. Each rank owns one segment
// (its inbox) holding a single-producer single-consumer byte ring per sender; frames carry the
// same checked header as on TCP. Waits spin first (the microsecond path), then yield, then
// sleep in short naps: portable to macOS, where there is no futex. A peer that dies is noticed
// through its pid (kill(pid, 0)) and a peer that fails raises a flag in its segment, so waiting
// ranks fail at once; one that stops answering hits the inactivity timeout.
//
// Segments are named after the job (a hash of the job secret) and the rank, at most 31
// characters for macOS; a stale one from a crashed run is removed at start, and each segment is
// unlinked as soon as every peer has mapped it, so nothing is left behind even after a kill -9.
#include <chrono>
#include <string>
#include <vector>

#include "comm/algorithms/point_to_point.h"
#include "comm/link_emulator.h"

namespace orchard::comm::shm {

inline constexpr size_t kRingBytes = 1 << 20;

struct Segment;  // the shared layout (shm_layout.h)

class ShmTransport final : public PointToPoint {
 public:
  explicit ShmTransport(const Config& config);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  void transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) override;
  void abort() noexcept override;
  std::string peer_name(int peer) const override;

  // The segment name of `rank` in the job with `secret` (exposed for tests).
  static std::string segment_name(const std::string& secret, int rank);

 private:
  struct Stream {
    int peer;
    bool is_send;
    bool header_done;
    FrameHeader header;
    const uint8_t* src;
    uint8_t* dst;
    size_t bytes;
    size_t done;
    bool reduce;
    const uint8_t* addend;
    DType dtype;
    FrameExpectation expected;
    std::chrono::steady_clock::time_point release;
    bool complete;
  };
  bool advance_send(Stream& s);
  bool advance_recv(Stream& s, WireOp op);
  // Throws when a peer failed or died; returns how many of the dead peers' streams it finished.
  size_t check_peers(WireOp op);

  int rank_;
  int world_;
  bool busy_poll_;
  std::chrono::milliseconds timeout_;
  LinkEmulator emulator_;
  std::string own_name_;
  size_t segment_bytes_ = 0;
  std::vector<Segment*> segments_;  // mapped inbox of every rank (own included)
  std::vector<int> pids_;
  std::vector<uint32_t> send_sequence_;
  std::vector<uint32_t> recv_sequence_;
  std::vector<Stream> streams_;
};

}  // namespace orchard::comm::shm
