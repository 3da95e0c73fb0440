#include "serve/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <tuple>

#include "serve/fake_engine.h"

namespace orchard::serve {
namespace {

using namespace std::chrono_literals;
using testing::FakeEngine;
using testing::letter;
using testing::letters;

GenerationRequest request(std::string_view prompt, int32_t max_tokens, std::vector<std::string> stop = {}) {
  GenerationRequest r;
  r.prompt = letters(prompt);
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  return r;  // temperature 0: greedy, so the fake model's choice is the token
}

// Drains what the job has produced so far without waiting.
JobUpdate poll(Job& job) { return job.wait(0ms); }

// Steps until every job has finished; returns each one's whole text.
std::vector<std::string> run_to_end(Scheduler& s, const std::vector<std::shared_ptr<Job>>& jobs, std::vector<JobUpdate>* ends = nullptr) {
  std::vector<std::string> text(jobs.size());
  std::vector<JobUpdate> last(jobs.size());
  for (int round = 0; round < 10000; ++round) {
    bool all = true;
    for (size_t i = 0; i < jobs.size(); ++i) {
      last[i] = poll(*jobs[i]);
      text[i] += last[i].text;
      all = all && last[i].finished;
    }
    if (all) break;
    s.step();
  }
  if (ends) *ends = last;
  return text;
}

TEST(Scheduler, GeneratesUntilMaxTokens) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto job = s.submit(request("abc", 5));
  std::vector<JobUpdate> ends;
  EXPECT_EQ(run_to_end(s, {job}, &ends)[0], "defgh");
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(ends[0].usage.prompt_tokens, 3);
  EXPECT_EQ(ends[0].usage.completion_tokens, 5);
  EXPECT_EQ(metrics.generated_tokens(), 5);
  // The last token sampled is never evaluated: 1 prompt pass + 4 decode steps.
  EXPECT_EQ(engine.log.size(), 5u);
}

TEST(Scheduler, StopsAtEndOfGeneration) {
  FakeEngine engine(1, 256, 512, [](model::TokenId last, int32_t pos) { return pos >= 5 ? testing::kEos : testing::next_letter(last, pos); });
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto job = s.submit(request("ab", 100));
  std::vector<JobUpdate> ends;
  // Positions 2, 3, 4 get c, d, e; the token for position 5 is EOS, not shown but counted.
  EXPECT_EQ(run_to_end(s, {job}, &ends)[0], "cde");
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Stop);
  EXPECT_EQ(ends[0].usage.completion_tokens, 4);
}

TEST(Scheduler, IgnoreEosRunsToMaxTokensWithoutSamplingEndOfGeneration) {
  // From position 5 on the model wants only EOS; masked, greedy takes the best other token
  // (every other logit is 0: token 0, <unk>), never EOS itself.
  std::vector<model::TokenId> evaluated;
  FakeEngine engine(1, 256, 512, [&](model::TokenId last, int32_t pos) {
    evaluated.push_back(last);
    return pos >= 5 ? testing::kEos : testing::next_letter(last, pos);
  });
  Metrics metrics;
  Scheduler s(engine, metrics);
  GenerationRequest r = request("ab", 8);
  r.ignore_eos = true;
  auto job = s.submit(r);
  std::vector<JobUpdate> ends;
  run_to_end(s, {job}, &ends);
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(ends[0].usage.completion_tokens, 8);
  EXPECT_EQ(std::count(evaluated.begin(), evaluated.end(), testing::kEos), 0);
  EXPECT_EQ(std::count(evaluated.begin(), evaluated.end(), 0), 4);  // <unk> at 5..8 (9's is never evaluated)
}

TEST(Scheduler, StopStringIsHeldBackAndNotReturned) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto job = s.submit(request("a", 20, {"xyz", "def"}));
  s.step();  // b
  EXPECT_EQ(poll(*job).text, "b");
  s.step();  // c
  EXPECT_EQ(poll(*job).text, "c");
  s.step();  // d: could start "def", held back
  EXPECT_EQ(poll(*job).text, "");
  s.step();  // e: still possible
  EXPECT_EQ(poll(*job).text, "");
  s.step();  // f: the stop string is complete
  JobUpdate u = poll(*job);
  EXPECT_EQ(u.text, "");
  EXPECT_TRUE(u.finished);
  EXPECT_EQ(u.finish_reason, FinishReason::Stop);
  EXPECT_EQ(u.usage.completion_tokens, 5);
}

TEST(Scheduler, HeldBackTextIsReleasedWhenGenerationEnds) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto job = s.submit(request("a", 3, {"dx"}));
  std::vector<JobUpdate> ends;
  EXPECT_EQ(run_to_end(s, {job}, &ends)[0], "bcd");
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Length);
}

TEST(Scheduler, ConcurrentRequestsProgressInterleaved) {
  FakeEngine engine(2);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("a", 30));
  auto b = s.submit(request("m", 30));
  std::string ta, tb;
  for (int round = 1; round <= 30; ++round) {
    s.step();
    ta += poll(*a).text;
    tb += poll(*b).text;
    // One token each per round: neither waits for the other to finish.
    ASSERT_EQ(ta.size(), static_cast<size_t>(round));
    ASSERT_EQ(tb.size(), static_cast<size_t>(round));
  }
  EXPECT_EQ(ta.substr(0, 5), "bcdef");
  EXPECT_EQ(tb.substr(0, 5), "nopqr");
  // The slots' passes alternate.
  for (size_t i = 0; i < engine.log.size(); ++i) EXPECT_EQ(engine.log[i].slot, static_cast<int32_t>(i % 2));
}

TEST(Scheduler, LongPromptIsProcessedInChunksWhileOthersDecode) {
  FakeEngine engine(2);
  Metrics metrics;
  Scheduler s(engine, metrics, {.max_queue = 4, .prompt_chunk = 16});
  auto shortjob = s.submit(request("a", 10));
  auto longjob = s.submit(request(std::string(50, 'c'), 1));
  std::string short_text;
  for (int round = 1; round <= 4; ++round) {
    s.step();
    short_text += poll(*shortjob).text;
    EXPECT_EQ(short_text.size(), static_cast<size_t>(round));
    EXPECT_EQ(poll(*longjob).finished, round == 4);  // 16 + 16 + 16 + 2 prompt positions
  }
  for (const auto& e : engine.log)
    if (e.slot == 1) {
      EXPECT_LE(e.n, 16);
    }
}

// The value of an unlabelled sample `name` in the metrics' text; -1 when absent.
double metric(const Metrics& metrics, const std::string& name) {
  const std::string text = metrics.render({});
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

TEST(Scheduler, PromptArrivingMidDecodeRidesAlongWithoutStallingOthers) {
  FakeEngine engine(3);
  Metrics metrics;
  Scheduler s(engine, metrics, {.max_queue = 4, .prompt_chunk = 8});
  auto a = s.submit(request("a", 12));
  auto b = s.submit(request("k", 12));
  std::string text_a, text_b;
  for (int round = 0; round < 3; ++round) {
    s.step();
    text_a += poll(*a).text;
    text_b += poll(*b).text;
  }
  ASSERT_EQ(text_a.size(), 3u);
  // 30 prompt positions in chunks of 8: 8, 8, 8, 6. Each of those rounds is one engine call that
  // also carries a decode token of each running sequence, and each gives them one more token.
  auto c = s.submit(request(std::string(30, 'p'), 4));
  const std::vector<int32_t> chunks = {8, 8, 8, 6};
  for (size_t round = 0; round < chunks.size(); ++round) {
    const size_t calls = engine.batches.size(), evals = engine.log.size();
    s.step();
    text_a += poll(*a).text;
    text_b += poll(*b).text;
    EXPECT_EQ(text_a.size(), 4 + round) << "round " << round;
    EXPECT_EQ(text_b.size(), 4 + round) << "round " << round;
    ASSERT_EQ(engine.batches.size(), calls + 1);
    EXPECT_EQ(engine.batches.back(), 3);
    ASSERT_EQ(engine.log.size(), evals + 3);
    EXPECT_EQ(engine.log.back().slot, 2);
    EXPECT_EQ(engine.log.back().n, chunks[round]);
  }
  const auto texts = run_to_end(s, {a, b, c});
  // The same requests one at a time on a fresh engine give the same text.
  for (const auto& [job_text, prompt, max_tokens] :
       {std::tuple{text_a + texts[0], std::string("a"), 12}, {text_b + texts[1], std::string("k"), 12},
        {texts[2], std::string(30, 'p'), 4}}) {
    FakeEngine alone_engine(1);
    Metrics alone_metrics;
    Scheduler alone(alone_engine, alone_metrics);
    EXPECT_EQ(run_to_end(alone, {alone.submit(request(prompt, max_tokens))})[0], job_text) << prompt;
  }
  // Every round that ran the engine is in the metrics, with its positions and sequences.
  int64_t positions = 0, sequences = 0;
  for (const auto& e : engine.log) positions += e.n;
  for (int32_t n : engine.batches) sequences += n;
  EXPECT_EQ(metric(metrics, "orchard_steps_total"), static_cast<double>(engine.batches.size()));
  EXPECT_EQ(metric(metrics, "orchard_step_positions_total"), static_cast<double>(positions));
  EXPECT_EQ(metric(metrics, "orchard_step_sequences_total"), static_cast<double>(sequences));
  EXPECT_EQ(metric(metrics, "orchard_prompt_tokens_total"), 32.0);
  EXPECT_EQ(metric(metrics, "orchard_tokens_generated_total"), 28.0);
}

TEST(Scheduler, ARoundOfDecodingSlotsIsOneEngineCall) {
  for (int32_t k = 1; k <= 4; ++k) {
    FakeEngine engine(4);
    Metrics metrics;
    Scheduler s(engine, metrics);
    std::vector<std::shared_ptr<Job>> jobs;
    for (int32_t i = 0; i < k; ++i) jobs.push_back(s.submit(request(std::string(1, static_cast<char>('a' + 5 * i)), 6)));
    const auto text = run_to_end(s, jobs);
    for (int32_t i = 0; i < k; ++i) {
      std::string expected;
      for (int c = 1; c <= 6; ++c) expected += static_cast<char>('a' + 5 * i + c);
      EXPECT_EQ(text[static_cast<size_t>(i)], expected) << k << " slots, job " << i;
    }
    // One call per round, each with a step of every slot: the prompts, then 5 decode tokens
    // (the 6th token sampled is never evaluated).
    EXPECT_EQ(engine.batches, std::vector<int32_t>(6, k)) << k << " slots";
    ASSERT_EQ(engine.log.size(), static_cast<size_t>(6 * k));
    for (size_t i = 0; i < engine.log.size(); ++i) EXPECT_EQ(engine.log[i].slot, static_cast<int32_t>(i % k));
  }
}

TEST(Scheduler, ShortBatchGivesEverySlotATurn) {
  // Three slots, two positions per call: each round one slot is left out, and it goes first in
  // the next round.
  FakeEngine engine(3, 256, 512, testing::next_letter, /*batch_limit=*/2);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("a", 100));
  auto b = s.submit(request("h", 100));
  auto c = s.submit(request("o", 100));
  std::string ta, tb, tc;
  for (int round = 1; round <= 30; ++round) {
    s.step();
    ta += poll(*a).text;
    tb += poll(*b).text;
    tc += poll(*c).text;
    const auto lengths = {ta.size(), tb.size(), tc.size()};
    // Nobody gets two steps ahead of another.
    EXPECT_LE(std::max(lengths) - std::min(lengths), 1u) << "round " << round;
  }
  EXPECT_EQ(ta.size() + tb.size() + tc.size(), 2u * 30);
  for (int32_t steps : engine.batches) EXPECT_EQ(steps, 2);

  // A long prompt's chunk gets what the decode tokens leave of the batch.
  FakeEngine tight(2, 256, 512, testing::next_letter, /*batch_limit=*/8);
  Scheduler t(tight, metrics, {.max_queue = 4, .prompt_chunk = 16});
  auto shortjob = t.submit(request("a", 10));
  t.step();  // shortjob's prompt alone: the long one is not there yet
  auto longjob = t.submit(request(std::string(20, 'c'), 1));
  t.step();
  t.step();
  t.step();
  EXPECT_TRUE(poll(*longjob).finished);  // 7 + 7 + 6 prompt positions beside one decode token each
  ASSERT_EQ(tight.log.size(), 7u);
  for (size_t i : {1u, 3u, 5u}) EXPECT_EQ(tight.log[i].n, 1);
  EXPECT_EQ(tight.log[2].n, 7);
  EXPECT_EQ(tight.log[4].n, 7);
  EXPECT_EQ(tight.log[6].n, 6);
  EXPECT_EQ(poll(*shortjob).text, "bcde");
}

TEST(Scheduler, WaitingRequestsStartInArrivalOrder) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("a", 2));
  auto b = s.submit(request("b", 2));
  auto c = s.submit(request("c", 2));
  EXPECT_EQ(s.queue_depth(), 3);
  s.step();
  EXPECT_EQ(s.queue_depth(), 2);
  EXPECT_EQ(s.active_slots(), 1);
  s.step();
  EXPECT_TRUE(poll(*a).finished);
  EXPECT_FALSE(poll(*b).finished);
  s.step();
  s.step();
  EXPECT_TRUE(poll(*b).finished);
  EXPECT_FALSE(poll(*c).finished);
  EXPECT_EQ(run_to_end(s, {c})[0], "de");
}

TEST(Scheduler, RefusesWhenTheQueueIsFull) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics, {.max_queue = 1, .prompt_chunk = 64});
  auto a = s.submit(request("a", 100));
  auto b = s.submit(request("b", 100));
  EXPECT_THROW(s.submit(request("c", 100)), QueueFullError);
  s.step();  // a in the slot, b waiting: still full
  EXPECT_THROW(s.submit(request("c", 100)), QueueFullError);
  a->cancel();
  s.step();  // a leaves, b takes the slot
  EXPECT_NO_THROW(s.submit(request("c", 100)));
}

TEST(Scheduler, CancellingFreesTheSlotForTheNextRequest) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("a", 100));
  auto b = s.submit(request("m", 3));
  s.step();
  s.step();
  EXPECT_EQ(poll(*a).text, "bc");
  a->cancel();
  s.step();  // a leaves; b starts next round
  JobUpdate ua = poll(*a);
  EXPECT_TRUE(ua.finished);
  EXPECT_EQ(ua.finish_reason, FinishReason::Cancelled);
  EXPECT_EQ(ua.usage.completion_tokens, 2);
  std::vector<JobUpdate> ends;
  EXPECT_EQ(run_to_end(s, {b}, &ends)[0], "nop");
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Length);
}

TEST(Scheduler, CancellingAWaitingRequestRemovesIt) {
  FakeEngine engine(1);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("a", 100));
  auto b = s.submit(request("b", 100));
  s.step();
  EXPECT_EQ(s.queue_depth(), 1);
  b->cancel();
  s.step();
  EXPECT_EQ(s.queue_depth(), 0);
  JobUpdate ub = poll(*b);
  EXPECT_TRUE(ub.finished);
  EXPECT_EQ(ub.finish_reason, FinishReason::Cancelled);
  EXPECT_EQ(ub.usage.completion_tokens, 0);
  EXPECT_FALSE(poll(*a).finished);
}

TEST(Scheduler, StopsWhenTheContextIsFull) {
  FakeEngine engine(1, /*n_ctx=*/8);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto job = s.submit(request("abc", 100));
  std::vector<JobUpdate> ends;
  // Positions 3..7 are evaluated; the token for position 8 is shown but has no room.
  EXPECT_EQ(run_to_end(s, {job}, &ends)[0], "defghi");
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(ends[0].usage.completion_tokens, 6);
}

TEST(Scheduler, RefusesRequestsBreakingTheContract) {
  FakeEngine engine(1, /*n_ctx=*/8);
  Metrics metrics;
  Scheduler s(engine, metrics);
  EXPECT_THROW(s.submit(request("", 5)), Error);
  EXPECT_THROW(s.submit(request("abcdefgh", 5)), Error);  // 8 tokens leave no room
  EXPECT_THROW(s.submit(request("a", 0)), Error);
  GenerationRequest bad_token = request("a", 5);
  bad_token.prompt[0] = 1000;
  EXPECT_THROW(s.submit(bad_token), Error);
}

// The fake model's next letter, except that evaluating a 'y' fails.
model::TokenId next_letter_but_breaks_at_y(model::TokenId last, int32_t pos) {
  if (last == letter('y')) throw std::runtime_error("engine broke");
  return testing::next_letter(last, pos);
}

TEST(Scheduler, SamplerRefusalAndEngineFailureEndOnlyThatRequest) {
  FakeEngine engine(1, 256, 512, next_letter_but_breaks_at_y);
  Metrics metrics;
  Scheduler s(engine, metrics);
  GenerationRequest bad_sampling = request("a", 5);
  bad_sampling.sampling.temperature = 1;
  bad_sampling.sampling.top_p = 0;  // the sampler refuses it
  auto a = s.submit(bad_sampling);
  auto b = s.submit(request("wx", 5));  // fails evaluating the y it generates
  auto c = s.submit(request("a", 2));
  std::vector<JobUpdate> ends;
  auto text = run_to_end(s, {a, b, c}, &ends);
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Error);
  EXPECT_NE(ends[0].error.find("top_p"), std::string::npos);
  EXPECT_EQ(ends[1].finish_reason, FinishReason::Error);
  EXPECT_NE(ends[1].error.find("engine broke"), std::string::npos);
  EXPECT_EQ(text[2], "bc");
  EXPECT_EQ(ends[2].finish_reason, FinishReason::Length);
}

TEST(Scheduler, EngineFailureInABatchEndsOnlyItsRequest) {
  FakeEngine engine(2, 256, 512, next_letter_but_breaks_at_y);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto a = s.submit(request("wx", 5));  // fails evaluating the y it generates
  auto b = s.submit(request("a", 3));
  std::vector<JobUpdate> ends;
  auto text = run_to_end(s, {a, b}, &ends);
  EXPECT_EQ(ends[0].finish_reason, FinishReason::Error);
  EXPECT_NE(ends[0].error.find("engine broke"), std::string::npos);
  EXPECT_EQ(ends[0].usage.completion_tokens, 1);
  EXPECT_EQ(text[1], "bcd");
  EXPECT_EQ(ends[1].finish_reason, FinishReason::Length);
  // a's y failed in one call with b's decode token; both steps then ran again alone.
  EXPECT_EQ(engine.batches, (std::vector<int32_t>{2, 2, 1, 1, 1}));
}

TEST(Scheduler, ComputeThreadServesConcurrentCallers) {
  FakeEngine engine(3);
  Metrics metrics;
  Scheduler s(engine, metrics, {.max_queue = 16, .prompt_chunk = 64});
  s.start();
  constexpr int kClients = 12;
  std::vector<std::string> texts(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      auto job = s.submit(request(std::string(1, static_cast<char>('a' + i)), 5 + i));
      for (;;) {
        JobUpdate u = job->wait(1000ms);
        texts[i] += u.text;
        if (u.finished) break;
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    std::string expected;
    for (int k = 1; k <= 5 + i; ++k) expected += static_cast<char>('a' + (i + k) % 26);
    EXPECT_EQ(texts[i], expected) << "client " << i;
  }
}

TEST(Scheduler, ShutdownFinishesWaitingJobs) {
  FakeEngine engine(1);
  Metrics metrics;
  std::shared_ptr<Job> a, b;
  {
    Scheduler s(engine, metrics);
    a = s.submit(request("a", 100));
    b = s.submit(request("b", 100));
    s.step();
  }
  EXPECT_EQ(poll(*a).finish_reason, FinishReason::Cancelled);
  EXPECT_TRUE(poll(*b).finished);
  EXPECT_EQ(poll(*b).finish_reason, FinishReason::Cancelled);
}

}  // namespace
}  // namespace orchard::serve
