#include "serve/ollama/schema.h"

#include "serve/structured/grammar.h"

#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

namespace orchard::serve::ollama {
namespace {

using nlohmann::json;

openai::ApiError error_of(Route route, const std::string& body) {
  try {
    parse_request(route, body);
  } catch (const openai::ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return openai::ApiError(0, "", "");
}

std::string chat_with(const std::string& extra) {
  return R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(OllamaSchema, ChatTakesOllamasDefaultsAndStreams) {
  const Request r = parse_request(Route::Chat, chat_with(""));
  EXPECT_FALSE(r.load_only);
  const openai::ApiRequest& g = r.generation;
  EXPECT_EQ(g.endpoint, openai::Endpoint::ChatCompletions);
  EXPECT_EQ(g.model, "m");
  ASSERT_EQ(g.messages.size(), 1u);
  EXPECT_EQ(g.messages[0].role, "user");
  EXPECT_EQ(g.messages[0].content, "hi");
  EXPECT_TRUE(g.stream);  // Ollama streams unless told not to
  EXPECT_FALSE(g.seeded);
  EXPECT_FALSE(g.max_tokens);
  EXPECT_EQ(g.default_max_tokens, 0);  // num_predict -1: up to the context
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.8f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(g.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(g.sampling.repeat_last_n, 64);
}

TEST(OllamaSchema, OptionsAreHonoured) {
  const Request r = parse_request(Route::Chat, chat_with(R"("stream": false, "keep_alive": "5m", "options": {
      "temperature": 0, "top_k": 7, "top_p": 0.5, "min_p": 0.1, "seed": 42, "num_predict": 12,
      "stop": ["a", "", "bc", "d", "e", "f"], "repeat_penalty": 1.0, "repeat_last_n": -1, "num_ctx": 4096, "mirostat": 0})"));
  const openai::ApiRequest& g = r.generation;
  EXPECT_FALSE(g.stream);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.0f);
  EXPECT_EQ(g.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_TRUE(g.seeded);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_EQ(g.default_max_tokens, 12);  // a limit the context may shorten, never an error
  EXPECT_FALSE(g.max_tokens);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"a", "bc", "d", "e", "f"}));  // more than OpenAI's 4
  EXPECT_FLOAT_EQ(g.sampling.repeat_penalty, 1.0f);
  EXPECT_EQ(g.sampling.repeat_last_n, std::numeric_limits<int32_t>::max());
}

TEST(OllamaSchema, NegativeSeedIsRandomAndNonPositiveNumPredictHasNoLimit) {
  for (const char* n : {"-1", "-2", "0"}) {
    const Request r = parse_request(Route::Chat, chat_with(std::string(R"("options": {"seed": -1, "num_predict": )") + n + "}"));
    EXPECT_FALSE(r.generation.seeded);
    EXPECT_EQ(r.generation.default_max_tokens, 0) << n;
  }
}

TEST(OllamaSchema, GenerateRendersThePromptAsAChatUnlessRaw) {
  Request r = parse_request(Route::Generate, R"({"model": "m:latest", "prompt": "why?", "system": "be brief"})");
  EXPECT_EQ(r.generation.model, "m");  // the :latest tag names the same model
  EXPECT_EQ(r.generation.endpoint, openai::Endpoint::ChatCompletions);
  ASSERT_EQ(r.generation.messages.size(), 2u);
  EXPECT_EQ(r.generation.messages[0].role, "system");
  EXPECT_EQ(r.generation.messages[0].content, "be brief");
  EXPECT_EQ(r.generation.messages[1].role, "user");
  EXPECT_EQ(r.generation.messages[1].content, "why?");

  r = parse_request(Route::Generate, R"({"model": "m", "prompt": "<s>[INST] x", "raw": true})");
  EXPECT_EQ(r.generation.endpoint, openai::Endpoint::Completions);
  EXPECT_EQ(r.generation.prompt, "<s>[INST] x");
  EXPECT_TRUE(r.generation.messages.empty());
  EXPECT_EQ(r.generation.default_max_tokens, 0);  // not OpenAI's 16 for completions
}

TEST(OllamaSchema, NoPromptOrMessagesIsALoadRequest) {
  EXPECT_TRUE(parse_request(Route::Generate, R"({"model": "m"})").load_only);
  EXPECT_TRUE(parse_request(Route::Generate, R"({"model": "m", "prompt": ""})").load_only);
  EXPECT_TRUE(parse_request(Route::Chat, R"({"model": "m", "messages": []})").load_only);
  EXPECT_TRUE(parse_request(Route::Chat, R"({"model": "m"})").load_only);
}

TEST(OllamaSchema, BadInputIsA400NamingTheField) {
  struct Case {
    Route route;
    std::string body, param, message_part;
  };
  const std::vector<Case> cases = {
      {Route::Chat, "{", "", "not valid JSON"},
      {Route::Chat, "[1]", "", "must be a JSON object"},
      {Route::Chat, R"({"messages": []})", "model", "'model' is required"},
      {Route::Chat, R"({"model": 3})", "model", "must be a string, not number"},
      {Route::Chat, R"({"model": ""})", "model", "must name a model"},
      {Route::Chat, R"({"model": "m", "messages": {}})", "messages", "must be an array"},
      {Route::Chat, R"({"model": "m", "messages": [3]})", "messages[0]", "must be an object"},
      {Route::Chat, R"({"model": "m", "messages": [{"content": "x"}]})", "messages[0].role", "is required"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})", "messages[0].role", "not 'robot'"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "tool"}]})", "messages[0].content", "is required"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "tool", "content": "x", "tool_name": 3}]})", "messages[0].tool_name",
       "must be a string"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "messages[0].tool_calls",
       "assistant turns"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"name": "f"}]}]})",
       "messages[0].tool_calls[0].function", "is required"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.arguments", "must be an object"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content", "is required"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content", "must be a string"},
      {Route::Chat, R"({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]})", "messages[0].images",
       "images is not supported"},
      {Route::Chat, chat_with(R"("stream": "yes")"), "stream", "must be a boolean"},
      {Route::Chat, chat_with(R"("options": [])"), "options", "must be an object"},
      {Route::Chat, chat_with(R"("options": {"temperature": "hot"})"), "options.temperature", "must be a number, not string"},
      {Route::Chat, chat_with(R"("options": {"temperature": -1})"), "options.temperature", "between 0 and"},
      {Route::Chat, chat_with(R"("options": {"top_k": 1.5})"), "options.top_k", "must be an integer"},
      {Route::Chat, chat_with(R"("options": {"top_p": 2})"), "options.top_p", "between 0 and 1"},
      {Route::Chat, chat_with(R"("options": {"min_p": 1})"), "options.min_p", "between 0 and 0.999"},
      {Route::Chat, chat_with(R"("options": {"seed": "x"})"), "options.seed", "must be an integer"},
      {Route::Chat, chat_with(R"("options": {"num_predict": 1e3})"), "options.num_predict", "must be an integer"},
      {Route::Chat, chat_with(R"("options": {"stop": [1]})"), "options.stop[0]", "must be a string"},
      {Route::Chat, chat_with(R"("options": {"stop": 5})"), "options.stop", "array of strings"},
      {Route::Chat, chat_with(R"("options": {"repeat_penalty": 0})"), "options.repeat_penalty", "must be positive"},
      {Route::Chat, chat_with(R"("options": {"repeat_last_n": -2})"), "options.repeat_last_n", "between -1 and"},
      {Route::Chat, chat_with(R"("tools": [{"type": "function"}])"), "tools[0].function", "is required"},
      {Route::Chat, chat_with(R"("tools": {})"), "tools", "must be an array"},
      {Route::Chat, chat_with(R"("format": "yaml")"), "format", "\"json\" or a JSON schema, not \"yaml\""},
      {Route::Chat, chat_with(R"("format": 3)"), "format", "JSON schema"},
      {Route::Chat, chat_with(R"("format": {"type": "object", "patternProperties": {}})"), "format", "not supported"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", "tools",
       "use /api/chat"},
      {Route::Chat, chat_with(R"("keep_alive": [])"), "keep_alive", "a duration"},
      {Route::Chat, chat_with(R"("think": "max")"), "think", R"(must be true, false, "low", "medium" or "high", not "max")"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "think": 1})", "think", R"(true, false, "low", "medium" or "high", not number)"},
      {Route::Generate, R"({"model": "m", "prompt": 5})", "prompt", "must be a string"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "raw": 1})", "raw", "must be a boolean"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "system": false})", "system", "must be a string"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "suffix": "end"})", "suffix", "not supported"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "context": [1, 2]})", "context", "not supported"},
      {Route::Generate, R"({"model": "m", "prompt": "x", "images": ["aGk="]})", "images", "not supported"},
  };
  for (const Case& c : cases) {
    const openai::ApiError e = error_of(c.route, c.body);
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body;
    EXPECT_NE(e.message().find(c.message_part), std::string::npos) << c.body << " → " << e.message();
    // The body a client gets: {"error": message}, nothing else.
    const json body = json::parse(error_body(e.message()));
    EXPECT_EQ(body, json({{"error", e.message()}}));
  }
}

TEST(OllamaSchema, EmptyFormatAndToolsAreAccepted) {
  for (const char* extra : {R"("format": "", "tools": [], "keep_alive": 300)", R"("format": null, "think": false)", R"("format": {})"}) {
    const Request r = parse_request(Route::Chat, chat_with(extra));
    EXPECT_EQ(r.generation.format, nullptr) << extra;
    EXPECT_TRUE(r.generation.tools.empty()) << extra;
  }
}

bool accepts(const structured::Grammar& g, std::string_view doc) {
  structured::Recognizer r(g);
  return r.feed(doc) && r.complete();
}

TEST(OllamaSchema, FormatConstrainsTheOutput) {
  const Request json_mode = parse_request(Route::Generate, R"({"model": "m", "prompt": "x", "format": "json"})");
  ASSERT_NE(json_mode.generation.format, nullptr);
  EXPECT_TRUE(accepts(*json_mode.generation.format, R"({"a": [1, "b"]})"));
  EXPECT_FALSE(accepts(*json_mode.generation.format, "[1]"));  // JSON mode answers with an object
  EXPECT_FALSE(accepts(*json_mode.generation.format, "hello"));

  const Request schema = parse_request(
      Route::Chat, chat_with(R"("format": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})"));
  ASSERT_NE(schema.generation.format, nullptr);
  EXPECT_TRUE(accepts(*schema.generation.format, R"({"n": 42})"));
  EXPECT_FALSE(accepts(*schema.generation.format, R"({"n": "42"})"));
  EXPECT_FALSE(accepts(*schema.generation.format, R"({})"));
}

TEST(OllamaSchema, ToolsAndToolTurnsInOllamasShape) {
  const Request r = parse_request(Route::Chat, R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
      {"role": "tool", "content": "-3 C", "tool_name": "get_weather"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "now",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})");
  const openai::ApiRequest& g = r.generation;
  ASSERT_EQ(g.tools.size(), 1u);
  EXPECT_EQ(g.tools[0].name, "get_weather");
  EXPECT_EQ(g.tool_choice, openai::ToolChoice::Auto);  // Ollama has no tool_choice: the model decides
  ASSERT_EQ(g.messages.size(), 3u);
  ASSERT_EQ(g.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(g.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(g.messages[1].tool_calls[0].arguments), json({{"city", "Oslo"}}));
  EXPECT_EQ(g.messages[2].role, "tool");
  EXPECT_EQ(g.messages[2].content, "-3 C");
}

TEST(OllamaSchema, CallsGoOutAsOllamasToolCalls) {
  const Answer chat{Route::Chat, "tiny:latest"};
  const std::vector<ChatToolCall> calls = {{"call_0", "get_weather", R"({"city": "Oslo"})"}, {"call_1", "get_time", "not json"}};
  const json chunk = json::parse(chunk_line(chat, "", calls));
  EXPECT_EQ(chunk["done"], false);
  EXPECT_EQ(chunk["message"]["tool_calls"], json::parse(R"([
      {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Oslo"}}},
      {"function": {"index": 1, "name": "get_time", "arguments": "not json"}}])"));
  const json last = json::parse(final_line(chat, "", FinishReason::Stop, Usage{}, 1, calls));
  EXPECT_EQ(last["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(last["done_reason"], "stop");
  EXPECT_FALSE(json::parse(chunk_line(chat, "x"))["message"].contains("tool_calls"));
}

// think: a boolean, or gpt-oss's reasoning effort (which thinks); reasoning goes out as the chat
// message's "thinking" and generate's top-level "thinking".
TEST(OllamaSchema, ThinkAndThinking) {
  EXPECT_TRUE(parse_request(Route::Chat, chat_with("")).generation.thinking);
  EXPECT_FALSE(parse_request(Route::Chat, chat_with(R"("think": false)")).generation.thinking);
  const Request high = parse_request(Route::Generate, R"({"model": "m", "prompt": "x", "think": "high"})");
  EXPECT_TRUE(high.generation.thinking);
  EXPECT_EQ(high.generation.reasoning_effort, "high");
  EXPECT_EQ(parse_request(Route::Chat, chat_with(R"("think": true)")).generation.reasoning_effort, "medium");

  const Answer chat{Route::Chat, "tiny:latest"}, generate{Route::Generate, "tiny:latest"};
  EXPECT_EQ(json::parse(chunk_line(chat, "", {}, "Hm."))["message"],
            json::parse(R"({"role": "assistant", "content": "", "thinking": "Hm."})"));
  EXPECT_FALSE(json::parse(chunk_line(chat, "Hi"))["message"].contains("thinking"));
  const json last = json::parse(final_line(generate, "4", FinishReason::Stop, Usage{}, 1, {}, "2 + 2"));
  EXPECT_EQ(last["response"], "4");
  EXPECT_EQ(last["thinking"], "2 + 2");
  EXPECT_FALSE(json::parse(final_line(generate, "4", FinishReason::Stop, Usage{}, 1)).contains("thinking"));
}

TEST(OllamaSchema, ShowNamesTheModelEitherWay) {
  EXPECT_EQ(parse_show_request(R"({"model": "tiny:latest"})"), "tiny");
  EXPECT_EQ(parse_show_request(R"({"name": "tiny"})"), "tiny");
  EXPECT_THROW(parse_show_request("{}"), openai::ApiError);
  EXPECT_THROW(parse_show_request(R"({"model": 1})"), openai::ApiError);
}

ModelInfo tiny_info() {
  ModelInfo info;
  info.id = "tiny";
  info.architecture = "llama";
  info.created = 1700000000;  // 2023-11-14T22:13:20Z
  info.file_bytes = 3931776;
  info.parameters = 3672320;
  info.file_type = 15;
  info.metadata_json = R"({"general.architecture": "llama", "llama.context_length": 512})";
  return info;
}

TEST(OllamaSchema, LinesCarryOllamasFieldsInNanoseconds) {
  const Answer chat{Route::Chat, "tiny:latest"};
  const json chunk = json::parse(chunk_line(chat, "Hel"));
  EXPECT_EQ(chunk["model"], "tiny:latest");
  EXPECT_EQ(chunk["message"], json({{"role", "assistant"}, {"content", "Hel"}}));
  EXPECT_EQ(chunk["done"], false);
  const std::string created = chunk["created_at"];
  EXPECT_EQ(created.size(), std::string("2026-12-01T21:51:37.606672848Z").size()) << created;
  EXPECT_EQ(created.back(), 'Z');

  Usage usage{19, 5, 0, 0.25, 1.5};
  const std::string line = final_line(chat, "", FinishReason::Length, usage, 2'000'000'000);
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line
  const json last = json::parse(line);
  EXPECT_EQ(last["done"], true);
  EXPECT_EQ(last["done_reason"], "length");
  EXPECT_EQ(last["prompt_eval_count"], 19);
  EXPECT_EQ(last["eval_count"], 5);
  EXPECT_EQ(last["prompt_eval_duration"], 250'000'000);
  EXPECT_EQ(last["eval_duration"], 1'500'000'000);
  EXPECT_EQ(last["total_duration"], 2'000'000'000);
  EXPECT_EQ(last["load_duration"], 0);

  const json generated = json::parse(final_line({Route::Generate, "tiny:latest"}, "whole text", FinishReason::Stop, usage, 1));
  EXPECT_EQ(generated["response"], "whole text");
  EXPECT_EQ(generated["done_reason"], "stop");
  EXPECT_FALSE(generated.contains("message"));

  const json load = json::parse(load_line({Route::Generate, "tiny:latest"}));
  EXPECT_EQ(load["done"], true);
  EXPECT_EQ(load["done_reason"], "load");
  EXPECT_EQ(load["response"], "");
}

TEST(OllamaSchema, ModelDescriptions) {
  const ModelInfo info = tiny_info();
  EXPECT_EQ(model_name(info), "tiny:latest");
  ModelInfo tagged = info;
  tagged.id = "tiny:q8";
  EXPECT_EQ(model_name(tagged), "tiny:q8");

  const json tags = json::parse(tags_body(info));
  ASSERT_EQ(tags["models"].size(), 1u);
  const json& m = tags["models"][0];
  EXPECT_EQ(m["name"], "tiny:latest");
  EXPECT_EQ(m["size"], 3931776);
  EXPECT_EQ(m["modified_at"], "2023-11-14T22:13:20.000000000Z");
  EXPECT_EQ(m["details"]["family"], "llama");
  EXPECT_EQ(m["details"]["format"], "gguf");
  EXPECT_EQ(m["details"]["parameter_size"], "3.7M");
  EXPECT_EQ(m["details"]["quantization_level"], "Q4_K_M");

  const json show = json::parse(show_body(info, ChatFamily::ChatML, 256));
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(show["model_info"]["llama.context_length"], 512);
  EXPECT_EQ(show["model_info"]["general.parameter_count"], 3672320);
  EXPECT_EQ(show["parameters"], "num_ctx 256");
  EXPECT_NE(show["modelfile"].get<std::string>().find("chatml"), std::string::npos);
  EXPECT_EQ(show["capabilities"], json::array({"completion", "tools"}));
  // Models that think: gpt-oss, and those whose template holds a think block (R1, Qwen3).
  EXPECT_EQ(json::parse(show_body(info, ChatFamily::Harmony, 256))["capabilities"], json::array({"completion", "tools", "thinking"}));
  ModelInfo r1 = info;
  r1.chat_template = "{% set content = content.split('</think>')[-1] %}";
  EXPECT_EQ(json::parse(show_body(r1, ChatFamily::DeepSeek, 256))["capabilities"], json::array({"completion", "tools", "thinking"}));

  const json ps = json::parse(ps_body(info));
  EXPECT_EQ(ps["models"][0]["name"], "tiny:latest");
  EXPECT_EQ(ps["models"][0]["size_vram"], 0);
  EXPECT_EQ(json::parse(version_body())["version"].is_string(), true);
}

}  // namespace
}  // namespace orchard::serve::ollama
