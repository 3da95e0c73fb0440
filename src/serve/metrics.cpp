#include "serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace orchard::serve {

void Metrics::count_request(int http_status) {
  std::lock_guard lock(mutex_);
  ++requests_by_status_[http_status];
}

void Metrics::count_finished(const std::string& finish_reason) {
  std::lock_guard lock(mutex_);
  ++finished_by_reason_[finish_reason];
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += n;
}

void Metrics::add_generated_tokens(int64_t n, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  generated_tokens_ += n;
  if (!any_token_) {
    any_token_ = true;
    first_token_ = now;
  }
  recent_.emplace_back(now, n);
  drop_old_locked(now);
}

void Metrics::add_step(double forward_seconds, double other_seconds, int64_t positions, int64_t sequences) {
  std::lock_guard lock(mutex_);
  ++steps_;
  step_forward_seconds_ += forward_seconds;
  step_other_seconds_ += other_seconds;
  step_positions_ += positions;
  step_sequences_ += sequences;
}

void Metrics::drop_old_locked(Clock::time_point now) const {
  while (!recent_.empty() && now - recent_.front().first > kRateWindow) recent_.pop_front();
}

double Metrics::generation_rate(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  drop_old_locked(now);
  if (recent_.empty()) return 0;
  int64_t tokens = 0;
  for (const auto& [when, n] : recent_) tokens += n;
  // A server younger than the window averages over its life, not over idle time it never had.
  const auto span = std::min<Clock::duration>(kRateWindow, now - first_token_);
  const double seconds = std::chrono::duration<double>(span).count();
  return seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
}

int64_t Metrics::generated_tokens() const {
  std::lock_guard lock(mutex_);
  return generated_tokens_;
}

int64_t Metrics::requests_with_status(int http_status) const {
  std::lock_guard lock(mutex_);
  auto it = requests_by_status_.find(http_status);
  return it == requests_by_status_.end() ? 0 : it->second;
}

std::string Metrics::render(const Gauges& gauges, Clock::time_point now) const {
  const double rate = generation_rate(now);
  std::lock_guard lock(mutex_);
  std::string out;
  auto it = std::back_inserter(out);
  auto header = [&](std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(it, "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("orchard_requests_total", "counter", "HTTP requests answered, by status code.");
  for (const auto& [status, n] : requests_by_status_) fmt::format_to(it, "orchard_requests_total{{status=\"{}\"}} {}\n", status, n);
  header("orchard_completions_total", "counter", "Generations ended, by finish reason.");
  for (const auto& [reason, n] : finished_by_reason_)
    fmt::format_to(it, "orchard_completions_total{{finish_reason=\"{}\"}} {}\n", reason, n);
  header("orchard_prompt_tokens_total", "counter", "Prompt tokens processed.");
  fmt::format_to(it, "orchard_prompt_tokens_total {}\n", prompt_tokens_);
  header("orchard_tokens_generated_total", "counter", "Tokens generated.");
  fmt::format_to(it, "orchard_tokens_generated_total {}\n", generated_tokens_);
  header("orchard_generation_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.");
  fmt::format_to(it, "orchard_generation_tokens_per_second {:.3f}\n", rate);
  header("orchard_queue_depth", "gauge", "Requests waiting for a slot.");
  fmt::format_to(it, "orchard_queue_depth {}\n", gauges.queue_depth);
  header("orchard_active_slots", "gauge", "Slots generating.");
  fmt::format_to(it, "orchard_active_slots {}\n", gauges.active_slots);
  header("orchard_slots", "gauge", "Slots in all (sequences served at once).");
  fmt::format_to(it, "orchard_slots {}\n", gauges.n_slots);
  header("orchard_steps_total", "counter", "Scheduler rounds that ran the engine (one batched pass each).");
  fmt::format_to(it, "orchard_steps_total {}\n", steps_);
  header("orchard_step_seconds_total", "counter",
         "Seconds of scheduler rounds: in the engine's pass (forward), and the rest of the round (other: admitting, "
         "sampling, stop strings, detokenizing, handing text over).");
  fmt::format_to(it, "orchard_step_seconds_total{{part=\"forward\"}} {:.6f}\n", step_forward_seconds_);
  fmt::format_to(it, "orchard_step_seconds_total{{part=\"other\"}} {:.6f}\n", step_other_seconds_);
  header("orchard_step_positions_total", "counter", "Positions evaluated by scheduler rounds (prompt chunks and decode tokens).");
  fmt::format_to(it, "orchard_step_positions_total {}\n", step_positions_);
  header("orchard_step_sequences_total", "counter", "Sequences stepped by scheduler rounds (mean batch: this over orchard_steps_total).");
  fmt::format_to(it, "orchard_step_sequences_total {}\n", step_sequences_);
  header("orchard_rank_forward_seconds_total", "counter", "Seconds each rank spent in forward passes.");
  for (size_t rank = 0; rank < gauges.rank_forward_seconds.size(); ++rank)
    fmt::format_to(it, "orchard_rank_forward_seconds_total{{rank=\"{}\"}} {:.6f}\n", rank, gauges.rank_forward_seconds[rank]);
  return out;
}

}  // namespace orchard::serve
