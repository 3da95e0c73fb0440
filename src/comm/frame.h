#pragma once
// The header in front of every message on every byte-stream transport (TCP sockets, shm rings).
// The receiver knows what it expects (op, tag, sequence, length) and checks all of it before
// it reads a payload byte, so a mismatch is an error instead of corrupted numbers.
#include <cstdint>
#include <string>

namespace orchard::comm {

inline constexpr uint32_t kFrameMagic = 0x4f524346;  // "ORCF"

// Fixed numeric op codes: never renumber (they are on the wire).
enum class WireOp : uint8_t {
  AllReduce = 1,
  AllGather = 2,
  ReduceScatter = 3,
  Broadcast = 4,
  Send = 5,
  Barrier = 6,
  AllToAll = 7,
};
const char* wire_op_name(WireOp op);

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t magic;
  uint8_t op;
  uint8_t reserved[3];
  uint32_t tag;       // user tag for Send, 0 otherwise
  uint32_t sequence;  // per link and direction, starting at 0
  uint64_t length;    // payload bytes that follow
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 24);

// What a receiver expects of the next frame from a peer.
struct FrameExpectation {
  WireOp op;
  uint32_t tag;
  uint32_t sequence;
  uint64_t length;
};

FrameHeader make_frame_header(WireOp op, uint32_t tag, uint32_t sequence, uint64_t length);
// Empty when the header matches; otherwise why not (for a FormatError message).
std::string check_frame_header(const FrameHeader& header, const FrameExpectation& expected);

}  // namespace orchard::comm
