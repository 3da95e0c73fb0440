#pragma once
// Whether the owner is away, so the machine may be lent. What can be seen without special
// permissions: the load average (getloadavg, Linux and macOS); input idle time from macOS's
// IOHIDSystem HIDIdleTime (via ioreg) or, on Linux, the last access time of /dev/input/event*
// (readable as root or in the "input" group; an X or Wayland session's own idle counter is not
// read); and an activity file whose modification time counts as input (scripts, tests, or a
// shell hook can touch it). When no input source is readable, only the load decides.
#include <cstdint>
#include <optional>
#include <string>

namespace orchard::network {

struct IdleOptions {
  bool dedicated = false;           // always offered
  int64_t idle_after_ms = 300000;   // input idle this long before lending
  double max_load_per_core = 0.5;   // 1-minute load average per core above this: owner is busy
  std::string activity_file;        // optional
};

// Seconds since the last input any readable source reports; nullopt when none is readable.
std::optional<double> input_idle_seconds(const std::string& activity_file);
double load_per_core();

class IdleMonitor {
 public:
  explicit IdleMonitor(IdleOptions options) : options_(std::move(options)) {}
  bool offering() const;
  std::string reason() const;  // why (not) offering, for logs and status
  const IdleOptions& options() const { return options_; }

 private:
  IdleOptions options_;
};

}  // namespace orchard::network
