#include "serve/prompt_cache.h"

#include <gtest/gtest.h>

#include "serve/fake_engine.h"
#include "serve/scheduler.h"

namespace orchard::serve {
namespace {

using namespace std::chrono_literals;
using testing::FakeEngine;
using testing::letters;

std::vector<uint8_t> busy_flags(std::initializer_list<int> busy) { return std::vector<uint8_t>(busy.begin(), busy.end()); }

TEST(PromptCache, TakesTheFreeSlotWithTheLongestCommonPrefix) {
  PromptCache cache(3);
  cache.record(0, letters("abcdef"), 0);
  cache.record(1, letters("abxy"), 0);
  cache.record(2, letters("abcdq"), 0);
  auto choice = cache.choose(letters("abcdez"), busy_flags({0, 0, 0}), true);
  EXPECT_EQ(choice.slot, 0);
  EXPECT_EQ(choice.reused, 5);
  EXPECT_EQ(choice.copy_from, -1);
  // Busy slots are not taken, however well they match (too short a lead to copy from).
  choice = cache.choose(letters("abcdez"), busy_flags({1, 0, 0}), true);
  EXPECT_EQ(choice.slot, 2);
  EXPECT_EQ(choice.reused, 4);
  EXPECT_EQ(choice.copy_from, -1);
  // None free.
  EXPECT_EQ(cache.choose(letters("abc"), busy_flags({1, 1, 1}), true).slot, -1);
}

TEST(PromptCache, LeavesTheLastPromptPositionToCompute) {
  PromptCache cache(1);
  cache.record(0, letters("abcdef"), 0);
  EXPECT_EQ(cache.choose(letters("abc"), busy_flags({0}), true).reused, 2);
  EXPECT_EQ(cache.choose(letters("abcdef"), busy_flags({0}), true).reused, 5);
  EXPECT_EQ(cache.choose(letters("a"), busy_flags({0}), true).reused, 0);
}

TEST(PromptCache, WithoutAMatchTheLeastRecentlyUsedSlotGoes) {
  PromptCache cache(3);
  for (int32_t slot : {1, 0, 2}) cache.touch(slot);
  EXPECT_EQ(cache.choose(letters("xyz"), busy_flags({0, 0, 0}), true).slot, 1);
  cache.touch(1);
  EXPECT_EQ(cache.choose(letters("xyz"), busy_flags({0, 0, 0}), true).slot, 0);
  EXPECT_EQ(cache.choose(letters("xyz"), busy_flags({1, 0, 0}), true).slot, 2);
}

TEST(PromptCache, ALongerPrefixInABusySlotIsCopied) {
  PromptCache cache(2);
  const std::string prefix(40, 'k');
  cache.record(0, letters(prefix + "abc"), 0);
  auto choice = cache.choose(letters(prefix + "xyz"), busy_flags({1, 0}), true);
  EXPECT_EQ(choice.slot, 1);
  EXPECT_EQ(choice.copy_from, 0);
  EXPECT_EQ(choice.reused, 40);
  EXPECT_EQ(cache.choose(letters(prefix + "xyz"), busy_flags({1, 0}), false).copy_from, -1);
  // A lead under kMinCopy positions is computed rather than copied.
  cache.record(1, letters(prefix.substr(0, 40 - PromptCache::kMinCopy + 1)), 0);
  EXPECT_EQ(cache.choose(letters(prefix + "xyz"), busy_flags({1, 0}), true).copy_from, -1);
  cache.copied(0, 1, 40);
  EXPECT_EQ(std::vector<model::TokenId>(cache.tokens(1).begin(), cache.tokens(1).end()), letters(prefix));
}

TEST(PromptCache, RecordsOverwriteFromTheirPositionAndGapsForgetTheRest) {
  PromptCache cache(1);
  cache.record(0, letters("abcdef"), 0);
  cache.record(0, letters("xy"), 3);
  EXPECT_EQ(std::vector<model::TokenId>(cache.tokens(0).begin(), cache.tokens(0).end()), letters("abcxy"));
  cache.keep(0, 2);
  EXPECT_EQ(std::vector<model::TokenId>(cache.tokens(0).begin(), cache.tokens(0).end()), letters("ab"));
  cache.record(0, letters("q"), 5);  // positions 2..4 unknown: nothing is kept
  EXPECT_TRUE(cache.tokens(0).empty());
}

GenerationRequest request(std::string_view prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = letters(prompt);
  r.max_tokens = max_tokens;
  return r;
}

JobUpdate finish(Scheduler& s, Job& job) {
  JobUpdate all;
  for (int round = 0; round < 1000 && !all.finished; ++round) {
    JobUpdate u = job.wait(0ms);
    all.text += u.text;
    all.finished = u.finished;
    all.usage = u.usage;
    if (!all.finished) s.step();
  }
  return all;
}

// The second request's shared prefix, prompt and generated tokens alike, is not evaluated again:
// its first eval starts where the prefixes part, and its answer is the uncached one.
TEST(SchedulerPromptCache, ASharedPrefixIsEvaluatedOnce) {
  FakeEngine engine(2);
  Metrics metrics;
  Scheduler s(engine, metrics);
  auto first = s.submit(request("qrstuvwxyz", 3));  // generates a, b, c; a and b are evaluated
  EXPECT_EQ(finish(s, *first).usage.cached_tokens, 0);
  engine.log.clear();
  auto second = s.submit(request("qrstuvwxyzabm", 4));
  const JobUpdate u = finish(s, *second);
  EXPECT_EQ(u.usage.cached_tokens, 12);
  EXPECT_EQ(u.usage.prompt_tokens, 13);
  ASSERT_FALSE(engine.log.empty());
  EXPECT_EQ(engine.log[0].pos, 12);
  EXPECT_EQ(engine.log[0].n, 1);
  FakeEngine fresh(1);
  Metrics fresh_metrics;
  Scheduler uncached(fresh, fresh_metrics);
  auto alone = uncached.submit(request("qrstuvwxyzabm", 4));
  EXPECT_EQ(finish(uncached, *alone).text, u.text);
}

// An engine that copies: the copy is logged, and the target slot's evals start after it.
class CopyingEngine : public FakeEngine {
 public:
  using FakeEngine::FakeEngine;
  struct Copy {
    int32_t from, to, n;
  };
  bool copy_prefix(int32_t from, int32_t to, int32_t n) override {
    copies.push_back({from, to, n});
    return true;
  }
  std::vector<Copy> copies;
};

TEST(SchedulerPromptCache, APrefixOfABusySlotIsCopiedIntoTheNewOne) {
  CopyingEngine engine(2);
  Metrics metrics;
  Scheduler s(engine, metrics);
  const std::string prefix(40, 'k');
  auto first = s.submit(request(prefix + "a", 50));
  s.step();  // its whole prompt in one chunk
  auto second = s.submit(request(prefix + "xyz", 3));
  s.step();
  ASSERT_EQ(engine.copies.size(), 1u);
  EXPECT_EQ(engine.copies[0].from, 0);
  EXPECT_EQ(engine.copies[0].to, 1);
  EXPECT_EQ(engine.copies[0].n, 40);
  const JobUpdate u = finish(s, *second);
  EXPECT_EQ(u.usage.cached_tokens, 40);
  for (const auto& e : engine.log) {
    if (e.slot != 1) continue;
    EXPECT_GE(e.pos, 40);
  }
  first->cancel();
  finish(s, *first);
}

}  // namespace
}  // namespace orchard::serve
