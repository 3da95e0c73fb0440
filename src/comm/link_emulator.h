#pragma once
// Emulates a slower link on one machine (tests, benchmarks): each frame leaves the sender no
// earlier than `latency + bytes / bandwidth` after the link to that peer last became free, so a
// stream of frames is capped at the bandwidth and every message pays the latency once.
// Transports ask release_time() before they start a frame and hold it until then.
#include <chrono>
#include <cstddef>
#include <vector>

#include "comm/group.h"

namespace orchard::comm {

class LinkEmulator {
 public:
  using Clock = std::chrono::steady_clock;
  LinkEmulator(const LinkEmulation& settings, int world);
  bool enabled() const { return settings_.enabled(); }
  // When a frame of `bytes` to `peer` queued now may start; updates the link's busy time.
  Clock::time_point release_time(int peer, size_t bytes);

 private:
  LinkEmulation settings_;
  std::vector<Clock::time_point> busy_until_;
};

// Settings from ORCHARD_LINK_LATENCY_US and ORCHARD_LINK_GBPS (unset: zero).
LinkEmulation link_emulation_from_env();

}  // namespace orchard::comm
