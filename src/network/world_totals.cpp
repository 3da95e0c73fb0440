#include "network/world_totals.h"

namespace orchard::network {

void WorldTotals::expire(int64_t now_ms) {
  while (!generated_.empty() && generated_.front().first <= now_ms - kWindowMs) generated_.pop_front();
}

void WorldTotals::completed(int64_t at_ms, int64_t tokens) {
  generated_.emplace_back(at_ms, tokens);
  expire(at_ms);  // bounded even when at() is never asked
}

nlohmann::json WorldTotals::at(int64_t now_ms) {
  expire(now_ms);
  int64_t tokens = 0;
  for (const auto& g : generated_) tokens += g.second;
  nlohmann::json credits = nlohmann::json::object();
  for (const auto& [seat, micro] : credits_by_seat_) credits[seat] = static_cast<double>(micro) / 1e6;
  return {{"tok_s", static_cast<double>(tokens) * 1000.0 / kWindowMs},
          {"jobs_per_min", static_cast<double>(generated_.size()) * 60000.0 / kWindowMs},
          {"credits_by_seat", credits}};
}

}  // namespace orchard::network
