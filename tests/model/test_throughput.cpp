// measure_throughput's schedule: which positions it evaluates, in what batches, how often, and
// the rates it derives — checked on a model that only records its calls.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/error.h"
#include "model/throughput.h"

namespace orchard::model {
namespace {

class RecordingModel : public TokenModel {
 public:
  RecordingModel(int32_t max_batch, int32_t n_ctx) : max_batch_(max_batch), n_ctx_(n_ctx), logits_(8) {}
  void eval(std::span<const TokenId> tokens, int32_t pos) override {
    calls.emplace_back(pos, static_cast<int32_t>(tokens.size()));
  }
  const float* last_logits() const override { return logits_.data(); }
  int32_t max_batch() const override { return max_batch_; }
  int32_t n_ctx() const override { return n_ctx_; }
  int32_t vocab_size() const override { return 8; }

  std::vector<std::pair<int32_t, int32_t>> calls;  // (position, tokens) of each eval

 private:
  int32_t max_batch_, n_ctx_;
  std::vector<float> logits_;
};

// The calls one pass makes: the prompt in max_batch pieces from `depth`, then n_gen single
// tokens from `depth` again (the same starting point, as llama-bench's separate tests).
std::vector<std::pair<int32_t, int32_t>> one_pass(int32_t depth, int32_t n_prompt, int32_t n_gen, int32_t max_batch) {
  std::vector<std::pair<int32_t, int32_t>> calls;
  for (int32_t done = 0; done < n_prompt; done += max_batch) calls.emplace_back(depth + done, std::min(max_batch, n_prompt - done));
  for (int32_t i = 0; i < n_gen; ++i) calls.emplace_back(depth + i, 1);
  return calls;
}

TEST(Throughput, DepthOnceThenAWarmUpAndEachRepetition) {
  RecordingModel model(4, 64);
  const Throughput t = measure_throughput(model, 10, 3, 2, 9);
  std::vector<std::pair<int32_t, int32_t>> expected = {{0, 4}, {4, 4}, {8, 1}};  // depth 9, untimed
  for (int pass = 0; pass < 3; ++pass)  // warm-up + 2 repetitions
    for (auto call : one_pass(9, 10, 3, 4)) expected.push_back(call);
  EXPECT_EQ(model.calls, expected);
  EXPECT_GT(t.prompt_tok_s, 0);
  EXPECT_GT(t.gen_tok_s, 0);
}

TEST(Throughput, NoWarmUpRunsOnlyTheRepetitions) {
  RecordingModel model(4, 64);
  measure_throughput(model, 10, 3, 2, 9, /*warm_up=*/false);
  std::vector<std::pair<int32_t, int32_t>> expected = {{0, 4}, {4, 4}, {8, 1}};
  for (int pass = 0; pass < 2; ++pass)
    for (auto call : one_pass(9, 10, 3, 4)) expected.push_back(call);
  EXPECT_EQ(model.calls, expected);
}

TEST(Throughput, ASkippedTestKeepsARateOfZero) {
  RecordingModel model(8, 64);
  const Throughput prompt_only = measure_throughput(model, 16, 0, 1, 0, false);
  EXPECT_GT(prompt_only.prompt_tok_s, 0);
  EXPECT_EQ(prompt_only.gen_tok_s, 0);
  EXPECT_EQ(model.calls, one_pass(0, 16, 0, 8));
}

TEST(Throughput, RefusesWhatCannotRun) {
  RecordingModel model(8, 32);
  EXPECT_THROW(measure_throughput(model, 0, 0, 1), Error);
  EXPECT_THROW(measure_throughput(model, 8, 8, 0), Error);
  EXPECT_THROW(measure_throughput(model, 8, 8, 1, 30), Error);  // 30 + 8 > 32
  EXPECT_TRUE(model.calls.empty());
}

}  // namespace
}  // namespace orchard::model
