#pragma once
// The figures of the World page (docs/world.md) that only the coordinator knows, apart from the
// machines: tokens generated and jobs completed over the last minute, and the micro-credits nodes
// earned per seat class. Kept as jobs settle, read without a database read. Not thread-safe: the
// coordinator calls it under its lock.
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace orchard::network {

class WorldTotals {
 public:
  static constexpr int64_t kWindowMs = 60000;  // tok_s and jobs_per_min are over this window

  // A job completed at `at_ms` with `tokens` generated.
  void completed(int64_t at_ms, int64_t tokens);
  // Nodes of `seat` earned `micro` micro-credits (negative: a fine).
  void earned(const std::string& seat, int64_t micro) { credits_by_seat_[seat] += micro; }
  // {"tok_s", "jobs_per_min", "credits_by_seat"} at `now_ms`.
  nlohmann::json at(int64_t now_ms);

 private:
  void expire(int64_t now_ms);
  std::deque<std::pair<int64_t, int64_t>> generated_;  // (completed at, tokens generated), last minute
  std::map<std::string, int64_t> credits_by_seat_;
};

}  // namespace orchard::network
