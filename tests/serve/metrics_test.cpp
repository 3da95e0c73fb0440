#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace orchard::serve {
namespace {

using namespace std::chrono_literals;

TEST(Metrics, RendersPrometheusText) {
  Metrics m;
  m.count_request(200);
  m.count_request(200);
  m.count_request(429);
  m.count_finished("stop");
  m.add_prompt_tokens(12);
  m.add_generated_tokens(5);
  m.add_step(0.25, 0.125, 9, 3);
  m.add_step(0.5, 0.25, 3, 3);
  Gauges g{.queue_depth = 3, .active_slots = 2, .n_slots = 4, .rank_forward_seconds = {1.5}};
  const std::string text = m.render(g);
  for (const char* line : {"orchard_requests_total{status=\"200\"} 2\n", "orchard_requests_total{status=\"429\"} 1\n",
                           "orchard_completions_total{finish_reason=\"stop\"} 1\n", "orchard_prompt_tokens_total 12\n",
                           "orchard_tokens_generated_total 5\n", "orchard_queue_depth 3\n", "orchard_active_slots 2\n",
                           "orchard_slots 4\n", "orchard_rank_forward_seconds_total{rank=\"0\"} 1.500000\n",
                           "# TYPE orchard_generation_tokens_per_second gauge\n", "orchard_steps_total 2\n",
                           "orchard_step_seconds_total{part=\"forward\"} 0.750000\n",
                           "orchard_step_seconds_total{part=\"other\"} 0.375000\n", "orchard_step_positions_total 12\n",
                           "orchard_step_sequences_total 6\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing from\n" << text;
  EXPECT_EQ(m.requests_with_status(200), 2);
}

TEST(Metrics, RateCoversTheRecentWindowOnly) {
  Metrics m;
  const auto t0 = Metrics::Clock::now();
  EXPECT_EQ(m.generation_rate(t0), 0);
  m.add_generated_tokens(10, t0);
  m.add_generated_tokens(10, t0 + 2s);
  // Younger than the window: averaged over its 4 seconds of life.
  EXPECT_DOUBLE_EQ(m.generation_rate(t0 + 4s), 5.0);
  m.add_generated_tokens(30, t0 + 20s);
  // The first two are out of the window now.
  EXPECT_DOUBLE_EQ(m.generation_rate(t0 + 20s), 3.0);
  EXPECT_EQ(m.generation_rate(t0 + 40s), 0);
  EXPECT_EQ(m.generated_tokens(), 50);
}

}  // namespace
}  // namespace orchard::serve
