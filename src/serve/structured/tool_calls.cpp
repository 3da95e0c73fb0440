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
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kSpace = " \t\r\n";
constexpr std::string_view kDeepSeekCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDeepSeekCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDeepSeekCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kHarmonyMessage = "<|message|>";
// What ends a Harmony message's body: the next message's header, or an end marker (those that
// end generation do not reach the text, but a reply written out in full has them).
constexpr std::string_view kHarmonyBodyEnds[] = {"<|end|>", "<|start|>", "<|channel|>", "<|return|>", "<|call|>"};
constexpr size_t kMaxName = 256;  // a function name longer than this is not a call's header

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

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

std::string deepseek_call(const ChatToolCall& c) {
  return fmt::format("{}function{}{}\n```json\n{}\n```{}", kDeepSeekCallBegin, kDeepSeekSep, c.name, c.arguments, kDeepSeekCallEnd);
}

// A call's JSON: {"name": ..., "arguments" (or "parameters"): an object or its JSON text}.
std::optional<ChatToolCall> call_of(const json& j) {
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

std::optional<ChatToolCall> call_of(std::string_view text) { return call_of(json::parse(trim(text), nullptr, false)); }

// The calls of a call region read whole (from its opener on), for a region whose calls did not
// stream: the keys in another order, arguments given as text. Empty when one doesn't parse.
std::vector<ChatToolCall> region_calls(ToolStyle style, std::string_view text) {
  std::vector<ChatToolCall> calls;
  if (style == ToolStyle::Llama3) {
    std::string_view body = trim(text);
    if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
    if (auto call = call_of(body)) calls.push_back(std::move(*call));
    return calls;
  }
  if (style == ToolStyle::Mistral) {
    if (text.starts_with(kMistralCalls)) text.remove_prefix(kMistralCalls.size());
    const json j = json::parse(trim(text), nullptr, false);
    for (const json& c : j.is_array() ? j : json::array({j})) {
      auto call = call_of(c);
      if (!call) return {};
      calls.push_back(std::move(*call));
    }
    return calls;
  }
  if (style != ToolStyle::Hermes) return {};
  for (size_t at = text.find(kCallOpen); at != std::string_view::npos; at = text.find(kCallOpen, at)) {
    at += kCallOpen.size();
    const size_t close = text.find(kCallClose, at);
    // The last call may stop at the end of generation without its closing tag.
    auto call = call_of(text.substr(at, close == std::string_view::npos ? std::string_view::npos : close - at));
    if (!call) return {};
    calls.push_back(std::move(*call));
    if (close == std::string_view::npos) break;
    at = close + kCallClose.size();
  }
  return calls;
}

// How much of the end of `text` could be the start of `marker` (to hold back while streaming).
size_t partial_suffix(std::string_view text, std::string_view marker) {
  size_t keep = std::min(text.size(), marker.size() - 1);
  while (keep > 0 && !marker.starts_with(text.substr(text.size() - keep))) --keep;
  return keep;
}

// How far a header matched the text it was given.
enum class Scan { Match, NeedMore, Mismatch };

// Reads a call's header at the start of a text that may still grow.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  size_t at() const { return i_; }
  bool end() const { return i_ >= s_.size(); }
  char peek() const { return s_[i_]; }
  void spaces() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  // `lit` here: Match (consumed), NeedMore (the text ends inside it), Mismatch.
  Scan literal(std::string_view lit) {
    const std::string_view rest = s_.substr(i_);
    if (rest.starts_with(lit)) {
      i_ += lit.size();
      return Scan::Match;
    }
    return lit.starts_with(rest) ? Scan::NeedMore : Scan::Mismatch;
  }
  // A JSON string, decoded.
  Scan string(std::string& out) {
    if (end()) return Scan::NeedMore;
    if (peek() != '"') return Scan::Mismatch;
    for (size_t j = i_ + 1; j < s_.size() && j - i_ < kMaxName; ++j) {
      if (s_[j] == '\\') {
        ++j;
      } else if (s_[j] == '"') {
        const json decoded = json::parse(s_.substr(i_, j + 1 - i_), nullptr, false);
        if (!decoded.is_string()) return Scan::Mismatch;
        out = decoded.get<std::string>();
        i_ = j + 1;
        return Scan::Match;
      }
    }
    return s_.size() - i_ < kMaxName ? Scan::NeedMore : Scan::Mismatch;
  }
  // Text up to `stop` (consumed), which must not hold spaces or markup.
  Scan name_until(std::string_view stop, std::string& out) {
    const size_t at = s_.find(stop, i_);
    std::string_view name = s_.substr(i_, at == std::string_view::npos ? std::string_view::npos : at - i_);
    if (at == std::string_view::npos) name.remove_suffix(partial_suffix(name, stop));
    if (name.size() > kMaxName || name.find_first_of(" \t\r\n<>{}\"") != std::string_view::npos) return Scan::Mismatch;
    if (at == std::string_view::npos) return Scan::NeedMore;
    if (name.empty()) return Scan::Mismatch;
    out = std::string(name);
    i_ = at + stop.size();
    return Scan::Match;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

#define ORCHARD_SCAN(expr)                     \
  do {                                         \
    const Scan scan_ = (expr);                 \
    if (scan_ != Scan::Match) return scan_;    \
  } while (false)

// The arguments must start here: an object, or its text as a JSON string.
Scan arguments_start(Cursor& c) {
  c.spaces();
  if (c.end()) return Scan::NeedMore;
  return c.peek() == '{' || c.peek() == '"' ? Scan::Match : Scan::Mismatch;
}

// {"name": "NAME", "arguments" (or "parameters"): — up to where the arguments start.
Scan json_header(Cursor& c, std::string& name) {
  c.spaces();
  ORCHARD_SCAN(c.literal("{"));
  c.spaces();
  ORCHARD_SCAN(c.literal("\"name\""));
  c.spaces();
  ORCHARD_SCAN(c.literal(":"));
  c.spaces();
  ORCHARD_SCAN(c.string(name));
  if (name.empty()) return Scan::Mismatch;
  c.spaces();
  ORCHARD_SCAN(c.literal(","));
  c.spaces();
  Cursor alternative = c;
  const Scan args = c.literal("\"arguments\"");
  if (args != Scan::Match) {
    const Scan params = alternative.literal("\"parameters\"");
    if (params == Scan::Match) c = alternative;
    else return args == Scan::NeedMore || params == Scan::NeedMore ? Scan::NeedMore : Scan::Mismatch;
  }
  c.spaces();
  ORCHARD_SCAN(c.literal(":"));
  return arguments_start(c);
}

// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n (V3, R1) or
// <｜tool▁call▁begin｜>NAME<｜tool▁sep｜> (V3.1), up to where the arguments start.
Scan deepseek_header(Cursor& c, std::string& name) {
  c.spaces();
  ORCHARD_SCAN(c.literal(kDeepSeekCallBegin));
  Cursor v3 = c;
  const Scan function = v3.literal(std::string("function") + std::string(kDeepSeekSep));
  if (function == Scan::NeedMore) return Scan::NeedMore;
  if (function == Scan::Match) {
    c = v3;
    ORCHARD_SCAN(c.name_until("\n", name));
    c.spaces();
    ORCHARD_SCAN(c.literal("```json"));
  } else {
    ORCHARD_SCAN(c.name_until(kDeepSeekSep, name));
  }
  return arguments_start(c);
}

// Mistral v11's NAME[ARGS] or NAME[CALL_ID]ID[ARGS] (the id is the model's; ours replace it),
// up to where the arguments start.
Scan mistral_name_header(Cursor& c, std::string& name) {
  // The name ends at the "[" that opens [ARGS] or [CALL_ID] (consumed with it).
  ORCHARD_SCAN(c.name_until("[", name));
  Cursor args = c;
  const Scan direct = args.literal(kMistralArgs.substr(1));
  if (direct == Scan::Match) {
    c = args;
  } else {
    const Scan with_id = c.literal(kMistralCallId.substr(1));
    if (with_id != Scan::Match) return direct == Scan::NeedMore || with_id == Scan::NeedMore ? Scan::NeedMore : Scan::Mismatch;
    std::string id;
    ORCHARD_SCAN(c.name_until(kMistralArgs, id));
  }
  return arguments_start(c);
}

#undef ORCHARD_SCAN

// JSON Schema as Harmony's TypeScript-like types.
std::string ts_type(const json& s, const std::string& indent);

// `text` as // comment lines.
std::string ts_comment(std::string_view text, const std::string& indent) {
  std::string out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    out += indent + "// " + std::string(text.substr(at, end - at)) + "\n";
    at = end + 1;
  }
  return out;
}

std::string ts_properties(const json& s, const std::string& indent) {
  std::string out;
  const json required = s.value("required", json::array());
  for (const auto& [name, sub] : s.at("properties").items()) {
    if (sub.is_object() && sub.contains("description") && sub["description"].is_string())
      out += ts_comment(sub["description"].get<std::string>(), indent);
    const bool optional = std::find(required.begin(), required.end(), json(name)) == required.end();
    out += indent + name + (optional ? "?" : "") + ": " + ts_type(sub, indent) + ",";
    if (sub.is_object() && sub.contains("default")) out += " // default: " + dump(sub["default"]);
    out += "\n";
  }
  return out;
}

std::string ts_union(const json& parts, const std::string& indent) {
  std::string out;
  for (const json& part : parts) out += (out.empty() ? "" : " | ") + ts_type(part, indent);
  return out;
}

std::string ts_type(const json& s, const std::string& indent) {
  if (!s.is_object()) return "any";
  if (s.contains("enum") && s["enum"].is_array()) {
    std::string out;
    for (const json& v : s["enum"]) out += (out.empty() ? "" : " | ") + dump(v);
    return out.empty() ? "never" : out;
  }
  if (s.contains("const")) return dump(s["const"]);
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key) && s[key].is_array()) return ts_union(s[key], indent);
  const json type = s.value("type", json());
  if (type.is_array()) {
    json parts = json::array();
    for (const json& t : type) parts.push_back({{"type", t}});
    return ts_union(parts, indent);
  }
  if (!type.is_string()) return "any";
  const std::string t = type.get<std::string>();
  if (t == "integer" || t == "number") return "number";
  if (t == "string" || t == "boolean" || t == "null") return t;
  if (t == "array") {
    if (!s.contains("items")) return "any[]";
    const std::string item = ts_type(s["items"], indent);
    return item.find(" | ") != std::string::npos ? "(" + item + ")[]" : item + "[]";
  }
  if (t == "object" && s.contains("properties") && s["properties"].is_object() && !s["properties"].empty())
    return "{\n" + ts_properties(s, indent + "  ") + indent + "}";
  if (t == "object") return "object";
  return "any";
}

}  // namespace

ToolStyle tool_style(ChatFamily family, std::string_view jinja) {
  switch (family) {
    case ChatFamily::Llama3: return ToolStyle::Llama3;
    case ChatFamily::Mistral: return jinja.find(kMistralArgs) != std::string_view::npos ? ToolStyle::MistralV11 : ToolStyle::Mistral;
    case ChatFamily::DeepSeek: return ToolStyle::DeepSeek;
    case ChatFamily::Harmony: return ToolStyle::Harmony;
    case ChatFamily::Llama2:
    case ChatFamily::ChatML: return ToolStyle::Hermes;
  }
  return ToolStyle::Hermes;
}

std::string harmony_namespace(std::span<const ToolFunction> tools) {
  std::string out;
  for (const ToolFunction& f : tools) {
    if (!f.description.empty()) out += ts_comment(f.description, "");
    const json& p = f.parameters;
    if (p.is_object() && p.contains("properties") && p["properties"].is_object() && !p["properties"].empty())
      out += "type " + f.name + " = (_: {\n" + ts_properties(p, "") + "}) => any;\n\n";
    else
      out += "type " + f.name + " = () => any;\n\n";
  }
  return out;
}

std::vector<ChatMessage> render_tool_turns(ToolStyle style, std::span<const ChatMessage> messages, std::span<const ToolFunction> tools) {
  std::vector<ChatMessage> out;
  bool after_tool = false;
  // Harmony names a result's author by the function called: the call with its id, else the
  // latest call.
  std::vector<const ChatToolCall*> called;
  auto called_name = [&](const std::string& id) -> std::string {
    for (const ChatToolCall* c : called)
      if (!id.empty() && c->id == id) return c->name;
    return called.empty() ? "tool" : called.back()->name;
  };
  for (const ChatMessage& m : messages) {
    const bool tool = m.role == "tool";
    if (!tool && after_tool && style == ToolStyle::DeepSeek) out.back().content += "<｜tool▁outputs▁end｜>";
    if (tool && style == ToolStyle::Llama3) {
      out.push_back({"ipython", m.content});
    } else if (tool && style == ToolStyle::Harmony) {
      out.push_back({"functions." + called_name(m.tool_call_id), m.content});
    } else if (tool && style == ToolStyle::Mistral) {
      out.push_back({"raw", "[TOOL_RESULTS] " + dump(ordered{{"content", m.content}, {"call_id", m.tool_call_id}}) + "[/TOOL_RESULTS]"});
    } else if (tool && style == ToolStyle::MistralV11) {
      out.push_back({"raw", "[TOOL_RESULTS]" + m.content + "[/TOOL_RESULTS]"});
    } else if (tool && style == ToolStyle::DeepSeek) {
      const std::string output = "<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>";
      if (after_tool)
        out.back().content += "\n" + output;
      else
        out.push_back({"raw", "<｜tool▁outputs▁begin｜>" + output});
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
    for (const ChatToolCall& c : m.tool_calls) called.push_back(&c);
    ChatMessage copy{m.role, m.content};
    if (style == ToolStyle::Harmony) {
      copy.tool_calls = m.tool_calls;
    } else if (!m.tool_calls.empty() && style == ToolStyle::Mistral) {
      ordered list = ordered::array();
      for (const ChatToolCall& c : m.tool_calls) {
        ordered call = {{"name", c.name}, {"arguments", arguments_json(c.arguments)}};
        if (!c.id.empty()) call["id"] = c.id;
        list.push_back(std::move(call));
      }
      copy.content += std::string(kMistralCalls) + " " + dump(list);
    } else if (style == ToolStyle::MistralV11) {
      for (const ChatToolCall& c : m.tool_calls)
        copy.content += std::string(kMistralCalls) + c.name + std::string(kMistralArgs) + dump(arguments_json(c.arguments));
    } else if (!m.tool_calls.empty() && style == ToolStyle::DeepSeek) {
      copy.content += kDeepSeekCallsBegin;
      for (size_t i = 0; i < m.tool_calls.size(); ++i) copy.content += (i ? "\n" : "") + deepseek_call(m.tool_calls[i]);
      copy.content += kDeepSeekCallsEnd;
    } else {
      for (const ChatToolCall& c : m.tool_calls) {
        if (!copy.content.empty()) copy.content += "\n";
        copy.content += style == ToolStyle::Hermes ? hermes_call(c) : llama3_call(c);
      }
    }
    out.push_back(std::move(copy));
  }
  if (after_tool && style == ToolStyle::DeepSeek) out.back().content += "<｜tool▁outputs▁end｜>";
  if (tools.empty()) return out;

  auto add_to_system = [&](const std::string& text) {
    if (!out.empty() && out.front().role == "system")
      out.front().content += "\n\n" + text;
    else
      out.insert(out.begin(), ChatMessage{"system", text});
  };
  switch (style) {
    case ToolStyle::Hermes: {
      std::string text =
          "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
      for (const ToolFunction& f : tools) text += "\n" + dump(tool_json(f));
      text +=
          "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
          "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
      add_to_system(text);
      return out;
    }
    case ToolStyle::Llama3: {
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
    case ToolStyle::Mistral:
    case ToolStyle::MistralV11: {
      // The tools stand right before the last user turn, as Mistral's templates put them (v3's
      // with a space after the marker, v11's without).
      ordered list = ordered::array();
      for (const ToolFunction& f : tools) list.push_back(tool_json(f));
      auto last_user = std::find_if(out.rbegin(), out.rend(), [](const ChatMessage& m) { return m.role == "user"; });
      out.insert(last_user == out.rend() ? out.end() : std::prev(last_user.base()),
                 ChatMessage{"raw", std::string(style == ToolStyle::Mistral ? "[AVAILABLE_TOOLS] " : "[AVAILABLE_TOOLS]") + dump(list) +
                                        "[/AVAILABLE_TOOLS]"});
      return out;
    }
    case ToolStyle::DeepSeek: {
      std::string text = "## Tools\n\nYou have access to the following tools:\n";
      for (const ToolFunction& f : tools) {
        text += "\n### " + f.name + "\n";
        if (!f.description.empty()) text += "Description: " + f.description + "\n";
        text += "\nParameters: " + dump(f.parameters.is_null() ? json::object() : f.parameters) + "\n";
      }
      text += fmt::format(
          "\nTo call tools, answer in exactly this form, one {}...{} block per call:\n{}{}function{}NAME\n```json\n"
          "ARGUMENTS\n```{}{}",
          kDeepSeekCallBegin, kDeepSeekCallEnd, kDeepSeekCallsBegin, kDeepSeekCallBegin, kDeepSeekSep, kDeepSeekCallEnd,
          kDeepSeekCallsEnd);
      add_to_system(text);
      return out;
    }
    case ToolStyle::Harmony:
      out.insert(out.begin(), ChatMessage{"tools", harmony_namespace(tools)});
      return out;
  }
  return out;
}

std::shared_ptr<Grammar> tool_call_grammar(ToolStyle style, std::span<const ToolFunction> allowed) {
  auto g = std::make_shared<Grammar>();
  // Each style's call: per function an opening (the style's prefix and the name, ending it
  // unambiguously, so no opening is a prefix of another), its arguments, what closes them, and a
  // suffix. The prefix is part of each opening because the grammar allows whitespace before a
  // part, which the formats don't allow inside their markers.
  std::string prefix, after, suffix;
  switch (style) {
    case ToolStyle::Hermes: prefix = std::string(kCallOpen) + "\n", after = "}", suffix = "\n" + std::string(kCallClose); break;
    case ToolStyle::Llama3: after = "}"; break;
    case ToolStyle::Mistral: prefix = std::string(kMistralCalls) + " [", after = "}", suffix = "]"; break;
    case ToolStyle::MistralV11: prefix = kMistralCalls; break;
    case ToolStyle::DeepSeek:
      prefix = fmt::format("{}{}function{}", kDeepSeekCallsBegin, kDeepSeekCallBegin, kDeepSeekSep);
      after = "\n```" + std::string(kDeepSeekCallEnd);
      suffix = kDeepSeekCallsEnd;
      break;
    case ToolStyle::Harmony: prefix = "<|channel|>commentary to=functions."; break;
  }
  std::vector<std::string> openings;
  std::vector<int32_t> thens;
  for (const ToolFunction& f : allowed) {
    const json parameters = f.parameters.is_null() ? json{{"type", "object"}, {"additionalProperties", false}} : f.parameters;
    GrammarNode rest;
    rest.kind = GrammarNode::Kind::Sequence;
    rest.parts = {compile_schema(*g, parameters)};
    if (!after.empty()) rest.parts.push_back(g->literal(after));
    thens.push_back(g->add(std::move(rest)));
    switch (style) {
      case ToolStyle::DeepSeek: openings.push_back(prefix + f.name + "\n```json\n"); break;
      case ToolStyle::Harmony: openings.push_back(prefix + f.name + " <|constrain|>json<|message|>"); break;
      case ToolStyle::MistralV11: openings.push_back(prefix + f.name + std::string(kMistralArgs)); break;
      default:
        openings.push_back(prefix + fmt::format("{{\"name\": {}, \"{}\": ", dump(json(f.name)),
                                                style == ToolStyle::Llama3 ? "parameters" : "arguments"));
    }
  }
  const int32_t call = g->literals(openings, thens);
  if (suffix.empty()) {
    g->finish(call);
    return g;
  }
  GrammarNode whole;
  whole.kind = GrammarNode::Kind::Sequence;
  whole.parts = {call, g->literal(suffix)};
  g->finish(g->add(std::move(whole)));
  return g;
}

std::vector<ChatToolCall> parse_tool_calls(ToolStyle style, std::string_view text, const std::string& id_prefix) {
  return ToolCallParser(style, id_prefix).whole(text).calls;
}

ToolCallParser::ToolCallParser(ToolStyle style, std::string id_prefix, ReplyOptions options)
    // Mistral's parser reads both forms of its calls.
    : style_(style == ToolStyle::MistralV11 ? ToolStyle::Mistral : style), id_prefix_(std::move(id_prefix)), options_(options) {
  const bool think_tags = options_.think_tags && style_ != ToolStyle::Harmony;
  mode_ = !think_tags ? after_thinking() : options_.thinking_open ? Mode::Thinking : Mode::ThinkOpen;
}

ToolCallParser::Mode ToolCallParser::after_thinking() const {
  if (style_ == ToolStyle::Harmony) return Mode::Header;
  return options_.calls ? Mode::Text : Mode::Plain;
}

bool ToolCallParser::in_call_region() const {
  return style_ != ToolStyle::Harmony && (mode_ == Mode::Header || mode_ == Mode::Arguments || mode_ == Mode::Trailer ||
                                          mode_ == Mode::Held || mode_ == Mode::Done);
}

// Whether the reply opens with <think>; spacing before it is no content.
bool ToolCallParser::step_think_open(bool at_end) {
  const size_t first = held_.find_first_not_of(kSpace);
  if (first == std::string::npos && !at_end) return false;
  const std::string_view rest = first == std::string::npos ? std::string_view() : std::string_view(held_).substr(first);
  if (rest.starts_with(kThinkOpen)) {
    held_.erase(0, first + kThinkOpen.size());
    mode_ = Mode::Thinking;
    return true;
  }
  if (!at_end && kThinkOpen.starts_with(rest)) return false;
  mode_ = after_thinking();
  return true;
}

// Reasoning up to </think>. Its spacing at either end is no reasoning: trailing spacing is held
// until reasoning follows it.
bool ToolCallParser::step_thinking(ReplyDelta& out, bool at_end) {
  const size_t close = held_.find(kThinkClose);
  const size_t take = close != std::string::npos ? close : held_.size() - (at_end ? 0 : partial_suffix(held_, kThinkClose));
  const std::string_view text = std::string_view(held_).substr(0, take);
  size_t begin = reasoning_started_ ? 0 : text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) begin = text.size();
  const size_t last = text.find_last_not_of(kSpace);
  const size_t end = last == std::string_view::npos || last < begin ? begin : last + 1;
  if (end > begin) {
    out.reasoning += text.substr(begin, end - begin);
    reasoning_started_ = true;
  }
  if (close == std::string::npos) {
    held_.erase(0, at_end ? held_.size() : end > begin || !reasoning_started_ ? end : 0);
    return false;
  }
  held_.erase(0, close + kThinkClose.size());
  skip_space_ = true;
  mode_ = after_thinking();
  return true;
}

void ToolCallParser::start_call(ReplyDelta& out, std::string name) {
  ChatToolCall call;
  call.id = fmt::format("{}{}", id_prefix_, calls_.size());
  call.name = std::move(name);
  out.calls.push_back({static_cast<int>(calls_.size()), call.id, call.name, {}});
  calls_.push_back(std::move(call));
}

void ToolCallParser::add_arguments(ReplyDelta& out, std::string_view text) {
  if (text.empty() || calls_.empty()) return;
  calls_.back().arguments += text;
  const int index = static_cast<int>(calls_.size()) - 1;
  if (!out.calls.empty() && out.calls.back().index == index)
    out.calls.back().arguments += text;
  else
    out.calls.push_back({index, {}, {}, std::string(text)});
}

void ToolCallParser::add_content(ReplyDelta& out, std::string_view text) {
  if (!content_started_) {
    // Spacing before a call is no content: held until something else comes.
    space_ += text;
    if (space_.find_first_not_of(" \t\r\n") == std::string::npos) return;
    content_started_ = true;
    out.content += std::exchange(space_, {});
    return;
  }
  out.content += text;
}

// Text until a call opens: content, less what could be the start of the opener.
bool ToolCallParser::step_text(ReplyDelta& out, bool at_end) {
  if (style_ == ToolStyle::Llama3) {
    // A reply that opens with '{' (or the python tag) is a call until it fails to parse.
    if (started_) {
      out.content += std::exchange(held_, {});
      return false;
    }
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) {
      if (at_end) out.content += std::exchange(held_, {});
      return false;
    }
    started_ = true;
    const std::string_view rest = std::string_view(held_).substr(first);
    if (rest.starts_with('{') || kPythonTag.starts_with(rest.substr(0, kPythonTag.size()))) {
      region_ = held_;
      mode_ = Mode::Header;
      return true;
    }
    out.content += std::exchange(held_, {});
    return false;
  }
  const std::string_view opener = style_ == ToolStyle::Hermes ? kCallOpen : style_ == ToolStyle::Mistral ? kMistralCalls : kDeepSeekCallsBegin;
  const size_t open = held_.find(opener);
  if (open != std::string::npos) {
    add_content(out, std::string_view(held_).substr(0, open));
    space_.clear();
    held_.erase(0, open);
    region_ = held_;
    held_.erase(0, opener.size());
    mode_ = Mode::Header;
    return true;
  }
  const size_t keep = at_end ? 0 : partial_suffix(held_, opener);
  add_content(out, std::string_view(held_).substr(0, held_.size() - keep));
  held_.erase(0, held_.size() - keep);
  return false;
}

bool ToolCallParser::step_header(ReplyDelta& out, bool at_end) {
  Cursor c(held_);
  std::string name;
  Scan scan = Scan::Mismatch;
  switch (style_) {
    case ToolStyle::Llama3:
      c.spaces();
      if (c.literal(kPythonTag) == Scan::NeedMore) {
        scan = Scan::NeedMore;
        break;
      }
      scan = json_header(c, name);
      break;
    case ToolStyle::Mistral:
      c.spaces();
      if (c.end()) {
        scan = Scan::NeedMore;
      } else if (c.peek() == '[' || c.peek() == '{') {
        if (calls_.empty() && c.peek() == '[') c.literal("[");
        scan = json_header(c, name);
      } else {
        mistral_names_ = true;
        scan = mistral_name_header(c, name);
      }
      break;
    case ToolStyle::DeepSeek: scan = deepseek_header(c, name); break;
    default: scan = json_header(c, name); break;
  }
  if (scan == Scan::NeedMore && !at_end) return false;
  if (scan != Scan::Match) {
    mode_ = Mode::Held;
    return false;
  }
  held_.erase(0, c.at());
  start_call(out, std::move(name));
  depth_ = 0;
  in_string_ = escaped_ = string_value_ = object_closed_ = false;
  string_args_.clear();
  mode_ = Mode::Arguments;
  return true;
}

// The arguments value, streamed as written; it ends where its object (or string) closes.
bool ToolCallParser::step_arguments(ReplyDelta& out) {
  size_t i = 0;
  bool done = false;
  for (; i < held_.size() && !done; ++i) {
    const char ch = held_[i];
    if (depth_ == 0 && !in_string_) {  // the value's first byte (json_header saw it is { or ")
      if (ch == '"') string_value_ = in_string_ = true;
      else depth_ = 1;
      continue;
    }
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (ch == '\\') escaped_ = true;
      else if (ch == '"') {
        in_string_ = false;
        done = string_value_;
      }
      continue;
    }
    if (ch == '"') in_string_ = true;
    else if (ch == '{' || ch == '[') ++depth_;
    else if ((ch == '}' || ch == ']') && --depth_ == 0) done = true;
  }
  if (string_value_) {
    // Arguments given as a JSON string come out decoded, in one piece, once it closes.
    string_args_ += held_.substr(0, i);
    if (done) {
      const json decoded = json::parse(string_args_, nullptr, false);
      add_arguments(out, decoded.is_string() ? decoded.get<std::string>() : string_args_);
    }
  } else {
    add_arguments(out, std::string_view(held_).substr(0, i));
  }
  held_.erase(0, i);
  if (done) {
    mode_ = Mode::Trailer;
    return true;
  }
  return false;
}

// After a call's arguments: what closes it, then the next call's opener or the region's end.
bool ToolCallParser::step_trailer(bool at_end) {
  if (style_ == ToolStyle::Llama3) {
    held_.clear();
    mode_ = Mode::Done;
    return false;
  }
  if (style_ == ToolStyle::Mistral && !mistral_names_) {
    // The rest of the call's object ("id" may follow the arguments), then "," or "]".
    size_t i = 0;
    for (; i < held_.size() && !object_closed_; ++i) {
      const char ch = held_[i];
      if (in_string_) {
        if (escaped_) escaped_ = false;
        else if (ch == '\\') escaped_ = true;
        else if (ch == '"') in_string_ = false;
      } else if (ch == '"') {
        in_string_ = true;
      } else if (ch == '{' || ch == '[') {
        ++depth_;
      } else if (ch == '}' || ch == ']') {
        object_closed_ = depth_-- == 0;
      }
    }
    held_.erase(0, i);
    if (!object_closed_) return false;
    const size_t next = held_.find_first_not_of(" \t\r\n");
    if (next == std::string::npos) return false;
    if (held_[next] == ',') {
      held_.erase(0, next + 1);
      mode_ = Mode::Header;
      return true;
    }
    held_.clear();
    mode_ = Mode::Done;
    return false;
  }
  const std::string_view next = style_ == ToolStyle::Hermes ? kCallOpen : style_ == ToolStyle::Mistral ? kMistralCalls : kDeepSeekCallBegin;
  const size_t open = held_.find(next);
  const size_t end = style_ == ToolStyle::DeepSeek ? held_.find(kDeepSeekCallsEnd) : std::string::npos;
  if (end != std::string::npos && (open == std::string::npos || end < open)) {
    held_.clear();
    mode_ = Mode::Done;
    return false;
  }
  if (open != std::string::npos) {
    // DeepSeek's header starts at its call marker; Hermes's and Mistral's after it.
    held_.erase(0, style_ == ToolStyle::DeepSeek ? open : open + next.size());
    mode_ = Mode::Header;
    return true;
  }
  if (!at_end) held_.erase(0, held_.size() - partial_suffix(held_, next));
  return false;
}

// Harmony: a message's header (<|start|>assistant, <|channel|>NAME, to=RECIPIENT,
// <|constrain|>json), up to <|message|>. The reply starts inside the first assistant header.
bool ToolCallParser::step_harmony_header(ReplyDelta& out, bool at_end) {
  const size_t first = held_.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return false;
  const std::string_view rest = std::string_view(held_).substr(first);
  const bool header = rest.starts_with("<|start|>") || rest.starts_with("<|channel|>") || rest.starts_with(" to=") ||
                      rest.starts_with("to=");
  if (!header) {
    const bool maybe = std::string_view("<|start|>").starts_with(rest) || std::string_view("<|channel|>").starts_with(rest);
    if (maybe && !at_end) return false;
    // Text outside any header (a model that skips the format) is content.
    channel_ = Channel::Content;
    mode_ = Mode::Body;
    return true;
  }
  const size_t body = held_.find(kHarmonyMessage);
  if (body == std::string::npos) {
    if (at_end) held_.clear();
    return false;
  }
  const std::string_view head = std::string_view(held_).substr(0, body);
  auto word_after = [&](std::string_view key) -> std::string {
    const size_t at = head.find(key);
    if (at == std::string_view::npos) return {};
    const std::string_view word = head.substr(at + key.size());
    return std::string(word.substr(0, word.find_first_of(" <\t\r\n")));
  };
  const std::string channel = word_after("<|channel|>");
  std::string recipient = word_after("to=");
  held_.erase(0, body + kHarmonyMessage.size());
  mode_ = Mode::Body;
  if (!recipient.empty() && recipient != "assistant") {
    if (recipient.starts_with("functions.")) recipient.erase(0, 10);
    channel_ = Channel::Call;
    start_call(out, recipient);
  } else {
    channel_ = channel == "analysis" ? Channel::Reasoning : Channel::Content;
  }
  return true;
}

bool ToolCallParser::step_harmony_body(ReplyDelta& out, bool at_end) {
  size_t end = std::string::npos, marker = 0;
  for (std::string_view m : kHarmonyBodyEnds) {
    const size_t at = held_.find(m);
    if (at < end) end = at, marker = m.size();
  }
  size_t take = end;
  if (end == std::string::npos) {
    // Hold back what could be the start of a marker.
    size_t keep = 0;
    if (!at_end)
      for (std::string_view m : kHarmonyBodyEnds) keep = std::max(keep, partial_suffix(held_, m));
    take = held_.size() - keep;
  }
  const std::string_view text = std::string_view(held_).substr(0, take);
  if (channel_ == Channel::Reasoning) out.reasoning += text;
  else if (channel_ == Channel::Content) out.content += text;
  else add_arguments(out, text);
  if (end == std::string::npos) {
    held_.erase(0, take);
    return false;
  }
  // The next message's header starts at <|start|> or <|channel|>; other markers just end this one.
  const std::string_view m = std::string_view(held_).substr(end, marker);
  held_.erase(0, m == "<|start|>" || m == "<|channel|>" ? end : end + marker);
  mode_ = Mode::Header;
  return true;
}

void ToolCallParser::run(ReplyDelta& out, bool at_end) {
  for (bool more = true; more;) {
    if (skip_space_) {
      held_.erase(0, std::min(held_.find_first_not_of(kSpace), held_.size()));
      skip_space_ = held_.empty();
    }
    switch (mode_) {
      case Mode::ThinkOpen: more = step_think_open(at_end); break;
      case Mode::Thinking: more = step_thinking(out, at_end); break;
      case Mode::Plain: out.content += std::exchange(held_, {}); more = false; break;
      case Mode::Text: more = step_text(out, at_end); break;
      case Mode::Header:
        more = style_ == ToolStyle::Harmony ? step_harmony_header(out, at_end) : step_header(out, at_end);
        break;
      case Mode::Body: more = step_harmony_body(out, at_end); break;
      case Mode::Arguments: more = step_arguments(out); break;
      case Mode::Trailer: more = step_trailer(at_end); break;
      case Mode::Held:
      case Mode::Done: held_.clear(); more = false; break;
    }
  }
}

ReplyDelta ToolCallParser::push(std::string_view text) {
  ReplyDelta out;
  held_ += text;
  if (in_call_region()) region_ += text;
  run(out, false);
  return out;
}

ToolCallParser::Finished ToolCallParser::finish() {
  Finished f;
  run(f.last, true);
  f.last.content += std::exchange(space_, {});
  if (style_ != ToolStyle::Harmony && (mode_ == Mode::Held || mode_ == Mode::Header) && calls_.empty()) {
    // A region whose calls did not stream: read whole, else it was content after all.
    std::vector<ChatToolCall> calls = region_calls(style_, region_);
    if (calls.empty()) f.last.content += region_;
    for (ChatToolCall& c : calls) {
      start_call(f.last, std::move(c.name));
      add_arguments(f.last, c.arguments);
    }
  }
  for (size_t i = 0; i < calls_.size(); ++i) {
    if (!trim(calls_[i].arguments).empty()) continue;
    // A call without arguments takes none.
    calls_[i].arguments = "{}";
    f.last.calls.push_back({static_cast<int>(i), {}, {}, "{}"});
  }
  held_.clear();
  region_.clear();
  mode_ = Mode::Done;
  f.calls = calls_;
  return f;
}

ToolCallParser::Result ToolCallParser::whole(std::string_view text) {
  ReplyDelta first = push(text);
  Finished rest = finish();
  Result r{first.content + rest.last.content, first.reasoning + rest.last.reasoning, std::move(rest.calls)};
  if (!r.calls.empty() && r.content.find_first_not_of(" \t\r\n") == std::string::npos) r.content.clear();
  return r;
}

}  // namespace orchard::serve::structured
