#include "network/replica.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "network/store/db.h"

namespace orchard::network {
namespace {

constexpr int64_t kLeaderLock = 0x6f72636861726402;  // "orchard" 02 (store.cpp has 01)
// How often a follower tries the leader lock, and so how long a network is without a leader
// after the leader's process or session is lost.
constexpr auto kLockRetry = std::chrono::milliseconds(1000);
// How long a notice waits to go out with others (a follower's job waits this long before the
// leader hears of it).
constexpr auto kFlushEvery = std::chrono::milliseconds(10);
// A NOTIFY payload's limit is 8000 bytes.
constexpr size_t kMaxPayload = 7900;

}  // namespace

Replica::Replica(Coordinator& coordinator, std::string url, std::string advertise,
                 std::function<void(const std::string&)> on_lost)
    : coordinator_(coordinator), url_(std::move(url)), advertise_(std::move(advertise)), on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] { run(); });
  flusher_ = std::thread([this] { flush(); });
}

Replica::~Replica() { stop(); }

void Replica::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (flusher_.joinable()) flusher_.join();
}

void Replica::flush() {
  std::vector<std::string> unsent;
  while (!stop_) {
    std::this_thread::sleep_for(kFlushEvery);
    for (std::string& n : coordinator_.take_notices()) unsent.push_back(std::move(n));
    size_t sent = 0;
    try {
      while (sent < unsent.size()) {
        std::string payload;
        size_t next = sent;
        while (next < unsent.size() && (payload.empty() || payload.size() + 1 + unsent[next].size() <= kMaxPayload))
          payload += (payload.empty() ? "" : " ") + unsent[next++];
        coordinator_.store().notify(payload);
        sent = next;
      }
    } catch (const Error& e) {
      spdlog::warn("[network] telling the other coordinators: {}; trying again", e.what());
    }
    unsent.erase(unsent.begin(), unsent.begin() + static_cast<std::ptrdiff_t>(sent));
  }
}

void Replica::run() {
  std::unique_ptr<Listener> listener;
  while (!stop_) {
    try {
      if (!listener) listener = open_listener(url_, kNoticeChannel);
      if (!coordinator_.leading() && listener->try_lock(kLeaderLock)) {
        coordinator_.store().set_leader_url(advertise_, wall_clock_ms());
        coordinator_.become_leader();
        spdlog::info("[network] this coordinator leads (serves nodes at {})", advertise_);
      }
      for (const std::string& payload : listener->wait(kLockRetry)) {
        try {
          coordinator_.on_notices(payload);
        } catch (const std::exception& e) {
          spdlog::warn("[network] notices '{}': {}", payload.substr(0, 200), e.what());
        }
      }
    } catch (const Error& e) {
      listener.reset();
      if (coordinator_.leading()) {
        if (on_lost_) on_lost_(e.what());
        return;
      }
      spdlog::warn("[network] {}; trying again", e.what());
      std::this_thread::sleep_for(kLockRetry);
    }
  }
}

}  // namespace orchard::network
