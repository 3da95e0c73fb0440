#pragma once
// The OpenAI API's JSON, written once: parsing and validating request bodies of
// /v1/chat/completions and /v1/completions into typed requests, and building every response
// body and server-sent event the server sends. No HTTP here.
#include <cstdint>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "model/sampler.h"
#include "serve/chat_templates.h"
#include "serve/engine.h"
#include "serve/scheduler.h"
#include "serve/structured/grammar.h"
#include "serve/structured/tool_calls.h"

namespace orchard::serve::openai {

// A request the API refuses, with what the error body says: {"error": {"message", "type",
// "param", "code"}}.
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = {}, std::string code = {});
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }  // empty: null
  const std::string& code() const { return code_; }    // empty: null

 private:
  int status_;
  std::string type_, message_, param_, code_;
};

// 400 invalid_request_error naming the parameter.
ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});
// An error of that status with OpenAI's type for it (authentication_error for 401,
// rate_limit_error for 429, server_error from 500, ...); the code defaults to one for the status.
ApiError api_error(int status, std::string message, std::string code = {});

enum class Endpoint { ChatCompletions, Completions };

// tool_choice: "auto" (the model decides), "none", "required" (a call of any tool) or a named
// function (a call of that one).
enum class ToolChoice { Auto, None, Required, Named };

struct ApiRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;                    // empty when the request names none
  std::vector<ChatMessage> messages;    // chat: roles system/user/assistant ("developer" → system)
  std::optional<std::string> prompt;    // completions given text
  std::vector<model::TokenId> prompt_tokens;  // completions given token ids (range unchecked)
  std::optional<int32_t> max_tokens;    // max_tokens or max_completion_tokens; at least 1
  // Without max_tokens: at most this many tokens, or fewer when the context has less room
  // (0: the rest of the context). OpenAI's text completions stop after 16.
  int32_t default_max_tokens = 0;
  model::SamplerOptions sampling;       // OpenAI's defaults: temperature 1, top_p 1, no top-k/min-p
  bool seeded = false;                  // the request gave a seed
  std::vector<std::string> stop;        // at most 4, none empty
  bool ignore_eos = false;              // llama.cpp's extension: GenerationRequest::ignore_eos
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  // response_format json_object or json_schema: the grammar the output follows; null for text.
  std::shared_ptr<const structured::Grammar> format;
  std::vector<structured::ToolFunction> tools;  // chat only; parameters schemas checked
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;                        // ToolChoice::Named
  std::string reasoning_effort = "medium";      // low, medium or high: gpt-oss's "Reasoning:" line
  // Reasoning is returned beside the content; false (Ollama's think: false): it is left out, and
  // a model whose template can skip thinking is asked to.
  bool thinking = true;
};

// Readers of a request's JSON fields, shared by the OpenAI and Ollama schemas. `field` gives the
// value, or nullptr when absent or null (both APIs treat those as "use the default"); the
// others throw ApiError 400 naming `param` when the value has the wrong type or is outside
// [lo, hi].
const nlohmann::json* field(const nlohmann::json& object, const char* name);
ApiError wrong_type(const std::string& param, std::string_view expected, const nlohmann::json& got);
std::string string_value(const nlohmann::json& v, const std::string& param);
bool bool_value(const nlohmann::json& v, const std::string& param);
double number_value(const nlohmann::json& v, const std::string& param, double lo, double hi);
int64_t integer_value(const nlohmann::json& v, const std::string& param, int64_t lo, int64_t hi);
// A reasoning effort: "low", "medium" or "high" (400 naming `param` and those values otherwise).
std::string reasoning_effort_value(const nlohmann::json& v, const std::string& param);
// A seed: any 64-bit integer, negative ones as their two's complement.
uint64_t seed_value(const nlohmann::json& v, const std::string& param);
// 400 "<what> is not supported by this server", code unsupported_parameter.
ApiError unsupported(const std::string& param, std::string_view what);
// Parses a body that must be a JSON object (400 invalid_json / not an object otherwise).
nlohmann::json parse_object(std::string_view body);
// Output grammars, shared by both APIs' structured-output fields: any JSON object; a document
// of `schema` (400 naming `param`, code unsupported_schema, for a keyword the grammar can't honour).
std::shared_ptr<const structured::Grammar> any_object_grammar();
std::shared_ptr<const structured::Grammar> schema_grammar(const nlohmann::json& schema, const std::string& param);
// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}],
// OpenAI's shape, which Ollama's API shares; each parameters schema is compiled once here so
// that a bad one is a 400 naming it.
std::vector<structured::ToolFunction> parse_tools(const nlohmann::json& tools);

// Parses `body` for `endpoint`. Throws ApiError (400) for a body that isn't a JSON object, a
// field of the wrong type or out of range, a missing required field, or a feature the server
// doesn't offer (n > 1, logprobs, a schema keyword the grammar can't honour). Fields the API defines but the server has no use for
// (user, presence_penalty, ...) are ignored. The seed stays 0 when none is given (seeded false).
ApiRequest parse_request(Endpoint endpoint, std::string_view body);

// What identifies one response and its chunks.
struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// {"error": {"message", "type", "param", "code"}}: the code is always a string (the error's, else
// one for its status: "invalid_request", "invalid_api_key", "not_found", "rate_limit_exceeded", ...),
// the shape `orchard serve` and the network coordinator both answer with.
std::string error_body(const ApiError& error);
// The whole answer of a request without "stream".
// With tool calls (chat), the message carries them, its content is null when `text` is empty,
// and finish_reason is "tool_calls". Reasoning (Harmony's analysis) is message.reasoning_content,
// as llama.cpp's server names it.
std::string completion_body(Endpoint endpoint, const ResponseMeta& meta, std::string_view text, FinishReason reason,
                            const Usage& usage, std::span<const ChatToolCall> calls = {}, std::string_view reasoning = {});
// GET /v1/models.
std::string models_body(const ModelInfo& info);

// The server-sent events of a streamed answer, each "data: <json>\n\n".
class StreamWriter {
 public:
  StreamWriter(Endpoint endpoint, ResponseMeta meta, bool include_usage);
  // The event carrying `delta` (for chat, the first one also carries the assistant role).
  std::string text(std::string_view delta);
  // The events of a piece of a chat reply: delta.reasoning_content, delta.content, then
  // delta.tool_calls (a call's first piece with index, id, type and name, later ones with its
  // index and more of its arguments), each kind in an event of its own; nothing when it is empty.
  std::string delta(const structured::ReplyDelta& d);
  // The last events: the finish reason ("tool_calls" when the answer called tools), the usage
  // when asked for, then "data: [DONE]".
  std::string end(FinishReason reason, const Usage& usage, bool called_tools = false);
  // An error after the stream started (headers are sent, so the status can't say it).
  std::string error(const ApiError& error) const;
  // A comment line: ignored by clients, it lets the server notice a client that went away.
  static std::string keep_alive();

 private:
  std::string chunk(std::string_view delta, const char* finish_reason, const nlohmann::json* calls = nullptr,
                    std::string_view reasoning = {});

  Endpoint endpoint_;
  ResponseMeta meta_;
  bool include_usage_;
  bool role_sent_ = false;
};

}  // namespace orchard::serve::openai
