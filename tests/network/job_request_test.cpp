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

JobRequest read(const json& j) { return JobRequest::from_json(j); }

TEST(JobRequest, APromptGivesItsTokensAndTheOptionsAsked) {
  const JobRequest request = read({{"prompt", "hello there"}, {"max_tokens", 7}, {"temperature", 0.5}, {"top_k", 3}, {"seed", 9}});
  EXPECT_EQ(prompt_tokens(tokenizer(), "qwen2", request), tokenizer().encode("hello there", tokenizer().adds_bos(), false));
  const auto options = generation_options(request, 64, 10);
  EXPECT_EQ(options.max_tokens, 7);
  EXPECT_FLOAT_EQ(options.sampling.temperature, 0.5f);
  EXPECT_EQ(options.sampling.top_k, 3);
  EXPECT_EQ(options.sampling.seed, 9u);
  EXPECT_EQ(generation_options(request, 12, 10).max_tokens, 2) << "capped by what the context leaves";
  EXPECT_EQ(prompt_token_bound(request), 11 + 4) << "its bytes and a plain prompt's markers";
}

// What the coordinator stores and a node receives reads back as it was, a chat included.
TEST(JobRequest, StoredShapeReadsBackTheSame) {
  const json chat = {{"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
                     {"max_tokens", 5}, {"temperature", 0.25}, {"top_p", 0.5}, {"top_k", 7}, {"seed", 18446744073709551615ull}};
  const JobRequest r = read(chat);
  EXPECT_FALSE(r.prompt);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_EQ(r.seed, 18446744073709551615ull);
  EXPECT_EQ(r.to_json(), chat);
  EXPECT_EQ(read(r.to_json()).to_json(), chat);
  // 32 for the assistant's header, 16 a message, and the roles' and contents' bytes.
  EXPECT_EQ(prompt_token_bound(r), 32 + 16 + 6 + 8 + 16 + 4 + 2);
  EXPECT_EQ(read(json::object()).prompt, std::string()) << "neither: an empty prompt";
}

TEST(JobRequest, AFieldOfTheWrongTypeIsAnErrorNamingIt) {
  EXPECT_NE(error_of([] { read({{"temperature", "hot"}}); }).find("'temperature'"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"max_tokens", 2.5}}); }).find("'max_tokens'"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"prompt", 42}}); }).find("'prompt'"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"messages", "hi"}}); }).find("'messages'"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"messages", {{{"role", 1}}}}}); }).find("'role'"), std::string::npos);
  EXPECT_NE(error_of([] { read(json(2)); }).find("JSON object"), std::string::npos);
}

TEST(JobRequest, OutOfRangeValuesAreErrors) {
  EXPECT_NE(error_of([] { read({{"temperature", -1}}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"top_k", -2}}); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([] { read({{"max_tokens", 0}}); }).find("at least 1"), std::string::npos);
  EXPECT_NE(error_of([] { generation_options(read(json::object()), 8, 8); }).find("fills the context"), std::string::npos);
}

}  // namespace
}  // namespace orchard::network
