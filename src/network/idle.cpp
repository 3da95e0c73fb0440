#include "network/idle.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fmt/format.h>
#include <string>
#include <thread>

namespace orchard::network {
namespace {

std::optional<double> seconds_since_mtime_or_atime(const std::string& path, bool use_atime) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  time_t t = use_atime ? std::max(st.st_atime, st.st_mtime) : st.st_mtime;
  return std::difftime(std::time(nullptr), t);
}

// macOS: "HIDIdleTime" = nanoseconds since the last keyboard or mouse event.
std::optional<double> hid_idle_seconds() {
  if (::access("/usr/sbin/ioreg", X_OK) != 0) return std::nullopt;
  FILE* p = ::popen("/usr/sbin/ioreg -c IOHIDSystem -d 4 2>/dev/null", "r");
  if (!p) return std::nullopt;
  char line[512];
  std::optional<double> out;
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    auto k = s.find("\"HIDIdleTime\" = ");
    if (k != std::string::npos) {
      out = std::strtod(s.c_str() + k + 16, nullptr) / 1e9;
      break;
    }
  }
  ::pclose(p);
  return out;
}

// Linux: the kernel updates an event device's access time as events are read from it.
std::optional<double> dev_input_idle_seconds() {
  DIR* d = ::opendir("/dev/input");
  if (!d) return std::nullopt;
  std::optional<double> best;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!name.starts_with("event")) continue;
    std::string path = "/dev/input/" + name;
    if (::access(path.c_str(), R_OK) != 0) continue;
    if (auto s = seconds_since_mtime_or_atime(path, true)) best = best ? std::min(*best, *s) : *s;
  }
  ::closedir(d);
  return best;
}

}  // namespace

std::optional<double> input_idle_seconds(const std::string& activity_file) {
  std::optional<double> best = hid_idle_seconds();
  if (!best) best = dev_input_idle_seconds();
  if (!activity_file.empty())
    if (auto s = seconds_since_mtime_or_atime(activity_file, false)) best = best ? std::min(*best, *s) : *s;
  return best;
}

double load_per_core() {
  double load[1] = {0};
  if (::getloadavg(load, 1) != 1) return 0;
  return load[0] / std::max(1u, std::thread::hardware_concurrency());
}

bool IdleMonitor::offering() const {
  if (options_.dedicated) return true;
  auto idle = input_idle_seconds(options_.activity_file);
  if (idle && *idle * 1000 < static_cast<double>(options_.idle_after_ms)) return false;
  return load_per_core() <= options_.max_load_per_core;
}

std::string IdleMonitor::reason() const {
  if (options_.dedicated) return "dedicated seat: always offered";
  auto idle = input_idle_seconds(options_.activity_file);
  return fmt::format("input idle {}, load {:.2f} per core (limits: {} s, {:.2f})",
                     idle ? fmt::format("{:.0f} s", *idle) : std::string("unknown"), load_per_core(),
                     options_.idle_after_ms / 1000, options_.max_load_per_core);
}

}  // namespace orchard::network
