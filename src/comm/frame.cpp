#include "comm/frame.h"

#include <fmt/format.h>

namespace orchard::comm {

const char* wire_op_name(WireOp op) {
  switch (op) {
    case WireOp::AllReduce: return "all_reduce";
    case WireOp::AllGather: return "all_gather";
    case WireOp::ReduceScatter: return "reduce_scatter";
    case WireOp::Broadcast: return "broadcast";
    case WireOp::Send: return "send/recv";
    case WireOp::Barrier: return "barrier";
    case WireOp::AllToAll: return "all_to_all";
  }
  return "unknown op";
}

FrameHeader make_frame_header(WireOp op, uint32_t tag, uint32_t sequence, uint64_t length) {
  return FrameHeader{kFrameMagic, static_cast<uint8_t>(op), {0, 0, 0}, tag, sequence, length};
}

std::string check_frame_header(const FrameHeader& header, const FrameExpectation& expected) {
  // Copies: fields of a packed struct may sit at unaligned addresses, so no references to them.
  const uint32_t magic = header.magic, tag = header.tag, sequence = header.sequence;
  const uint8_t op = header.op;
  const uint64_t length = header.length;
  if (magic != kFrameMagic) return fmt::format("bad frame magic 0x{:08x}", magic);
  if (op != static_cast<uint8_t>(expected.op)) {
    return fmt::format("frame for op {} ({}) while this rank is in {}", op, wire_op_name(static_cast<WireOp>(op)),
                       wire_op_name(expected.op));
  }
  if (sequence != expected.sequence) return fmt::format("frame sequence {} where {} was expected", sequence, expected.sequence);
  if (tag != expected.tag) return fmt::format("frame tag {} where tag {} was expected", tag, expected.tag);
  if (length != expected.length) {
    return fmt::format("frame of {} bytes where {} were expected (sizes differ between ranks?)", length, expected.length);
  }
  return {};
}

}  // namespace orchard::comm
