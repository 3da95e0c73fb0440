#include "serve/openai/schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace orchard::serve::openai {
namespace {

using nlohmann::json;

ApiError error_of(Endpoint endpoint, const std::string& body) {
  try {
    parse_request(endpoint, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

std::string chat_with(const std::string& extra) {
  return R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(Schema, ParsesAChatRequest) {
  ApiRequest r = parse_request(Endpoint::ChatCompletions, R"({
    "model": "tiny", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "developer", "content": "rules"},
                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                 {"role": "assistant", "content": null}],
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": -1, "stop": ["x", ""], "n": 1,
    "user": "ignored", "presence_penalty": 0, "ignore_eos": true, "reasoning_effort": "high"})");
  EXPECT_EQ(r.reasoning_effort, "high");
  EXPECT_EQ(r.model, "tiny");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(Schema, DefaultsFollowOpenAI) {
  ApiRequest r = parse_request(Endpoint::ChatCompletions, chat_with(""));
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.stream);
  // max_completion_tokens wins over max_tokens; null means "default".
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat_with(R"("max_tokens": 3, "max_completion_tokens": 5)")).max_tokens, 5);
  EXPECT_FALSE(parse_request(Endpoint::ChatCompletions, chat_with(R"("max_tokens": null, "stop": null)")).max_tokens);
}

TEST(Schema, ParsesEveryPromptForm) {
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": "text"})").prompt, "text");
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": ["text"]})").prompt, "text");
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": [1, 2, 3]})").prompt_tokens, (std::vector<model::TokenId>{1, 2, 3}));
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": [[4, 5]]})").prompt_tokens, (std::vector<model::TokenId>{4, 5}));
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt": "a", "stop": "\n"})").stop, std::vector<std::string>{"\n"});
}

struct BadInput {
  Endpoint endpoint;
  std::string body;
  std::string param;  // expected "param" of the error
};

TEST(Schema, EveryBadInputIsA400NamingTheParameter) {
  const Endpoint chat = Endpoint::ChatCompletions, completions = Endpoint::Completions;
  const std::vector<BadInput> cases = {
      {chat, "", ""},
      {chat, "{", ""},
      {chat, "not json", ""},
      {chat, "[1, 2]", ""},
      {chat, "\"text\"", ""},
      {chat, R"({"messages": [{"role": "user", "content": "hi"}]} trailing)", ""},
      {chat, R"({"model": 3, "messages": [{"role": "user", "content": "hi"}]})", "model"},
      {chat, R"({"model": "m"})", "messages"},
      {chat, R"({"messages": "hi"})", "messages"},
      {chat, R"({"messages": []})", "messages"},
      {chat, R"({"messages": [3]})", "messages[0]"},
      {chat, R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {chat, R"({"messages": [{"role": 1, "content": "hi"}]})", "messages[0].role"},
      {chat, R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role"},
      {chat, R"({"messages": [{"role": "tool", "content": "hi"}]})", "messages[0].tool_call_id"},
      {chat, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", "messages[0].content[0].type"},
      {chat, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text"},
      {chat, R"({"messages": [{"role": "user", "content": ["hi"]}]})", "messages[0].content[0]"},
      {chat, chat_with(R"("max_tokens": "10")"), "max_tokens"},
      {chat, chat_with(R"("max_tokens": 0)"), "max_tokens"},
      {chat, chat_with(R"("max_tokens": -5)"), "max_tokens"},
      {chat, chat_with(R"("max_tokens": 2.5)"), "max_tokens"},
      {chat, chat_with(R"("max_tokens": 99999999999999999999)"), "max_tokens"},
      {chat, chat_with(R"("max_completion_tokens": true)"), "max_completion_tokens"},
      {chat, chat_with(R"("temperature": "hot")"), "temperature"},
      {chat, chat_with(R"("temperature": -0.1)"), "temperature"},
      {chat, chat_with(R"("temperature": 2.5)"), "temperature"},
      {chat, chat_with(R"("top_p": 1.5)"), "top_p"},
      {chat, chat_with(R"("top_p": [0.5])"), "top_p"},
      {chat, chat_with(R"("seed": 1.5)"), "seed"},
      {chat, chat_with(R"("seed": "42")"), "seed"},
      {chat, chat_with(R"("stop": 3)"), "stop"},
      {chat, chat_with(R"("stop": ["a", 3])"), "stop[1]"},
      {chat, chat_with(R"("stop": ["a", "b", "c", "d", "e"])"), "stop"},
      {chat, chat_with(R"("stream": "yes")"), "stream"},
      {chat, chat_with(R"("stream_options": true)"), "stream_options"},
      {chat, chat_with(R"("stream_options": {"include_usage": 1})"), "stream_options.include_usage"},
      {chat, chat_with(R"("n": 2)"), "n"},
      {chat, chat_with(R"("logprobs": true)"), "logprobs"},
      {chat, chat_with(R"("tools": [{"type": "function"}])"), "tools[0].function"},
      {chat, chat_with(R"("tools": [{"type": "retrieval"}])"), "tools[0].type"},
      {completions, R"({"prompt": "x", "tools": []})", "tools"},
      {chat, chat_with(R"("response_format": {"type": "xml"})"), "response_format.type"},
      {chat, chat_with(R"("top_k": -1)"), "top_k"},
      {chat, chat_with(R"("reasoning_effort": "max")"), "reasoning_effort"},
      {chat, chat_with(R"("reasoning_effort": 3)"), "reasoning_effort"},
      {chat, chat_with(R"("min_p": 1)"), "min_p"},
      {chat, chat_with(R"("repeat_penalty": 0)"), "repeat_penalty"},
      {completions, R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
      {completions, R"({"model": "m"})", "prompt"},
      {completions, R"({"prompt": 5})", "prompt"},
      {completions, R"({"prompt": []})", "prompt"},
      {completions, R"({"prompt": ["a", "b"]})", "prompt"},
      {completions, R"({"prompt": [1, "a"]})", "prompt[1]"},
      {completions, R"({"prompt": [1, -2]})", "prompt[1]"},
      {completions, R"({"prompt": [[]]})", "prompt[0]"},
      {completions, R"({"prompt": [{}]})", "prompt[0]"},
      {completions, R"({"prompt": "a", "echo": true})", "echo"},
      {completions, R"({"prompt": "a", "logprobs": 2})", "logprobs"},
      {completions, R"({"prompt": "a", "best_of": 3})", "best_of"},
      {completions, R"({"prompt": "a", "suffix": "z"})", "suffix"},
  };
  for (const BadInput& c : cases) {
    const ApiError e = error_of(c.endpoint, c.body);
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.type(), "invalid_request_error") << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.message();
    EXPECT_FALSE(e.message().empty());
  }
}

TEST(Schema, ReasoningEffortIsLowMediumOrHigh) {
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat_with("")).reasoning_effort, "medium");
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat_with(R"("reasoning_effort": "low")")).reasoning_effort, "low");
  EXPECT_EQ(error_of(Endpoint::ChatCompletions, chat_with(R"("reasoning_effort": "Max")")).message(),
            "'reasoning_effort' must be low, medium or high, not 'Max'");
}

TEST(Schema, DeeplyNestedJsonIsRefusedWithoutCrashing) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(error_of(Endpoint::ChatCompletions, deep).status(), 400);
  const std::string deep_field = R"({"messages": )" + deep + "}";
  EXPECT_EQ(error_of(Endpoint::ChatCompletions, deep_field).status(), 400);
}

TEST(Schema, ErrorBodyHasOpenAIShape) {
  json j = json::parse(error_body(invalid_request("bad", "max_tokens")));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["code"], "invalid_request");  // always a string: one for the status when none is given
  j = json::parse(error_body(ApiError(429, "rate_limit_exceeded", "busy", {}, "queue_full")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "queue_full");
}

const ResponseMeta kMeta{"chatcmpl-1", 1700000000, "tiny"};

TEST(Schema, CompletionBodies) {
  json chat = json::parse(completion_body(Endpoint::ChatCompletions, kMeta, "hello", FinishReason::Stop, {3, 2, 1}));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["id"], "chatcmpl-1");
  EXPECT_EQ(chat["created"], 1700000000);
  EXPECT_EQ(chat["model"], "tiny");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  // cached_tokens: prompt positions taken from the prompt cache, in OpenAI's place for them.
  EXPECT_EQ(chat["usage"], json({{"prompt_tokens", 3},
                                 {"completion_tokens", 2},
                                 {"total_tokens", 5},
                                 {"prompt_tokens_details", {{"cached_tokens", 1}}}}));
  json text = json::parse(completion_body(Endpoint::Completions, kMeta, "hi", FinishReason::Length, {1, 1}));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "hi");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
}

// The JSON of each "data: " event; "[DONE]" as a string.
std::vector<json> events(const std::string& sse) {
  std::vector<json> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    const std::string e = sse.substr(at, end - at);
    EXPECT_EQ(e.rfind("data: ", 0), 0u) << e;
    const std::string data = e.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    at = end + 2;
  }
  return out;
}

TEST(Schema, ChatStreamEvents) {
  StreamWriter w(Endpoint::ChatCompletions, kMeta, true);
  std::string sse = w.text("Hel");  // one statement each: the order of a + b's operands is unspecified
  sse += w.text("lo");
  sse += w.end(FinishReason::Stop, {3, 2});
  auto e = events(sse);
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(e[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_TRUE(e[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(e[0]["usage"].is_null());
  EXPECT_EQ(e[1]["choices"][0]["delta"], json({{"content", "lo"}}));
  EXPECT_EQ(e[2]["choices"][0]["delta"], json::object());
  EXPECT_EQ(e[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(e[3]["choices"].empty());
  EXPECT_EQ(e[3]["usage"]["total_tokens"], 5);
  EXPECT_EQ(e[4], "[DONE]");
}

TEST(Schema, CompletionStreamEventsWithoutUsage) {
  StreamWriter w(Endpoint::Completions, kMeta, false);
  std::string sse = w.text("a");
  sse += w.end(FinishReason::Length, {1, 1});
  auto e = events(sse);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0]["object"], "text_completion");
  EXPECT_EQ(e[0]["choices"][0]["text"], "a");
  EXPECT_FALSE(e[0].contains("usage"));
  EXPECT_EQ(e[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(e[2], "[DONE]");
  EXPECT_EQ(StreamWriter::keep_alive().front(), ':');  // an SSE comment
}

TEST(Schema, ModelsBody) {
  ModelInfo info;
  info.id = "tiny";
  info.architecture = "llama";
  info.created = 1700000000;
  json j = json::parse(models_body(info));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["owned_by"], "orchard");
}

}  // namespace
}  // namespace orchard::serve::openai
