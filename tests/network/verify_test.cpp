// The trust check on a real (synthetic) model: the output an honest node generated, greedy or
// sampled, passes with every token confirmed; a token the model would not have produced is
// caught at its index. The producer here is a plain decode loop on a Forward of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model_files.h"
#include "model/sampler.h"
#include "model/generate.h"
#include "network/coordinator.h"
#include "network/job_request.h"
#include "network/token_check.h"
#include "network/verify.h"

namespace orchard::network {
namespace {

using model::TokenId;

class VerifyTest : public ::testing::TestWithParam<std::string> {
 protected:
  VerifyTest()
      : file_(model::gguf::Reader::open(testing::synthetic_model("llama", "tiny", GetParam()))),
        config_(model::ModelConfig::from_gguf(file_)),
        weights_(file_, config_, model::Shard::whole(config_), {}),
        pool_(2),
        producer_(weights_, 64, 16, pool_),
        checker_(weights_, 64, 64, pool_) {}

  // Decodes n tokens after the prompt, choosing each with `choose(logits)`; also keeps each
  // step's logits.
  template <class Choose>
  std::vector<TokenId> produce(int n, Choose choose) {
    producer_.run(prompt_, nullptr, static_cast<int32_t>(prompt_.size()), 0);
    std::vector<TokenId> out;
    for (int i = 0; i < n; ++i) {
      logits_.emplace_back(producer_.logits(), producer_.logits() + config_.vocab_size);
      out.push_back(choose(producer_.logits()));
      producer_.run(std::span<const TokenId>(&out.back(), 1), nullptr, 1, static_cast<int32_t>(prompt_.size() + out.size() - 1));
    }
    return out;
  }

  TokenId least_likely(size_t step) const {
    return static_cast<TokenId>(std::min_element(logits_[step].begin(), logits_[step].end()) - logits_[step].begin());
  }

  model::gguf::Reader file_;
  model::ModelConfig config_;
  model::ModelWeights weights_;
  core::ThreadPool pool_;
  model::Forward producer_, checker_;
  std::vector<TokenId> prompt_ = {1, 17, 42, 99, 5, 23};
  std::vector<std::vector<float>> logits_;
};

TEST_P(VerifyTest, GreedyOutputIsConfirmedAndAChangedTokenIsCaught) {
  std::vector<TokenId> output = produce(20, [&](const float* l) {
    return static_cast<TokenId>(std::max_element(l, l + config_.vocab_size) - l);
  });
  model::SamplerOptions greedy;
  CheckResult honest = check_output(checker_, prompt_, output, greedy);
  EXPECT_TRUE(honest.ok);
  EXPECT_EQ(honest.checked, 20);
  EXPECT_EQ(honest.mismatch_at, -1);

  output[13] = least_likely(13);
  CheckResult forged = check_output(checker_, prompt_, output, greedy);
  EXPECT_FALSE(forged.ok);
  EXPECT_EQ(forged.mismatch_at, 13);
  EXPECT_EQ(forged.checked, 13);
}

TEST_P(VerifyTest, SampledOutputLiesInTheSamplersSupport) {
  model::SamplerOptions sampling;
  sampling.temperature = 0.9f;
  sampling.top_k = 8;
  sampling.seed = 7;
  model::Sampler sampler(sampling, config_.vocab_size);
  std::vector<TokenId> output = produce(20, [&](const float* l) { return sampler.sample(l); });
  CheckResult honest = check_output(checker_, prompt_, output, sampling);
  EXPECT_TRUE(honest.ok);
  EXPECT_EQ(honest.checked, 20);

  // Outside the top 8: no seed could have sampled it.
  output[4] = least_likely(4);
  CheckResult forged = check_output(checker_, prompt_, output, sampling);
  EXPECT_FALSE(forged.ok);
  EXPECT_EQ(forged.mismatch_at, 4);
}

INSTANTIATE_TEST_SUITE_P(Types, VerifyTest, ::testing::Values("f32", "q8_0", "q4_0"));

// The coordinator's token check (token_check.h) on what a node really reports: generations of a
// real (synthetic, so often odd) model, sampled at temperature 1, pass the check with the model's
// own vocabulary, counted at their ids less those that show no text; the same with one more id
// than was generated is refused.
class TokenCheckTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenCheckTest, AnHonestGenerationPassesAndPaddingIsRefused) {
  const std::string path = testing::synthetic_model(GetParam(), "tiny", "f32");
  const ModelVocab vocab = load_vocab(path);
  const model::Tokenizer& tok = *vocab.tokenizer;
  auto file = model::gguf::Reader::open(path);
  const auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  model::Forward forward(weights, 96, 16, pool);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const JobRequest request = JobRequest::from_json({{"prompt", "hello world, once more"}, {"max_tokens", 48},
                                                      {"temperature", 1.0}, {"top_k", 0}, {"top_p", 1.0}, {"seed", seed}});
    const auto prompt = prompt_tokens(tok, vocab.arch, request);
    model::LocalModel local(forward);
    const auto r = model::generate(local, tok, prompt, generation_options(request, forward.n_ctx(), prompt.size()));
    nlohmann::json result = {{"text", r.text}, {"prompt_ids", prompt}, {"output_ids", r.tokens}};
    const CheckedTokens checked = check_reported_tokens(request, result, &vocab);
    EXPECT_EQ(checked.prompt, static_cast<int64_t>(prompt.size()));
    const auto shown = std::count_if(r.tokens.begin(), r.tokens.end(), [&](TokenId id) {
      const auto kind = tok.token_kind(id);
      return tok.is_end_of_generation(id) || (kind != model::TokenKind::Control && kind != model::TokenKind::Unused);
    });
    EXPECT_EQ(checked.completion, shown);
    if (r.stopped_at_end) continue;  // nothing may follow the end
    // One more id, shown in no text: the ids no longer decode to it.
    result["output_ids"].push_back(r.tokens.empty() ? 100 : r.tokens.back());
    EXPECT_THROW(check_reported_tokens(request, result, &vocab), ApiError) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenCheckTest, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace orchard::network
