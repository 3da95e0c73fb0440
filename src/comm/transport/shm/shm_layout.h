#pragma once
// The shared-memory layout ShmTransport's ranks agree on: one segment per rank (its inbox), one
// byte ring per sender in it. Apart from the transport so that a test can play a peer process
// that writes whatever it likes into a rank's ring (tests/fuzz/fuzz_comm_shm.cpp).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/transport/shm/shm_transport.h"

namespace orchard::comm::shm {

inline constexpr uint32_t kSegmentMagic = 0x4f52534d;  // "ORSM"
inline constexpr uint32_t kSegmentVersion = 1;

// Head and tail on their own cache lines: the sender writes only head, the receiver only tail.
// Frames (header, payload, padding to 8 bytes) follow each other from position 0; a position is
// taken modulo kRingBytes.
struct Ring {
  alignas(128) std::atomic<uint64_t> head;
  alignas(128) std::atomic<uint64_t> tail;
  alignas(128) uint8_t data[kRingBytes];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");

struct Segment {
  uint32_t magic;
  uint32_t version;
  uint64_t job;
  int32_t world;
  int32_t rank;
  int32_t pid;
  std::atomic<uint32_t> ready;     // set last by the owner
  std::atomic<uint32_t> attached;  // peers that have mapped this segment
  std::atomic<uint32_t> failed;    // the owner gave up (its peers fail at once)
  // Followed, at kRingsOffset, by one Ring per sender.

  static constexpr size_t kRingsOffset = 256;  // keeps every Ring 128-byte aligned
  static size_t bytes_for(int world) { return kRingsOffset + sizeof(Ring) * static_cast<size_t>(world); }
  Ring& ring(int sender) {
    return reinterpret_cast<Ring*>(reinterpret_cast<uint8_t*>(this) + kRingsOffset)[sender];
  }
};
static_assert(sizeof(Segment) <= Segment::kRingsOffset);

// The job's id in every segment: FNV-1a of its secret, the same in every process (unlike std::hash).
inline uint64_t job_hash(const std::string& secret) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : secret) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace orchard::comm::shm
