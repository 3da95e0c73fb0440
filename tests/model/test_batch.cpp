// One Forward serving several sequences in one pass (run_batch) against each sequence run alone
// on a Forward of its own: sequences start at different rounds, so a batch mixes prompt chunks
// with decode tokens at different positions; logits agree and greedy tokens are identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model_files.h"

namespace orchard {
namespace {

using model::TokenId;

struct Case {
  std::string arch, type;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.arch + "_" + info.param.type;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

// RMS of the difference relative to the RMS of the logits alone. A row's products are the same
// arithmetic whether it is alone or stacked with others, except that the kernels and the
// attention may order the float32 additions of several rows differently: f32 measured ≤ 2.9e-6
// (deepseek2, AVX-512), so 1e-5. Quantized types round each row's activations by themselves and
// add integers, but a model's float products (latent attention's per-head attn_k_b and attn_v_b
// in a Q8_0 file, the attention itself) see those float differences (measured ≤ 2e-7), and the
// next rounding of activations to 8 bits can then take one element the other way: one
// quantization step, which moved deepseek2 q8_0's logits by 1.2% on AVX-512 (the same choice of
// experts; 0 elsewhere). Half the distance the type keeps from float64 (6%, test_forward.cpp),
// so 3e-2 for quantized types: a batching bug (a row reading another's cache or position) moves
// the logits by tens of percent.
double tolerance(const std::string& type) { return type == "f32" ? 1e-5 : 3e-2; }

double relative_error(const float* got, const float* want, int32_t n) {
  double sum_want = 0, sum_err = 0;
  for (int32_t i = 0; i < n; ++i) {
    sum_want += static_cast<double>(want[i]) * want[i];
    sum_err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
  }
  return std::sqrt(sum_err / sum_want);
}

TokenId greedy(const float* logits, int32_t n) { return static_cast<TokenId>(std::max_element(logits, logits + n) - logits); }

// What one sequence does: its prompt in these chunks from round `start` on, then `decode`
// greedy tokens, one per round.
struct Script {
  int32_t sequence;  // in the batched Forward
  std::vector<TokenId> prompt;
  std::vector<int32_t> chunks;
  int32_t start;
  int32_t decode;
};

struct State {
  size_t chunk = 0;
  int32_t pos = 0;
  std::vector<TokenId> generated;
  bool done(const Script& s) const { return chunk == s.chunks.size() && static_cast<int32_t>(generated.size()) == s.decode; }
};

// The next step of a script in `state`: a prompt chunk or the last token generated.
std::span<const TokenId> next_tokens(const Script& s, const State& state) {
  if (state.chunk < s.chunks.size()) return std::span(s.prompt).subspan(static_cast<size_t>(state.pos), s.chunks[state.chunk]);
  return std::span(state.generated).last(1);
}

void record(const Script& s, State& state, int32_t n, const float* logits, int32_t vocab) {
  state.pos += n;
  if (state.chunk < s.chunks.size() && ++state.chunk < s.chunks.size()) return;  // mid-prompt: no token yet
  state.generated.push_back(greedy(logits, vocab));
}

class BatchVsAlone : public ::testing::TestWithParam<Case> {};

TEST_P(BatchVsAlone, EverySequenceGetsItsLogitsAlone) {
  const Case& c = GetParam();
  auto file = model::gguf::Reader::open(testing::synthetic_model(c.arch, "tiny", c.type));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  const int32_t vocab = config.vocab_size;

  // Sequence numbers out of order and one of the five unused, so logits(i) must follow the steps.
  const std::vector<Script> scripts = {
      {3, {1, 17, 250, 3, 99, 512, 42, 7, 300, 11, 64}, {5, 6}, 0, 8},
      {0, {1, 900, 33}, {3}, 0, 10},
      {4, {1, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 5}, 2, 6},
      {1, {1}, {1}, 4, 5},
  };
  model::Forward batched(weights, 64, 16, pool, nullptr, 5);
  std::vector<std::unique_ptr<model::Forward>> alone;
  for (size_t i = 0; i < scripts.size(); ++i) alone.push_back(std::make_unique<model::Forward>(weights, 64, 16, pool));
  std::vector<State> in_batch(scripts.size()), by_itself(scripts.size());

  double worst = 0;
  int mixed_rounds = 0;
  for (int32_t round = 0;; ++round) {
    std::vector<model::SequenceStep> steps;
    std::vector<size_t> owner;
    bool prompt = false, decode = false;
    // Last script first, so step order differs from sequence order too.
    for (size_t i = scripts.size(); i-- > 0;) {
      if (round < scripts[i].start || in_batch[i].done(scripts[i])) continue;
      steps.push_back({scripts[i].sequence, next_tokens(scripts[i], in_batch[i]), in_batch[i].pos});
      owner.push_back(i);
      (in_batch[i].chunk < scripts[i].chunks.size() ? prompt : decode) = true;
    }
    if (steps.empty()) break;
    mixed_rounds += prompt && decode;
    batched.run_batch(steps);
    for (size_t k = 0; k < steps.size(); ++k) {
      const size_t i = owner[k];
      const auto tokens = next_tokens(scripts[i], by_itself[i]);
      alone[i]->run(tokens, nullptr, static_cast<int32_t>(tokens.size()), by_itself[i].pos);
      const double error = relative_error(batched.logits(static_cast<int32_t>(k)), alone[i]->logits(), vocab);
      worst = std::max(worst, error);
      EXPECT_LT(error, tolerance(c.type)) << "round " << round << " script " << i;
      record(scripts[i], in_batch[i], static_cast<int32_t>(steps[k].tokens.size()), batched.logits(static_cast<int32_t>(k)), vocab);
      record(scripts[i], by_itself[i], static_cast<int32_t>(tokens.size()), alone[i]->logits(), vocab);
    }
  }
  EXPECT_GE(mixed_rounds, 3);
  for (size_t i = 0; i < scripts.size(); ++i) {
    EXPECT_EQ(in_batch[i].generated, by_itself[i].generated) << "script " << i;
    EXPECT_EQ(static_cast<int32_t>(in_batch[i].generated.size()), scripts[i].decode);
  }
  std::printf("worst relative RMS difference %.3g (tolerance %.3g)\n", worst, tolerance(c.type));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::string arch : {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "deepseek2", "gpt-oss"})
    for (std::string type : {"f32", "q8_0", "q4_k_m"}) cases.push_back({arch, type});
  // Q4_0's interleaved kernel has paths of its own for prompts and a step of several sequences.
  cases.push_back({"llama", "q4_0"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, BatchVsAlone, ::testing::ValuesIn(all_cases()), case_name);

// A refused batch names what is wrong and leaves every sequence as it was.
TEST(RunBatch, RefusesBadStepsWithoutSideEffects) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("llama", "tiny", "f32"));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  model::Forward forward(weights, 16, 4, pool, nullptr, 2);
  model::Forward reference(weights, 16, 4, pool, nullptr, 2);

  const std::vector<TokenId> a = {1, 20, 30}, b = {1, 40}, five = {1, 2, 3, 4, 5}, bad = {1, 5000};
  for (const model::SequenceStep& step : {model::SequenceStep{0, a, 0}, model::SequenceStep{1, b, 0}}) {
    forward.run_batch(std::span(&step, 1));
    reference.run_batch(std::span(&step, 1));
  }

  auto refused = [&](std::vector<model::SequenceStep> steps, const std::string& words) {
    try {
      forward.run_batch(steps);
      ADD_FAILURE() << "accepted a batch that should name: " << words;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("[model] ", 0), 0u) << what;
      EXPECT_NE(what.find(words), std::string::npos) << what;
    }
  };
  refused({}, "at least one step");
  refused({{2, b, 3}}, "sequence 2");
  refused({{-1, b, 3}}, "sequence -1");
  refused({{0, b, 3}, {0, b, 5}}, "both name sequence 0");
  refused({{0, {}, 3}}, "no tokens");
  refused({{0, b, 3}, {1, a, 2}}, "5 positions");
  refused({{0, five, 3}}, "5 positions");
  refused({{1, b, 15}}, "do not fit the context of 16");
  refused({{1, b, -1}}, "do not fit");
  refused({{0, b, 3}, {1, bad, 2}}, "token id 5000");

  const TokenId next_a = 7, next_b = 8;
  const std::vector<model::SequenceStep> second = {{1, std::span(&next_b, 1), 2}, {0, std::span(&next_a, 1), 3}};
  forward.run_batch(second);
  reference.run_batch(second);
  for (int32_t i = 0; i < 2; ++i)
    EXPECT_EQ(relative_error(forward.logits(i), reference.logits(i), config.vocab_size), 0.0) << "step " << i;
}

// A pipeline's prompt chunks before the last skip the output head: the last chunk's logits are
// those of a pass that computed every chunk's, and a skipped pass leaves the previous logits.
TEST(RunBatch, ChunksWithoutLogitsGiveTheSameLastLogits) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("llama", "tiny", "f32"));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  model::Forward skipping(weights, 16, 4, pool);
  model::Forward reference(weights, 16, 4, pool);
  const std::vector<TokenId> first = {1, 20, 30, 40}, second = {50, 60, 70};
  const model::SequenceStep a{0, first, 0}, b{0, second, 4};
  reference.run_batch(std::span(&a, 1));
  const std::vector<float> after_first(reference.logits(0), reference.logits(0) + config.vocab_size);
  skipping.run_batch(std::span(&a, 1));
  skipping.run_batch(std::span(&b, 1), nullptr, false);
  EXPECT_EQ(relative_error(skipping.logits(0), after_first.data(), config.vocab_size), 0.0);
  reference.run_batch(std::span(&b, 1));
  model::Forward fresh(weights, 16, 4, pool);
  fresh.run_batch(std::span(&a, 1), nullptr, false);
  fresh.run_batch(std::span(&b, 1));
  EXPECT_EQ(relative_error(fresh.logits(0), reference.logits(0), config.vocab_size), 0.0);
}

}  // namespace
}  // namespace orchard
