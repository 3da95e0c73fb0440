// What a node agent reads out of a job: a request of the wrong shape is an Error naming the
// field (the agent hands the job back with it), never a JSON library exception that would end
// the agent; a good one gives the tokens and options the client asked for.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/tokenizer/vocab_builder.h"
#include "network/job_request.h"

namespace orchard::network {
namespace {

using nlohmann::json;

const model::Tokenizer& tokenizer() {
  static const model::Tokenizer t = model::Tokenizer::from_vocab(model::build_vocab(model::VocabStyle::Qwen2Bpe, 600));
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JobRequest, APromptGivesItsTokensAndTheOptionsAsked) {
  const json request = {{"prompt", "hello there"}, {"max_tokens", 7}, {"temperature", 0.5}, {"top_k", 3}, {"seed", 9}};
  EXPECT_EQ(prompt_tokens(tokenizer(), "qwen2", request), tokenizer().encode("hello there", tokenizer().adds_bos(), false));
  const auto options = generation_options(request, 64, 10);
  EXPECT_EQ(options.max_tokens, 7);
  EXPECT_FLOAT_EQ(options.sampling.temperature, 0.5f);
  EXPECT_EQ(options.sampling.top_k, 3);
  EXPECT_EQ(options.sampling.seed, 9u);
  EXPECT_EQ(generation_options(request, 12, 10).max_tokens, 2) << "capped by what the context leaves";
}

TEST(JobRequest, AFieldOfTheWrongTypeIsAnErrorNamingIt) {
  EXPECT_NE(error_of([] { sampling_from(json{{"temperature", "hot"}}); }).find("'temperature'"), std::string::npos);
  EXPECT_NE(error_of([] { generation_options(json{{"max_tokens", 2.5}}, 64, 1); }).find("'max_tokens'"),
            std::string::npos);
  EXPECT_NE(error_of([] { prompt_tokens(tokenizer(), "qwen2", json{{"prompt", 42}}); }).find("'prompt'"),
            std::string::npos);
  EXPECT_NE(error_of([] { prompt_tokens(tokenizer(), "qwen2", json{{"messages", "hi"}}); }).find("'messages'"),
            std::string::npos);
  EXPECT_NE(error_of([] { prompt_tokens(tokenizer(), "qwen2", json{{"messages", {{{"role", 1}}}}}); }).find("'role'"),
            std::string::npos);
  EXPECT_NE(error_of([] { prompt_tokens(tokenizer(), "qwen2", json(2)); }).find("JSON object"), std::string::npos);
}

TEST(JobRequest, OutOfRangeValuesAreErrors) {
  EXPECT_NE(error_of([] { sampling_from(json{{"temperature", -1}}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([] { sampling_from(json{{"top_k", -2}}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([] { generation_options(json{{"max_tokens", 0}}, 64, 1); }).find("at least 1"), std::string::npos);
  EXPECT_NE(error_of([] { generation_options(json::object(), 8, 8); }).find("fills the context"), std::string::npos);
}

}  // namespace
}  // namespace orchard::network
