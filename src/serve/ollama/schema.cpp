#include "serve/ollama/schema.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>

namespace orchard::serve::ollama {
namespace {

using nlohmann::json;
using openai::ApiError;
using openai::field;
using openai::integer_value;
using openai::invalid_request;
using openai::number_value;
using openai::string_value;
using openai::unsupported;
using openai::wrong_type;

// The Ollama release whose API these routes follow, for clients that check /api/version.
constexpr const char* kOllamaApiVersion = "0.11.0";
constexpr std::string_view kLatestTag = ":latest";

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string without_latest(std::string name) {
  if (name.ends_with(kLatestTag)) name.resize(name.size() - kLatestTag.size());
  return name;
}

std::string required_model(const json& body) {
  const json* v = field(body, "model");
  if (v == nullptr) throw invalid_request("'model' is required", "model");
  std::string name = string_value(*v, "model");
  if (name.empty()) throw invalid_request("'model' must name a model", "model");
  return without_latest(std::move(name));
}

// Fields Ollama defines that ask for something this server can't do: refused, not ignored, so a
// client is not misled.
void refuse_images(const json& body, const std::string& prefix) {
  if (const json* v = field(body, "images")) {
    if (!v->is_array()) throw wrong_type(prefix + "images", "an array", *v);
    if (!v->empty()) throw unsupported(prefix + "images", "images");
  }
}

void refuse_request_fields(const json& body) {
  refuse_images(body, "");
  for (const char* name : {"suffix", "template"})
    if (const json* v = field(body, name); v != nullptr && !string_value(*v, name).empty()) throw unsupported(name, name);
  if (const json* v = field(body, "context")) {
    if (!v->is_array()) throw wrong_type("context", "an array of token ids", *v);
    if (!v->empty()) throw unsupported("context", "continuing from a returned context");
  }
}

// format: "json" (any JSON object, as Ollama's JSON mode gives) or a JSON schema; "" or {} for
// plain text.
std::shared_ptr<const structured::Grammar> parse_format(const json& format) {
  if (format.is_string()) {
    const std::string kind = format.get<std::string>();
    if (kind.empty()) return nullptr;
    if (kind != "json") throw invalid_request(fmt::format("'format' must be \"json\" or a JSON schema, not \"{}\"", kind), "format");
    return openai::any_object_grammar();
  }
  if (!format.is_object()) throw wrong_type("format", "\"json\" or a JSON schema", format);
  return format.empty() ? nullptr : openai::schema_grammar(format, "format");
}

// An assistant turn's earlier calls, in Ollama's shape: [{"function": {"name", "arguments": {...}}}]
// (arguments an object, not OpenAI's JSON text).
std::vector<ChatToolCall> parse_tool_calls(const json& calls, const std::string& param) {
  if (!calls.is_array()) throw wrong_type(param, "an array", calls);
  std::vector<ChatToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!calls[i].is_object()) throw wrong_type(p, "an object", calls[i]);
    const json* function = field(calls[i], "function");
    if (function == nullptr) throw invalid_request(fmt::format("'{}.function' is required", p), p + ".function");
    if (!function->is_object()) throw wrong_type(p + ".function", "an object", *function);
    const json* name = field(*function, "name");
    if (name == nullptr) throw invalid_request(fmt::format("'{}.function.name' is required", p), p + ".function.name");
    ChatToolCall call;
    call.name = string_value(*name, p + ".function.name");
    const json* arguments = field(*function, "arguments");
    if (arguments != nullptr && !arguments->is_object()) throw wrong_type(p + ".function.arguments", "an object", *arguments);
    call.arguments = arguments == nullptr ? "{}" : arguments->dump();
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json& messages) {
  if (!messages.is_array()) throw wrong_type("messages", "an array", messages);
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object()) throw wrong_type(param, "an object", m);
    const json* role = field(m, "role");
    if (role == nullptr) throw invalid_request(fmt::format("'{}.role' is required", param), param + ".role");
    ChatMessage message{string_value(*role, param + ".role"), {}};
    if (message.role != "system" && message.role != "user" && message.role != "assistant" && message.role != "tool")
      throw invalid_request(fmt::format("'{}.role' must be system, user, assistant or tool, not '{}'", param, message.role),
                            param + ".role");
    refuse_images(m, param + ".");
    if (const json* v = field(m, "tool_calls")) {
      if (message.role != "assistant") throw invalid_request(fmt::format("'{}.tool_calls' belong to assistant turns", param), param + ".tool_calls");
      message.tool_calls = parse_tool_calls(*v, param + ".tool_calls");
    }
    // The tool a result is from (Ollama's, where OpenAI gives the call's id): checked, though the
    // templates, like Ollama's own, render results in order without it.
    if (const json* v = field(m, "tool_name")) string_value(*v, param + ".tool_name");
    if (const json* content = field(m, "content"))
      message.content = string_value(*content, param + ".content");
    else if (message.role != "assistant" || message.tool_calls.empty())
      throw invalid_request(fmt::format("'{}.content' is required", param), param + ".content");
    out.push_back(std::move(message));
  }
  return out;
}

std::vector<std::string> parse_stop(const json& stop) {
  if (stop.is_string()) return stop.get<std::string>().empty() ? std::vector<std::string>{} : std::vector{stop.get<std::string>()};
  if (!stop.is_array()) throw wrong_type("options.stop", "an array of strings", stop);
  std::vector<std::string> out;
  for (size_t i = 0; i < stop.size(); ++i) {
    std::string s = string_value(stop[i], fmt::format("options.stop[{}]", i));
    if (!s.empty()) out.push_back(std::move(s));
  }
  return out;
}

// Ollama's options and defaults. Options this server has no use for (num_ctx, num_thread,
// mirostat, ...) are ignored, as Ollama ignores those a runner doesn't know.
void parse_options(const json& body, openai::ApiRequest& r) {
  model::SamplerOptions& s = r.sampling;
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.9f;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.1f;
  s.repeat_last_n = 64;
  const json* options = field(body, "options");
  if (options == nullptr) return;
  if (!options->is_object()) throw wrong_type("options", "an object", *options);
  const json& o = *options;
  if (const json* v = field(o, "temperature")) s.temperature = static_cast<float>(number_value(*v, "options.temperature", 0, 1000));
  if (const json* v = field(o, "top_k"))
    s.top_k = static_cast<int32_t>(integer_value(*v, "options.top_k", 0, std::numeric_limits<int32_t>::max()));
  // top_p 0 keeps the single most likely token, as the smallest positive value does.
  if (const json* v = field(o, "top_p"))
    s.top_p = std::max(static_cast<float>(number_value(*v, "options.top_p", 0, 1)), std::numeric_limits<float>::min());
  if (const json* v = field(o, "min_p")) s.min_p = static_cast<float>(number_value(*v, "options.min_p", 0, 0.999));
  if (const json* v = field(o, "repeat_penalty")) {
    s.repeat_penalty = static_cast<float>(number_value(*v, "options.repeat_penalty", 0, 100));
    if (s.repeat_penalty <= 0) throw invalid_request("'options.repeat_penalty' must be positive", "options.repeat_penalty");
  }
  if (const json* v = field(o, "repeat_last_n")) {
    // -1: the whole context, which no slot exceeds.
    const int64_t n = integer_value(*v, "options.repeat_last_n", -1, std::numeric_limits<int32_t>::max());
    s.repeat_last_n = n < 0 ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(n);
  }
  if (const json* v = field(o, "seed")) {
    // Ollama's -1 (any negative seed) asks for a random one.
    if (!v->is_number_integer()) throw wrong_type("options.seed", "an integer", *v);
    r.seeded = v->is_number_unsigned() || v->get<int64_t>() >= 0;
    if (r.seeded) s.seed = openai::seed_value(*v, "options.seed");
  }
  if (const json* v = field(o, "num_predict")) {
    // -1 (Ollama's default), -2 (fill the context) and 0 set no limit but the context.
    const int64_t n = integer_value(*v, "options.num_predict", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    r.default_max_tokens = n > 0 ? static_cast<int32_t>(n) : 0;
  }
  if (const json* v = field(o, "stop")) r.stop = parse_stop(*v);
}

// llama.cpp's llama_ftype names, which Ollama reports as the quantization level.
std::string file_type_name(int64_t code) {
  switch (code) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 25: return "IQ4_NL";
    case 30: return "IQ4_XS";
    case 32: return "BF16";
    case 38: return "MXFP4";
    default: return code < 0 ? "unknown" : fmt::format("file type {}", code);
  }
}

// "1.1B", "494.0M", as Ollama writes a parameter count.
std::string parameter_size(int64_t n) {
  const auto x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.1f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}K", x / 1e3);
  return std::to_string(n);
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto since = t.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since);
  const std::time_t tt = std::chrono::system_clock::to_time_t(std::chrono::system_clock::time_point(seconds));
  std::tm utc{};
  gmtime_r(&tt, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:09d}Z", date, std::chrono::duration_cast<std::chrono::nanoseconds>(since - seconds).count());
}

std::string modified_at(const ModelInfo& info) { return rfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(info.created))); }

json details(const ModelInfo& info) {
  return {{"parent_model", ""},
          {"format", "gguf"},
          {"family", info.architecture},
          {"families", json::array({info.architecture})},
          {"parameter_size", parameter_size(info.parameters)},
          {"quantization_level", file_type_name(info.file_type)}};
}

json model_entry(const ModelInfo& info) {
  // The digest Ollama gives is its blob's SHA-256; hashing a file of many gigabytes at every start
  // is not worth it, so there is none.
  return {{"name", model_name(info)}, {"model", model_name(info)}, {"size", info.file_bytes}, {"digest", ""}, {"details", details(info)}};
}

json head(const Answer& a) { return {{"model", a.model}, {"created_at", timestamp_now()}}; }

void put_text(json& j, Route route, std::string_view text, std::span<const ChatToolCall> calls = {}, std::string_view thinking = {}) {
  if (route != Route::Chat) {
    j["response"] = text;
    if (!thinking.empty()) j["thinking"] = thinking;
    return;
  }
  j["message"] = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) j["message"]["thinking"] = thinking;
  if (calls.empty()) return;
  json& out = j["message"]["tool_calls"] = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    // The grammar or the parser made the arguments; a model's own malformed JSON stays a string.
    json arguments = json::parse(calls[i].arguments, nullptr, false);
    if (arguments.is_discarded()) arguments = calls[i].arguments;
    out.push_back({{"function", {{"index", i}, {"name", calls[i].name}, {"arguments", std::move(arguments)}}}});
  }
}

// think: true or false, or gpt-oss's reasoning effort ("low", "medium", "high"), which thinks.
void parse_think(const json& think, openai::ApiRequest& r) {
  if (think.is_boolean()) {
    r.thinking = think.get<bool>();
    return;
  }
  if (!think.is_string()) throw wrong_type("think", "true, false, \"low\", \"medium\" or \"high\"", think);
  const std::string level = think.get<std::string>();
  if (level != "low" && level != "medium" && level != "high")
    throw invalid_request(fmt::format("'think' must be true, false, \"low\", \"medium\" or \"high\", not \"{}\"", level), "think");
  r.reasoning_effort = level;
}

int64_t nanoseconds(double seconds) { return static_cast<int64_t>(seconds * 1e9); }

}  // namespace

Request parse_request(Route route, std::string_view body_text) {
  const json body = openai::parse_object(body_text);
  Request out;
  openai::ApiRequest& r = out.generation;
  r.model = required_model(body);
  refuse_request_fields(body);
  if (const json* v = field(body, "format")) r.format = parse_format(*v);
  if (const json* v = field(body, "think")) parse_think(*v, r);
  if (route == Route::Chat) {
    r.endpoint = openai::Endpoint::ChatCompletions;
    if (const json* v = field(body, "messages")) r.messages = parse_messages(*v);
    if (const json* v = field(body, "tools")) r.tools = openai::parse_tools(*v);
    out.load_only = r.messages.empty();
  } else {
    if (const json* v = field(body, "tools"); v != nullptr && !(v->is_array() && v->empty()))
      throw unsupported("tools", "tools in /api/generate (use /api/chat)");
    std::string prompt;
    if (const json* v = field(body, "prompt")) prompt = string_value(*v, "prompt");
    std::string system;
    if (const json* v = field(body, "system")) system = string_value(*v, "system");
    bool raw = false;
    if (const json* v = field(body, "raw")) raw = openai::bool_value(*v, "raw");
    out.load_only = prompt.empty();
    if (raw) {
      r.endpoint = openai::Endpoint::Completions;
      r.prompt = std::move(prompt);
    } else {
      r.endpoint = openai::Endpoint::ChatCompletions;
      if (!system.empty()) r.messages.push_back({"system", std::move(system)});
      r.messages.push_back({"user", std::move(prompt)});
    }
  }
  r.stream = true;
  if (const json* v = field(body, "stream")) r.stream = openai::bool_value(*v, "stream");
  if (const json* v = field(body, "keep_alive"); v != nullptr && !v->is_string() && !v->is_number())
    throw wrong_type("keep_alive", "a duration (\"5m\") or a number of seconds", *v);
  parse_options(body, r);
  return out;
}

std::string parse_show_request(std::string_view body_text) {
  const json body = openai::parse_object(body_text);
  const json* v = field(body, "model");
  const char* param = "model";
  if (v == nullptr) {
    v = field(body, "name");
    param = "name";
  }
  if (v == nullptr) throw invalid_request("'model' is required", "model");
  return without_latest(string_value(*v, param));
}

std::string model_name(const ModelInfo& info) {
  return info.id.find(':') == std::string::npos ? info.id + std::string(kLatestTag) : info.id;
}

std::string error_body(std::string_view message) { return dump({{"error", message}}); }

std::string timestamp_now() { return rfc3339(std::chrono::system_clock::now()); }

std::string chunk_line(const Answer& a, std::string_view text, std::span<const ChatToolCall> calls, std::string_view thinking) {
  json j = head(a);
  put_text(j, a.route, text, calls, thinking);
  j["done"] = false;
  return dump(j) + "\n";
}

std::string final_line(const Answer& a, std::string_view text, FinishReason reason, const Usage& usage, int64_t total_ns,
                       std::span<const ChatToolCall> calls, std::string_view thinking) {
  json j = head(a);
  put_text(j, a.route, text, calls, thinking);
  j["done"] = true;
  j["done_reason"] = finish_reason_name(reason);
  j["total_duration"] = total_ns;
  j["load_duration"] = 0;
  j["prompt_eval_count"] = usage.prompt_tokens;
  j["prompt_eval_duration"] = nanoseconds(usage.prompt_seconds);
  j["eval_count"] = usage.completion_tokens;
  j["eval_duration"] = nanoseconds(usage.generation_seconds);
  return dump(j) + "\n";
}

std::string load_line(const Answer& a) {
  json j = head(a);
  put_text(j, a.route, "");
  j["done"] = true;
  j["done_reason"] = "load";
  return dump(j) + "\n";
}

std::string version_body() { return dump({{"version", kOllamaApiVersion}}); }

std::string tags_body(const ModelInfo& info) {
  json entry = model_entry(info);
  entry["modified_at"] = modified_at(info);
  return dump({{"models", json::array({entry})}});
}

std::string show_body(const ModelInfo& info, ChatFamily family, int32_t n_ctx) {
  json model_info = info.metadata_json.empty() ? json::object() : json::parse(info.metadata_json);
  model_info["general.parameter_count"] = info.parameters;
  return dump({{"modelfile", fmt::format("# served by orchard ({} chat template)\nFROM {}\n", chat_family_name(family), info.id)},
               {"parameters", fmt::format("num_ctx {}", n_ctx)},
               {"template", info.chat_template},
               {"details", details(info)},
               {"model_info", model_info},
               {"capabilities", family == ChatFamily::Harmony || template_thinks(info.chat_template)
                                    ? json::array({"completion", "tools", "thinking"})
                                    : json::array({"completion", "tools"})},
               {"modified_at", modified_at(info)}});
}

std::string ps_body(const ModelInfo& info) {
  json entry = model_entry(info);
  // Loaded until the server stops: no expiry a client could wait for.
  entry["expires_at"] = "9999-12-31T23:59:59Z";
  entry["size_vram"] = 0;
  return dump({{"models", json::array({entry})}});
}

}  // namespace orchard::serve::ollama
