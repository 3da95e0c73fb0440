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

}  // namespace

Replica::Replica(Coordinator& coordinator, std::string url, std::string advertise,
                 std::function<void(const std::string&)> on_lost)
    : coordinator_(coordinator), url_(std::move(url)), advertise_(std::move(advertise)), on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] { run(); });
}

Replica::~Replica() { stop(); }

void Replica::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
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
      for (const std::string& notice : listener->wait(kLockRetry)) {
        try {
          coordinator_.on_notice(notice);
        } catch (const std::exception& e) {
          spdlog::warn("[network] notice '{}': {}", notice, e.what());
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
