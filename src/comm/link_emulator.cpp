#include "comm/link_emulator.h"

#include <algorithm>
#include <cstdlib>

namespace orchard::comm {

LinkEmulator::LinkEmulator(const LinkEmulation& settings, int world)
    : settings_(settings), busy_until_(static_cast<size_t>(world), Clock::time_point{}) {}

LinkEmulator::Clock::time_point LinkEmulator::release_time(int peer, size_t bytes) {
  const auto now = Clock::now();
  double wire_us = settings_.gbps > 0 ? static_cast<double>(bytes) * 8.0 / (settings_.gbps * 1e3) : 0.0;
  auto& busy = busy_until_[static_cast<size_t>(peer)];
  // Serialization queues behind the previous frame; latency is paid by each frame in flight.
  busy = std::max(busy, now) + std::chrono::nanoseconds(static_cast<int64_t>(wire_us * 1e3));
  return busy + std::chrono::nanoseconds(static_cast<int64_t>(settings_.latency_us * 1e3));
}

LinkEmulation link_emulation_from_env() {
  LinkEmulation e;
  if (const char* v = std::getenv("ORCHARD_LINK_LATENCY_US")) e.latency_us = std::atof(v);
  if (const char* v = std::getenv("ORCHARD_LINK_GBPS")) e.gbps = std::atof(v);
  return e;
}

}  // namespace orchard::comm
