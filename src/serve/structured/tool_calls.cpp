#include "serve/structured/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "serve/structured/json_schema.h"

namespace orchard::serve::structured {
namespace {

using nlohmann::json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";  // Llama 3.1 may open a call with it

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// Written objects keep their keys in the order templates show them ("name" first).
using ordered = nlohmann::ordered_json;

std::string dump(const ordered& j) { return j.dump(-1, ' ', false, ordered::error_handler_t::replace); }

ordered tool_json(const ToolFunction& f) {
  ordered function = {{"name", f.name}};
  if (!f.description.empty()) function["description"] = f.description;
  function["parameters"] = f.parameters.is_null() ? ordered::object() : ordered::parse(dump(f.parameters));
  return {{"type", "function"}, {"function", function}};
}

// The arguments as JSON to embed in a call: the text itself when it is JSON, else as a string.
ordered arguments_json(const std::string& arguments) {
  ordered parsed = ordered::parse(arguments, nullptr, false);
  return parsed.is_discarded() ? ordered(arguments) : parsed;
}

std::string hermes_call(const ChatToolCall& c) {
  return fmt::format("{}\n{}\n{}", kCallOpen, dump(ordered{{"name", c.name}, {"arguments", arguments_json(c.arguments)}}), kCallClose);
}

std::string llama3_call(const ChatToolCall& c) {
  return dump(ordered{{"name", c.name}, {"parameters", arguments_json(c.arguments)}});
}

// A call's JSON: {"name": ..., "arguments" (or "parameters"): an object or its JSON text}.
std::optional<ChatToolCall> call_of(std::string_view text) {
  const json j = json::parse(trim(text), nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ChatToolCall call;
  call.name = name->get<std::string>();
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = dump(*args);
  } else if (args->is_string() && json::parse(args->get<std::string>(), nullptr, false).is_object()) {
    call.arguments = args->get<std::string>();
  } else {
    return std::nullopt;
  }
  return call;
}

}  // namespace

ToolStyle tool_style(ChatFamily family) { return family == ChatFamily::Llama3 ? ToolStyle::Llama3 : ToolStyle::Hermes; }

std::vector<ChatMessage> render_tool_turns(ToolStyle style, std::span<const ChatMessage> messages, std::span<const ToolFunction> tools) {
  std::vector<ChatMessage> out;
  bool after_tool = false;
  for (const ChatMessage& m : messages) {
    const bool tool = m.role == "tool";
    if (tool && style == ToolStyle::Llama3) {
      out.push_back({"ipython", m.content});
    } else if (tool) {
      // Results of consecutive calls share one user turn, as Qwen's template writes them.
      const std::string response = fmt::format("<tool_response>\n{}\n</tool_response>", m.content);
      if (after_tool)
        out.back().content += "\n" + response;
      else
        out.push_back({"user", response});
    }
    after_tool = tool;
    if (tool) continue;
    ChatMessage copy{m.role, m.content};
    if (!m.tool_calls.empty()) {
      for (const ChatToolCall& c : m.tool_calls) {
        if (!copy.content.empty()) copy.content += "\n";
        copy.content += style == ToolStyle::Hermes ? hermes_call(c) : llama3_call(c);
      }
    }
    out.push_back(std::move(copy));
  }
  if (tools.empty()) return out;

  if (style == ToolStyle::Hermes) {
    std::string text =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolFunction& f : tools) text += "\n" + dump(tool_json(f));
    text +=
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    if (!out.empty() && out.front().role == "system")
      out.front().content += "\n\n" + text;
    else
      out.insert(out.begin(), ChatMessage{"system", text});
    return out;
  }
  std::string text =
      "Given the following functions, please respond with a JSON for a function call with its proper arguments that best "
      "answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
      "and its value}. Do not use variables.\n\n";
  for (const ToolFunction& f : tools) text += dump(tool_json(f)) + "\n\n";
  auto user = std::find_if(out.begin(), out.end(), [](const ChatMessage& m) { return m.role == "user"; });
  if (user != out.end())
    user->content = text + user->content;
  else
    out.push_back({"user", text});
  return out;
}

std::shared_ptr<Grammar> tool_call_grammar(ToolStyle style, std::span<const ToolFunction> allowed) {
  auto g = std::make_shared<Grammar>();
  std::vector<std::string> openings;
  std::vector<int32_t> thens;
  for (const ToolFunction& f : allowed) {
    const json parameters = f.parameters.is_null() ? json{{"type", "object"}, {"additionalProperties", false}} : f.parameters;
    GrammarNode rest;
    rest.kind = GrammarNode::Kind::Sequence;
    rest.parts = {compile_schema(*g, parameters), g->literal("}")};
    thens.push_back(g->add(std::move(rest)));
    // The name ends with its closing quote, so no opening is a prefix of another.
    openings.push_back(fmt::format("{{\"name\": {}, \"{}\": ", dump(json(f.name)), style == ToolStyle::Hermes ? "arguments" : "parameters"));
  }
  const int32_t call = g->literals(openings, thens);
  if (style == ToolStyle::Llama3) {
    g->finish(call);
    return g;
  }
  GrammarNode whole;
  whole.kind = GrammarNode::Kind::Sequence;
  whole.parts = {g->literal(std::string(kCallOpen) + "\n"), call, g->literal("\n" + std::string(kCallClose))};
  g->finish(g->add(std::move(whole)));
  return g;
}

std::vector<ChatToolCall> parse_tool_calls(ToolStyle style, std::string_view text, const std::string& id_prefix) {
  std::vector<ChatToolCall> calls;
  auto add = [&](std::string_view body) {
    std::optional<ChatToolCall> call = call_of(body);
    if (!call) return false;
    call->id = fmt::format("{}{}", id_prefix, calls.size());
    calls.push_back(std::move(*call));
    return true;
  };
  if (style == ToolStyle::Llama3) {
    std::string_view body = trim(text);
    if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
    if (!add(body)) return {};
    return calls;
  }
  for (size_t at = text.find(kCallOpen); at != std::string_view::npos; at = text.find(kCallOpen, at)) {
    at += kCallOpen.size();
    const size_t close = text.find(kCallClose, at);
    // The last call may stop at the end of generation without its closing tag.
    if (!add(text.substr(at, close == std::string_view::npos ? std::string_view::npos : close - at))) return {};
    if (close == std::string_view::npos) break;
    at = close + kCallClose.size();
  }
  return calls;
}

ToolCallParser::ToolCallParser(ToolStyle style, std::string id_prefix) : style_(style), id_prefix_(std::move(id_prefix)) {}

std::string ToolCallParser::push(std::string_view text) {
  held_ += text;
  if (in_calls_) return {};
  if (style_ == ToolStyle::Llama3) {
    if (started_) return std::exchange(held_, {});
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {};
    started_ = true;
    // A reply that opens with '{' (or the python tag) is a call until it fails to parse.
    const std::string_view rest = std::string_view(held_).substr(first);
    if (rest.starts_with('{') || kPythonTag.starts_with(rest.substr(0, kPythonTag.size()))) {
      in_calls_ = true;
      return {};
    }
    return std::exchange(held_, {});
  }
  const size_t open = held_.find(kCallOpen);
  if (open != std::string::npos) {
    in_calls_ = true;
    std::string content = held_.substr(0, open);
    held_.erase(0, open);
    return content;
  }
  // Hold back what could be the start of the marker.
  size_t keep = std::min(held_.size(), kCallOpen.size() - 1);
  while (keep > 0 && !kCallOpen.starts_with(std::string_view(held_).substr(held_.size() - keep))) --keep;
  std::string content = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return content;
}

ToolCallParser::Result ToolCallParser::finish() {
  Result r;
  if (in_calls_) r.calls = parse_tool_calls(style_, held_, id_prefix_);
  if (r.calls.empty()) r.content = std::move(held_);
  held_.clear();
  return r;
}

ToolCallParser::Result ToolCallParser::whole(std::string_view text) {
  std::string content = push(text);
  Result rest = finish();
  rest.content = content + rest.content;
  if (!rest.calls.empty() && rest.content.find_first_not_of(" \t\r\n") == std::string::npos) rest.content.clear();
  return rest;
}

}  // namespace orchard::serve::structured
