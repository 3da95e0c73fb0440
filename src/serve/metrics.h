#pragma once
// Counters and gauges of the server, rendered in the Prometheus text exposition format
// (version 0.0.4). Every method is safe to call from any thread.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace orchard::serve {

// Values read at render time from their owners (the scheduler, the engine).
struct Gauges {
  int32_t queue_depth = 0;   // requests waiting for a slot
  int32_t active_slots = 0;  // slots generating
  int32_t n_slots = 0;
  std::vector<double> rank_forward_seconds;  // per rank, since the start
};

class Metrics {
 public:
  using Clock = std::chrono::steady_clock;

  // Over how long orchard_generation_tokens_per_second averages.
  static constexpr std::chrono::seconds kRateWindow{10};

  void count_request(int http_status);
  void count_finished(const std::string& finish_reason);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n, Clock::time_point now = Clock::now());
  // One scheduler round: seconds in the engine's batched pass, seconds in everything else the
  // compute thread did for the round (admitting, planning, sampling, stop strings, detokenizing,
  // handing text over), and the positions and sequences the pass evaluated.
  void add_step(double forward_seconds, double other_seconds, int64_t positions, int64_t sequences);

  // Tokens generated per second over the last kRateWindow (or since the first token, if sooner).
  double generation_rate(Clock::time_point now = Clock::now()) const;
  int64_t generated_tokens() const;
  int64_t requests_with_status(int http_status) const;

  std::string render(const Gauges& gauges, Clock::time_point now = Clock::now()) const;

 private:
  void drop_old_locked(Clock::time_point now) const;

  mutable std::mutex mutex_;
  std::map<int, int64_t> requests_by_status_;
  std::map<std::string, int64_t> finished_by_reason_;
  int64_t prompt_tokens_ = 0;
  int64_t generated_tokens_ = 0;
  int64_t steps_ = 0, step_positions_ = 0, step_sequences_ = 0;
  double step_forward_seconds_ = 0, step_other_seconds_ = 0;
  // (when, how many) for the recent rate; old entries are dropped lazily.
  mutable std::deque<std::pair<Clock::time_point, int64_t>> recent_;
  Clock::time_point first_token_{};
  bool any_token_ = false;
};

}  // namespace orchard::serve
