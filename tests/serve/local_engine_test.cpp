// LocalEngine's batched eval against its slots evaluated one by one on a second engine: each
// slot gets its own step's logits, and keeps them while other slots run.
#include "serve/local_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/model_files.h"
#include "serve/scheduler.h"

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

// gpt-oss's sliding layers keep rings of 5 + 4 - 1 = 8 positions here (model::Forward): a slot
// can go on from a position only while its rings still hold the window before it, a copy takes
// the rings along, and a request whose cached prefix lies further back than the rings reach is
// computed from its start, with the answer an uncached engine gives.
LocalEngineOptions ring_options() {
  LocalEngineOptions o = options();
  o.model_path = orchard::testing::synthetic_model("gpt-oss", "tiny", "q8_0");
  o.n_slots = 2;
  o.n_ctx = 64;
  o.max_batch = 4;
  return o;
}

TEST(LocalEngine, SlidingWindowRingsResumeOnlyWhatTheyHold) {
  LocalEngine engine(ring_options());
  std::vector<model::TokenId> tokens(24);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<model::TokenId>(3 + i * 29 % 900);
  auto chunk = [&](size_t pos) { return std::span<const model::TokenId>(tokens).subspan(pos, 4); };
  for (size_t pos = 0; pos < 20; pos += 4) engine.slot(0).eval(chunk(pos), static_cast<int32_t>(pos));
  EXPECT_EQ(engine.slot(0).resumable(20), 20);
  ASSERT_TRUE(engine.copy_prefix(0, 1, 20));
  EXPECT_EQ(engine.slot(1).resumable(20), 20);
  engine.slot(0).eval(chunk(20), 20);
  engine.slot(1).eval(chunk(20), 20);
  EXPECT_EQ(logits_of(engine, 0), logits_of(engine, 1));
  // At 24 the rings hold 16..23: from 8 the window 4..7 is gone.
  EXPECT_EQ(engine.slot(0).resumable(8), 0);
  EXPECT_THROW(engine.slot(0).eval(chunk(8), 8), Error);
}

GenerationRequest ring_request(std::vector<model::TokenId> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

JobUpdate run_to_end(Scheduler& s, Job& job) {
  JobUpdate all;
  for (int round = 0; round < 1000 && !all.finished; ++round) {
    JobUpdate u = job.wait(std::chrono::milliseconds(0));
    all.text += u.text;
    all.finished = u.finished;
    all.usage = u.usage;
    if (!all.finished) s.step();
  }
  return all;
}

TEST(LocalEngine, APromptCachePrefixOlderThanTheRingsIsComputedAgain) {
  std::vector<model::TokenId> first(30), second;
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<model::TokenId>(3 + i * 31 % 900);
  second.assign(first.begin(), first.begin() + 12);  // parts from the first at 12
  for (int i = 0; i < 8; ++i) second.push_back(700 + i);
  LocalEngineOptions o = ring_options();
  o.n_slots = 1;
  LocalEngine engine(o), fresh(o);
  Metrics metrics, fresh_metrics;
  Scheduler s(engine, metrics), uncached(fresh, fresh_metrics);
  auto a = s.submit(ring_request(first, 3));
  run_to_end(s, *a);
  // The slot holds the first request's 32 positions; its rings only 24..31.
  auto b = s.submit(ring_request(second, 4));
  const JobUpdate got = run_to_end(s, *b);
  EXPECT_EQ(got.usage.cached_tokens, 0);
  auto alone = uncached.submit(ring_request(second, 4));
  EXPECT_EQ(run_to_end(uncached, *alone).text, got.text);
  // A request that goes on where the slot stands reuses it all.
  std::vector<model::TokenId> third = second;
  third.push_back(5);
  auto c = s.submit(ring_request(third, 2));
  EXPECT_GE(run_to_end(s, *c).usage.cached_tokens, 20);
}

}  // namespace
}  // namespace orchard::serve
