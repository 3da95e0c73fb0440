#include "serve/openai/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

#include "serve/structured/json_schema.h"

namespace orchard::serve::openai {
namespace {

using nlohmann::json;

constexpr size_t kMaxStops = 4;  // as OpenAI allows
// Completions without max_tokens stop after this many tokens, as OpenAI's do; chat completions
// may use the rest of the context.
constexpr int32_t kDefaultCompletionTokens = 16;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_param = fmt::format("{}[{}]", param, i);
    const json& part = content[i];
    if (!part.is_object()) throw wrong_type(part_param, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr) throw invalid_request(fmt::format("'{}.type' is required", part_param), part_param + ".type");
    if (string_value(*type, part_param + ".type") != "text")
      throw unsupported(part_param + ".type", fmt::format("content of type '{}'", type->get<std::string>()));
    const json* part_text = field(part, "text");
    if (part_text == nullptr) throw invalid_request(fmt::format("'{}.text' is required", part_param), part_param + ".text");
    if (!text.empty()) text += '\n';
    text += string_value(*part_text, part_param + ".text");
  }
  return text;
}

// An assistant turn's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::vector<ChatToolCall> parse_message_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) throw wrong_type(param, "an array", calls);
  std::vector<ChatToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", param, i);
    const json& c = calls[i];
    if (!c.is_object()) throw wrong_type(p, "an object", c);
    const json* function = field(c, "function");
    if (function == nullptr) throw invalid_request(fmt::format("'{}.function' is required", p), p + ".function");
    if (!function->is_object()) throw wrong_type(p + ".function", "an object", *function);
    ChatToolCall call;
    if (const json* id = field(c, "id")) call.id = string_value(*id, p + ".id");
    const json* name = field(*function, "name");
    if (name == nullptr) throw invalid_request(fmt::format("'{}.function.name' is required", p), p + ".function.name");
    call.name = string_value(*name, p + ".function.name");
    if (const json* args = field(*function, "arguments")) call.arguments = string_value(*args, p + ".function.arguments");
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) throw invalid_request("'messages' is required", "messages");
  if (!messages->is_array()) throw wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw invalid_request("'messages' must hold at least one message", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    const json& m = (*messages)[i];
    if (!m.is_object()) throw wrong_type(param, "an object", m);
    const json* role = field(m, "role");
    if (role == nullptr) throw invalid_request(fmt::format("'{}.role' is required", param), param + ".role");
    ChatMessage message{string_value(*role, param + ".role"), {}};
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    if (message.role != "system" && message.role != "user" && message.role != "assistant" && message.role != "tool")
      throw invalid_request(fmt::format("'{}.role' must be system, developer, user, assistant or tool, not '{}'", param, message.role),
                            param + ".role");
    const json* content = field(m, "content");
    // An assistant turn may have no content (it called tools instead); other turns must.
    if (content == nullptr && message.role != "assistant")
      throw invalid_request(fmt::format("'{}.content' is required", param), param + ".content");
    if (content != nullptr) message.content = message_content(*content, param + ".content");
    if (message.role == "tool") {
      const json* id = field(m, "tool_call_id");
      if (id == nullptr) throw invalid_request(fmt::format("'{}.tool_call_id' is required", param), param + ".tool_call_id");
      message.tool_call_id = string_value(*id, param + ".tool_call_id");
    }
    if (const json* calls = field(m, "tool_calls"); calls != nullptr && message.role == "assistant")
      message.tool_calls = parse_message_calls(*calls, param + ".tool_calls");
    out.push_back(std::move(message));
  }
  return out;
}

std::vector<model::TokenId> token_ids(const json& array, const std::string& param) {
  std::vector<model::TokenId> ids;
  for (size_t i = 0; i < array.size(); ++i)
    ids.push_back(static_cast<model::TokenId>(
        integer_value(array[i], fmt::format("{}[{}]", param, i), 0, std::numeric_limits<model::TokenId>::max())));
  return ids;
}

// A prompt: text, token ids, or a one-element array of either (several prompts at once are
// OpenAI's batch form, which this server leaves to concurrent requests).
void parse_prompt(const json& body, ApiRequest& r) {
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) throw invalid_request("'prompt' is required", "prompt");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
    return;
  }
  if (!prompt->is_array()) throw wrong_type("prompt", "a string, an array of strings or an array of token ids", *prompt);
  if (prompt->empty()) throw invalid_request("'prompt' must not be an empty array", "prompt");
  if ((*prompt)[0].is_number()) {
    r.prompt_tokens = token_ids(*prompt, "prompt");
    return;
  }
  if (prompt->size() > 1) throw unsupported("prompt", "more than one prompt per request");
  const json& only = (*prompt)[0];
  if (only.is_string()) {
    r.prompt = only.get<std::string>();
  } else if (only.is_array() && !only.empty()) {
    r.prompt_tokens = token_ids(only, "prompt[0]");
  } else {
    throw wrong_type("prompt[0]", "a string or a non-empty array of token ids", only);
  }
}

std::vector<std::string> parse_stop(const json& stop) {
  if (stop.is_string()) return stop.get<std::string>().empty() ? std::vector<std::string>{} : std::vector{stop.get<std::string>()};
  if (!stop.is_array()) throw wrong_type("stop", "a string or an array of strings", stop);
  if (stop.size() > kMaxStops)
    throw invalid_request(fmt::format("'stop' holds at most {} strings, not {}", kMaxStops, stop.size()), "stop");
  std::vector<std::string> out;
  for (size_t i = 0; i < stop.size(); ++i) {
    std::string s = string_value(stop[i], fmt::format("stop[{}]", i));
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

void parse_sampling(const json& body, ApiRequest& r) {
  model::SamplerOptions& s = r.sampling;
  s.temperature = 1.0f;
  s.top_p = 1.0f;
  s.top_k = 0;
  s.min_p = 0.0f;
  if (const json* v = field(body, "temperature")) s.temperature = static_cast<float>(number_value(*v, "temperature", 0, 2));
  if (const json* v = field(body, "top_p")) {
    // top_p 0 keeps the single most likely token, as the smallest positive value does; the
    // sampler wants a positive value.
    s.top_p = std::max(static_cast<float>(number_value(*v, "top_p", 0, 1)), std::numeric_limits<float>::min());
  }
  if (const json* v = field(body, "seed")) {
    r.seeded = true;
    s.seed = seed_value(*v, "seed");
  }
  // Extensions llama.cpp's server also takes.
  if (const json* v = field(body, "top_k")) s.top_k = static_cast<int32_t>(integer_value(*v, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (const json* v = field(body, "min_p")) s.min_p = static_cast<float>(number_value(*v, "min_p", 0, 0.999));
  if (const json* v = field(body, "repeat_penalty")) {
    s.repeat_penalty = static_cast<float>(number_value(*v, "repeat_penalty", 0, 10));
    if (s.repeat_penalty <= 0) throw invalid_request("'repeat_penalty' must be positive", "repeat_penalty");
  }
}

void refuse_unsupported(const json& body, Endpoint endpoint) {
  if (const json* v = field(body, "n"); v != nullptr && integer_value(*v, "n", 1, 128) != 1)
    throw unsupported("n", "more than one choice (n > 1)");
  if (const json* v = field(body, "best_of"); v != nullptr && integer_value(*v, "best_of", 1, 128) != 1)
    throw unsupported("best_of", "best_of > 1");
  if (const json* v = field(body, "logprobs")) {
    const bool wanted = endpoint == Endpoint::ChatCompletions ? bool_value(*v, "logprobs") : integer_value(*v, "logprobs", 0, 20) > 0;
    if (wanted) throw unsupported("logprobs", "logprobs");
  }
  if (const json* v = field(body, "echo"); v != nullptr && bool_value(*v, "echo")) throw unsupported("echo", "echo");
  if (const json* v = field(body, "suffix"); v != nullptr && !string_value(*v, "suffix").empty()) throw unsupported("suffix", "suffix");
  if (endpoint == Endpoint::Completions && field(body, "tools") != nullptr) throw unsupported("tools", "tools in text completions");
}

ApiError schema_error(const structured::SchemaError& e, const std::string& param) {
  return invalid_request(fmt::format("'{}' is not supported: {}{}", param, e.reason(), e.where().empty() ? "" : " (at " + e.where() + ")"),
                         param, "unsupported_schema");
}

}  // namespace

std::shared_ptr<const structured::Grammar> any_object_grammar() {
  auto grammar = std::make_shared<structured::Grammar>();
  grammar->finish(structured::Grammar::kAnyObject);
  return grammar;
}

std::shared_ptr<const structured::Grammar> schema_grammar(const json& schema, const std::string& param) {
  auto grammar = std::make_shared<structured::Grammar>();
  try {
    grammar->finish(structured::compile_schema(*grammar, schema));
  } catch (const structured::SchemaError& e) {
    throw schema_error(e, param);
  } catch (const Error& e) {  // alternatives that start alike
    throw invalid_request(fmt::format("'{}' is not supported: {}", param, e.what()), param, "unsupported_schema");
  }
  return grammar;
}

namespace {

// response_format: text, json_object (any JSON object) or json_schema (a document of the schema).
std::shared_ptr<const structured::Grammar> parse_format(const json& format) {
  if (!format.is_object()) throw wrong_type("response_format", "an object", format);
  const json* type = field(format, "type");
  if (type == nullptr) throw invalid_request("'response_format.type' is required", "response_format.type");
  const std::string kind = string_value(*type, "response_format.type");
  if (kind == "text") return nullptr;
  if (kind == "json_object") return any_object_grammar();
  if (kind != "json_schema")
    throw invalid_request(fmt::format("'response_format.type' must be text, json_object or json_schema, not '{}'", kind),
                          "response_format.type");
  const json* spec = field(format, "json_schema");
  if (spec == nullptr) throw invalid_request("'response_format.json_schema' is required", "response_format.json_schema");
  if (!spec->is_object()) throw wrong_type("response_format.json_schema", "an object", *spec);
  const json* name = field(*spec, "name");
  if (name == nullptr) throw invalid_request("'response_format.json_schema.name' is required", "response_format.json_schema.name");
  string_value(*name, "response_format.json_schema.name");
  if (const json* strict = field(*spec, "strict")) bool_value(*strict, "response_format.json_schema.strict");
  // Without a schema any JSON value will do, as OpenAI's API has it.
  const json* schema = field(*spec, "schema");
  if (schema == nullptr) {
    auto grammar = std::make_shared<structured::Grammar>();
    grammar->finish(structured::Grammar::kAny);
    return grammar;
  }
  return schema_grammar(*schema, "response_format.json_schema.schema");
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

}  // namespace

std::vector<structured::ToolFunction> parse_tools(const json& tools) {
  if (!tools.is_array()) throw wrong_type("tools", "an array", tools);
  std::vector<structured::ToolFunction> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = fmt::format("tools[{}]", i);
    const json& t = tools[i];
    if (!t.is_object()) throw wrong_type(p, "an object", t);
    const json* type = field(t, "type");
    if (type == nullptr) throw invalid_request(fmt::format("'{}.type' is required", p), p + ".type");
    if (string_value(*type, p + ".type") != "function")
      throw unsupported(p + ".type", fmt::format("tools of type '{}'", type->get<std::string>()));
    const json* function = field(t, "function");
    if (function == nullptr) throw invalid_request(fmt::format("'{}.function' is required", p), p + ".function");
    if (!function->is_object()) throw wrong_type(p + ".function", "an object", *function);
    structured::ToolFunction f;
    const json* name = field(*function, "name");
    if (name == nullptr) throw invalid_request(fmt::format("'{}.function.name' is required", p), p + ".function.name");
    f.name = string_value(*name, p + ".function.name");
    if (!valid_function_name(f.name))
      throw invalid_request(fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-', not '{}'", p, f.name),
                            p + ".function.name");
    for (const auto& other : out)
      if (other.name == f.name) throw invalid_request(fmt::format("two tools are named '{}'", f.name), p + ".function.name");
    if (const json* d = field(*function, "description")) f.description = string_value(*d, p + ".function.description");
    if (const json* strict = field(*function, "strict")) bool_value(*strict, p + ".function.strict");
    if (const json* parameters = field(*function, "parameters")) {
      if (!parameters->is_object()) throw wrong_type(p + ".function.parameters", "an object", *parameters);
      f.parameters = *parameters;
      try {
        structured::tool_call_grammar(structured::ToolStyle::Hermes, std::span(&f, 1));
      } catch (const structured::SchemaError& e) {
        throw schema_error(e, p + ".function.parameters");
      } catch (const Error& e) {
        throw invalid_request(fmt::format("'{}.function.parameters' is not supported: {}", p, e.what()), p + ".function.parameters",
                              "unsupported_schema");
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

void parse_tool_choice(const json& choice, ApiRequest& r) {
  if (choice.is_string()) {
    const std::string mode = choice.get<std::string>();
    if (mode == "auto") r.tool_choice = ToolChoice::Auto;
    else if (mode == "none") r.tool_choice = ToolChoice::None;
    else if (mode == "required") r.tool_choice = ToolChoice::Required;
    else throw invalid_request(fmt::format("'tool_choice' must be auto, none, required or a function, not '{}'", mode), "tool_choice");
  } else if (choice.is_object()) {
    const json* function = field(choice, "function");
    const json* name = function != nullptr && function->is_object() ? field(*function, "name") : nullptr;
    if (name == nullptr) throw invalid_request("'tool_choice.function.name' is required", "tool_choice.function.name");
    r.tool_choice = ToolChoice::Named;
    r.tool_name = string_value(*name, "tool_choice.function.name");
    if (std::none_of(r.tools.begin(), r.tools.end(), [&](const auto& f) { return f.name == r.tool_name; }))
      throw invalid_request(fmt::format("'tool_choice' names '{}', which is not among the tools", r.tool_name), "tool_choice.function.name");
  } else {
    throw wrong_type("tool_choice", "a string or an object", choice);
  }
  if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && r.tools.empty())
    throw invalid_request("'tool_choice' asks for a tool call but 'tools' is empty", "tool_choice");
}

}  // namespace

ApiError::ApiError(int status, std::string type, std::string message, std::string param, std::string code)
    : Error(error_message("serve", "{}", message)),
      status_(status),
      type_(std::move(type)),
      message_(std::move(message)),
      param_(std::move(param)),
      code_(std::move(code)) {}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param), std::move(code));
}

ApiError api_error(int status, std::string message, std::string code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return ApiError(status, type, std::move(message), {}, std::move(code));
}

const json* field(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

ApiError wrong_type(const std::string& param, std::string_view expected, const json& got) {
  return invalid_request(fmt::format("'{}' must be {}, not {}", param, expected, got.type_name()), param);
}

std::string string_value(const json& v, const std::string& param) {
  if (!v.is_string()) throw wrong_type(param, "a string", v);
  return v.get<std::string>();
}

bool bool_value(const json& v, const std::string& param) {
  if (!v.is_boolean()) throw wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

double number_value(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) throw wrong_type(param, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw invalid_request(fmt::format("'{}' must be between {} and {}, not {}", param, lo, hi, x), param);
  return x;
}

int64_t integer_value(const json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw wrong_type(param, "an integer", v);
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = too_big ? hi : v.get<int64_t>();
  if (too_big || x < lo || x > hi)
    throw invalid_request(fmt::format("'{}' must be between {} and {}, not {}", param, lo, hi, v.dump()), param);
  return x;
}

ApiError unsupported(const std::string& param, std::string_view what) {
  return invalid_request(fmt::format("{} is not supported by this server", what), param, "unsupported_parameter");
}

std::string reasoning_effort_value(const json& v, const std::string& param) {
  const std::string effort = string_value(v, param);
  if (effort != "low" && effort != "medium" && effort != "high")
    throw invalid_request(fmt::format("'{}' must be low, medium or high, not '{}'", param, effort), param);
  return effort;
}

uint64_t seed_value(const json& v, const std::string& param) {
  if (!v.is_number_integer()) throw wrong_type(param, "an integer", v);
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
}

json parse_object(std::string_view body_text) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // a parse error, or a number too large for a double (1e999)
    throw invalid_request(fmt::format("the body is not valid JSON: {}", e.what()), {}, "invalid_json");
  }
  if (!body.is_object()) throw invalid_request(fmt::format("the body must be a JSON object, not {}", body.type_name()));
  return body;
}

ApiRequest parse_request(Endpoint endpoint, std::string_view body_text) {
  const json body = parse_object(body_text);
  ApiRequest r;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::Completions) r.default_max_tokens = kDefaultCompletionTokens;
  if (const json* v = field(body, "model")) r.model = string_value(*v, "model");
  if (endpoint == Endpoint::ChatCompletions)
    r.messages = parse_messages(body);
  else
    parse_prompt(body, r);
  refuse_unsupported(body, endpoint);
  // max_completion_tokens is the chat API's newer name; it wins when both are given.
  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (const json* v = field(body, name)) r.max_tokens = static_cast<int32_t>(integer_value(*v, name, 1, std::numeric_limits<int32_t>::max()));
  parse_sampling(body, r);
  if (const json* v = field(body, "stop")) r.stop = parse_stop(*v);
  if (const json* v = field(body, "ignore_eos")) r.ignore_eos = bool_value(*v, "ignore_eos");
  if (const json* v = field(body, "response_format")) r.format = parse_format(*v);
  if (const json* v = field(body, "tools")) r.tools = parse_tools(*v);
  if (const json* v = field(body, "tool_choice")) parse_tool_choice(*v, r);
  if (const json* v = field(body, "parallel_tool_calls")) bool_value(*v, "parallel_tool_calls");
  if (const json* v = field(body, "reasoning_effort")) r.reasoning_effort = reasoning_effort_value(*v, "reasoning_effort");
  if (const json* v = field(body, "stream")) r.stream = bool_value(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) throw wrong_type("stream_options", "an object", *v);
    if (const json* u = field(*v, "include_usage")) r.include_usage = bool_value(*u, "stream_options.include_usage");
  }
  return r;
}

namespace {

const char* status_code(int status) {
  switch (status) {
    case 400: return "invalid_request";
    case 401: return "invalid_api_key";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 409: return "conflict";
    case 413: return "request_too_large";
    case 415: return "unsupported_media_type";
    case 429: return "rate_limit_exceeded";
    case 502: return "bad_gateway";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return status >= 500 ? "server_error" : "invalid_request";
  }
}

}  // namespace

std::string error_body(const ApiError& e) {
  return dump({{"error",
                {{"message", e.message()},
                 {"type", e.type()},
                 {"param", null_or(e.param())},
                 {"code", e.code().empty() ? status_code(e.status()) : e.code()}}}});
}

namespace {

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

const char* object_name(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json response_head(Endpoint endpoint, const ResponseMeta& meta, bool chunk) {
  return {{"id", meta.id}, {"object", object_name(endpoint, chunk)}, {"created", meta.created}, {"model", meta.model}};
}

std::string event(const json& j) { return "data: " + dump(j) + "\n\n"; }

json calls_json(std::span<const ChatToolCall> calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::string completion_body(Endpoint endpoint, const ResponseMeta& meta, std::string_view text, FinishReason reason,
                            const Usage& usage, std::span<const ChatToolCall> calls, std::string_view reasoning) {
  json j = response_head(endpoint, meta, false);
  const bool called = !calls.empty() && reason == FinishReason::Stop;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", called ? "tool_calls" : finish_reason_name(reason)}};
  if (endpoint == Endpoint::ChatCompletions) {
    json message = {{"role", "assistant"}, {"content", text.empty() && !calls.empty() ? json(nullptr) : json(text)}};
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    if (!calls.empty()) message["tool_calls"] = calls_json(calls, false);
    choice["message"] = std::move(message);
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string models_body(const ModelInfo& info) {
  return dump({{"object", "list"},
               {"data", json::array({{{"id", info.id}, {"object", "model"}, {"created", info.created}, {"owned_by", "orchard"}}})}});
}

StreamWriter::StreamWriter(Endpoint endpoint, ResponseMeta meta, bool include_usage)
    : endpoint_(endpoint), meta_(std::move(meta)), include_usage_(include_usage) {}

std::string StreamWriter::chunk(std::string_view delta, const char* finish_reason, const json* calls, std::string_view reasoning) {
  json j = response_head(endpoint_, meta_, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
  if (endpoint_ == Endpoint::ChatCompletions) {
    json d = json::object();
    if (!role_sent_) d["role"] = "assistant";
    if (!delta.empty() || (!role_sent_ && calls == nullptr && reasoning.empty())) d["content"] = delta;
    if (!reasoning.empty()) d["reasoning_content"] = reasoning;
    if (calls != nullptr) d["tool_calls"] = *calls;
    role_sent_ = true;
    choice["delta"] = d;
  } else {
    choice["text"] = delta;
  }
  j["choices"] = json::array({choice});
  // With include_usage, OpenAI gives every chunk "usage": null and the last one the counts.
  if (include_usage_) j["usage"] = nullptr;
  return event(j);
}

std::string StreamWriter::text(std::string_view delta) { return chunk(delta, nullptr); }

std::string StreamWriter::delta(const structured::ReplyDelta& d) {
  std::string out;
  if (!d.reasoning.empty()) out += chunk("", nullptr, nullptr, d.reasoning);
  if (!d.content.empty()) out += chunk(d.content, nullptr);
  if (!d.calls.empty()) {
    json list = json::array();
    for (const structured::ToolCallDelta& c : d.calls) {
      json piece = {{"index", c.index}};
      // A call's first piece names it (its arguments start empty, as OpenAI's do); later ones
      // carry only more of the arguments.
      if (!c.id.empty()) {
        piece["id"] = c.id;
        piece["type"] = "function";
        piece["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else {
        piece["function"] = {{"arguments", c.arguments}};
      }
      list.push_back(std::move(piece));
    }
    out += chunk("", nullptr, &list);
  }
  return out;
}

std::string StreamWriter::end(FinishReason reason, const Usage& usage, bool called_tools) {
  const std::string reason_name = called_tools && reason == FinishReason::Stop ? "tool_calls" : std::string(finish_reason_name(reason));
  std::string out = chunk("", reason_name.c_str());
  if (include_usage_) {
    json j = response_head(endpoint_, meta_, true);
    j["choices"] = json::array();
    j["usage"] = usage_json(usage);
    out += event(j);
  }
  return out + "data: [DONE]\n\n";
}

std::string StreamWriter::error(const ApiError& e) const { return "data: " + error_body(e) + "\n\n"; }

std::string StreamWriter::keep_alive() { return ": keep-alive\n\n"; }

}  // namespace orchard::serve::openai
