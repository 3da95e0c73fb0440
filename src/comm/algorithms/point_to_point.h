#pragma once
// What the collective algorithms need from a transport: concurrent sends and receives between
// ranks, each framed and checked. Algorithms see only this interface, never a transport.
#include <cstddef>
#include <span>
#include <string>

#include "comm/frame.h"
#include "comm/group.h"

namespace orchard::comm {

struct SendOp {
  int peer;
  const void* data;
  size_t bytes;
};

// Receives `bytes` from peer into data. With reduce set, data[i] = addend[i] + received[i]
// (addend may equal data), computed as the bytes arrive so that the sum overlaps the transfer.
struct RecvOp {
  int peer;
  void* data;
  size_t bytes;
  bool reduce = false;
  const void* addend = nullptr;
  DType dtype = DType::F32;
};

class PointToPoint {
 public:
  virtual ~PointToPoint() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Runs every send and receive concurrently and returns when all are done. Each op is one
  // frame (or one per socket of a striped link) carrying `op` and `tag`. Throws PeerError,
  // TimeoutError (no progress for the configured timeout) or FormatError, naming the peer.
  virtual void transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) = 0;
  // Closes every link after a failure so that the peers' calls fail at once instead of timing
  // out. Idempotent.
  virtual void abort() noexcept = 0;
  // "rank 1 (127.0.0.1:5001)": how errors name a peer.
  virtual std::string peer_name(int peer) const = 0;
};

}  // namespace orchard::comm
