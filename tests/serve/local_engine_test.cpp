// LocalEngine's batched eval against its slots evaluated one by one on a second engine: each
// slot gets its own step's logits, and keeps them while other slots run.
#include "serve/local_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/model_files.h"

namespace orchard::serve {
namespace {

LocalEngineOptions options() {
  LocalEngineOptions o;
  o.model_path = orchard::testing::synthetic_model("qwen2", "tiny", "q8_0");
  o.n_slots = 3;
  o.n_ctx = 32;
  o.max_batch = 8;
  o.threads = 1;
  return o;
}

std::vector<float> logits_of(LocalEngine& engine, int32_t slot) {
  const float* l = engine.slot(slot).last_logits();
  return {l, l + engine.slot(slot).vocab_size()};
}

// RMS of a - b relative to the RMS of b.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double sum_b = 0, sum_d = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    sum_b += static_cast<double>(b[i]) * b[i];
    sum_d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  }
  return std::sqrt(sum_d / sum_b);
}

TEST(LocalEngine, BatchGivesEachSlotWhatItsOwnEvalGives) {
  LocalEngine batched(options()), alone(options());
  EXPECT_EQ(batched.max_batch(), 8);
  const std::vector<model::TokenId> p0 = {1, 50, 60, 70}, p2 = {1, 80}, next = {90};
  for (LocalEngine* e : {&batched, &alone}) e->slot(1).eval(p2, 0);

  const std::vector<model::SequenceStep> steps = {{2, p2, 0}, {0, p0, 0}, {1, next, 2}};
  batched.eval_batch(steps);
  for (const auto& step : steps) alone.slot(step.sequence).eval(step.tokens, step.pos);
  // As tests/model/test_batch.cpp: stacking rows may only reorder float additions.
  for (int32_t slot = 0; slot < 3; ++slot)
    EXPECT_LT(relative_difference(logits_of(batched, slot), logits_of(alone, slot)), 1e-5) << "slot " << slot;

  // Slot 2 alone next: slots 0 and 1 keep the logits of their last step.
  const auto kept0 = logits_of(batched, 0), kept1 = logits_of(batched, 1);
  batched.slot(2).eval(next, 2);
  EXPECT_EQ(logits_of(batched, 0), kept0);
  EXPECT_EQ(logits_of(batched, 1), kept1);
  EXPECT_GT(batched.rank_forward_seconds().at(0), 0.0);

  // More positions than a pass takes: refused, nothing changed.
  const std::vector<model::TokenId> long_prompt(7, 5);
  const std::vector<model::SequenceStep> too_many = {{0, long_prompt, 4}, {1, p0, 3}};
  EXPECT_THROW(batched.eval_batch(too_many), Error);
  EXPECT_EQ(logits_of(batched, 0), kept0);
}

}  // namespace
}  // namespace orchard::serve
