#include "serve/chat_templates.h"

#include <array>
#include <utility>

namespace orchard::serve {
namespace {

constexpr std::array<std::pair<ChatFamily, std::string_view>, 6> kFamilyNames = {{
    {ChatFamily::Llama2, "llama2"},
    {ChatFamily::Llama3, "llama3"},
    {ChatFamily::ChatML, "chatml"},
    {ChatFamily::Mistral, "mistral"},
    {ChatFamily::DeepSeek, "deepseek"},
    {ChatFamily::Harmony, "harmony"},
}};

// Turn markers that identify a family; checked in this order because Llama 2 templates contain
// Mistral's "[INST]" too.
constexpr std::string_view kLlama3Marker = "<|start_header_id|>";
constexpr std::string_view kChatMLMarker = "<|im_start|>";
constexpr std::string_view kInstMarker = "[INST]";
constexpr std::string_view kLlama2SystemMarker = "<<SYS>>";
constexpr std::string_view kHarmonyMarker = "<|channel|>";
constexpr std::string_view kDeepSeekUser = "<｜User｜>";
constexpr std::string_view kDeepSeekAssistant = "<｜Assistant｜>";

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// An earlier reply as reasoning models' templates give it back (DeepSeek R1's, Qwen3's): without
// its thinking, which only the reply being written needs.
std::string_view without_thinking(std::string_view reply) {
  constexpr std::string_view kThinkEnd = "</think>";
  const size_t end = reply.rfind(kThinkEnd);
  return end == std::string_view::npos ? reply : trim(reply.substr(end + kThinkEnd.size()));
}

std::string render_llama3(std::span<const ChatMessage> messages) {
  std::string out;
  auto turn = [&](std::string_view role) {
    out += kLlama3Marker;
    out += role;
    out += "<|end_header_id|>\n\n";
  };
  for (const ChatMessage& m : messages) {
    turn(m.role);
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  turn("assistant");
  return out;
}

constexpr std::string_view kOpenThinking = "<think>\n";

std::string render_chatml(std::span<const ChatMessage> messages, bool skip_thinking, bool open_thinking) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n";
    out += m.role == "assistant" ? without_thinking(m.content) : std::string_view(m.content);
    out += "<|im_end|>\n";
  }
  out += "<|im_start|>assistant\n";
  if (skip_thinking) out += "<think>\n\n</think>\n\n";
  else if (open_thinking) out += kOpenThinking;
  return out;
}

// Llama 2 and Mistral share the [INST] ... [/INST] turns; they differ in how system text is
// wrapped, in the spaces around replies, and in Llama 2 opening every user turn after the first
// with BOS (as Meta's reference template does; the first BOS is the tokenizer's to add).
std::string render_inst(ChatFamily family, std::span<const ChatMessage> messages, std::string_view bos,
                        std::string_view eos) {
  const bool llama2 = family == ChatFamily::Llama2;
  std::string out;
  std::string system;
  auto user_turn = [&](std::string_view content) {
    std::string text;
    if (!system.empty()) text = llama2 ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" : system + "\n\n";
    system.clear();
    text += content;
    if (llama2 && !out.empty()) out += bos;
    out += "[INST] ";
    out += llama2 ? trim(text) : std::string_view(text);
    out += " [/INST]";
  };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (!system.empty()) system += "\n\n";
      system += m.content;
    } else if (m.role == "user") {
      user_turn(m.content);
    } else if (m.role == "raw") {
      out += m.content;
    } else {
      if (!system.empty()) user_turn("");
      if (llama2) {
        out += ' ';
        out += trim(m.content);
        out += ' ';
      } else {
        out += m.content;
      }
      out += eos;
    }
  }
  if (!system.empty()) user_turn("");
  return out;
}

// Mistral's newer templates (Mistral Small 3.x, Magistral, Devstral): system text in its own
// tags where it stands, the other turns without spaces around their text.
std::string render_mistral_system_prompt(std::span<const ChatMessage> messages, std::string_view eos) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += "[SYSTEM_PROMPT]" + m.content + "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      out += "[INST]" + m.content + "[/INST]";
    } else if (m.role == "raw") {
      out += m.content;
    } else {
      out += m.content;
      out += eos;
    }
  }
  return out;
}

// DeepSeek V3/R1: the system text first, then <｜User｜> and <｜Assistant｜> turns, each reply
// closed with the end-of-sentence token.
std::string render_deepseek(std::span<const ChatMessage> messages, std::string_view eos, bool open_thinking) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!out.empty()) out += "\n\n";
    out += m.content;
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += kDeepSeekUser;
      out += m.content;
    } else if (m.role == "assistant") {
      out += kDeepSeekAssistant;
      out += without_thinking(m.content);
      out += eos;
    } else if (m.role == "raw") {
      out += m.content;
    }
  }
  out += kDeepSeekAssistant;
  if (open_thinking) out += kOpenThinking;
  return out;
}

// OpenAI's Harmony format (gpt-oss): a system message of its own (the reasoning effort and the
// channels), the caller's system text as the developer message's instructions with the tools'
// namespace, then the conversation; the prompt ends where the assistant's next message starts.
std::string render_harmony(std::span<const ChatMessage> messages, std::string_view effort) {
  std::string instructions, tools;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" || m.role == "developer") instructions += (instructions.empty() ? "" : "\n\n") + m.content;
    if (m.role == "tools") tools += m.content;
  }
  std::string out =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\n\nReasoning: " +
      std::string(effort) +
      "\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.";
  if (!tools.empty()) out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";
  if (!instructions.empty() || !tools.empty()) {
    out += "<|start|>developer<|message|>";
    if (!instructions.empty()) out += "# Instructions\n\n" + instructions;
    if (!instructions.empty() && !tools.empty()) out += "\n\n";
    if (!tools.empty()) out += "# Tools\n\n## functions\n\nnamespace functions {\n\n" + tools + "} // namespace functions";
    out += "<|end|>";
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "assistant") {
      // Text beside calls is a preamble (commentary); alone it is the final answer.
      if (!m.content.empty() || m.tool_calls.empty())
        out += std::string("<|start|>assistant<|channel|>") + (m.tool_calls.empty() ? "final" : "commentary") + "<|message|>" +
               m.content + "<|end|>";
      for (const ChatToolCall& c : m.tool_calls)
        out += "<|start|>assistant<|channel|>commentary to=functions." + c.name + " <|constrain|>json<|message|>" + c.arguments +
               "<|call|>";
    } else if (m.role.starts_with("functions.")) {
      out += "<|start|>" + m.role + " to=assistant<|channel|>commentary<|message|>" + m.content + "<|end|>";
    }
  }
  out += "<|start|>assistant";
  return out;
}

}  // namespace

std::string_view chat_family_name(ChatFamily family) {
  for (const auto& [f, name] : kFamilyNames)
    if (f == family) return name;
  return "unknown";
}

std::optional<ChatFamily> parse_chat_family(std::string_view name) {
  for (const auto& [f, n] : kFamilyNames)
    if (n == name) return f;
  return std::nullopt;
}

std::optional<ChatFamily> family_from_template(std::string_view jinja) {
  if (jinja.find(kHarmonyMarker) != std::string_view::npos) return ChatFamily::Harmony;
  if (jinja.find(kDeepSeekAssistant) != std::string_view::npos) return ChatFamily::DeepSeek;
  if (jinja.find(kLlama3Marker) != std::string_view::npos) return ChatFamily::Llama3;
  if (jinja.find(kChatMLMarker) != std::string_view::npos) return ChatFamily::ChatML;
  if (jinja.find(kInstMarker) != std::string_view::npos)
    return jinja.find(kLlama2SystemMarker) != std::string_view::npos ? ChatFamily::Llama2 : ChatFamily::Mistral;
  return std::nullopt;
}

std::optional<ChatFamily> family_from_vocab(const model::Tokenizer& tokenizer) {
  std::optional<ChatFamily> found;
  for (model::TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    const model::TokenKind kind = tokenizer.token_kind(id);
    if (kind != model::TokenKind::Control && kind != model::TokenKind::UserDefined) continue;
    const std::string& text = tokenizer.token_text(id);
    if (text == kLlama3Marker) return ChatFamily::Llama3;
    if (text == kHarmonyMarker) return ChatFamily::Harmony;
    if (text == kDeepSeekAssistant) return ChatFamily::DeepSeek;
    if (text == kChatMLMarker) found = ChatFamily::ChatML;
    if (text == kInstMarker && !found) found = ChatFamily::Mistral;
  }
  return found;
}

ChatFamily family_from_architecture(std::string_view arch) {
  if (arch.starts_with("qwen")) return ChatFamily::ChatML;
  if (arch.starts_with("deepseek")) return ChatFamily::DeepSeek;
  if (arch == "gpt-oss") return ChatFamily::Harmony;
  return ChatFamily::Llama2;
}

ChatFamily pick_chat_family(std::string_view jinja, const model::Tokenizer& tokenizer, std::string_view arch) {
  if (auto family = family_from_template(jinja)) return *family;
  if (auto family = family_from_vocab(tokenizer)) return *family;
  return family_from_architecture(arch);
}

bool template_thinks(std::string_view jinja) { return jinja.find("</think>") != std::string_view::npos; }

bool template_opens_thinking(std::string_view jinja) {
  // The generation prompt's text, its newlines either escaped in a Jinja string or written out.
  for (std::string_view marker : {"<｜Assistant｜><think>", "<|im_start|>assistant\\n<think>", "<|im_start|>assistant\n<think>"})
    if (jinja.find(marker) != std::string_view::npos) return true;
  return false;
}

bool template_has_system_prompt(std::string_view jinja) { return jinja.find("[SYSTEM_PROMPT]") != std::string_view::npos; }

bool template_can_skip_thinking(std::string_view jinja) { return jinja.find("enable_thinking") != std::string_view::npos; }

std::string render_chat(ChatFamily family, std::span<const ChatMessage> messages, std::string_view bos,
                        std::string_view eos, const RenderOptions& options) {
  switch (family) {
    case ChatFamily::Llama3: return render_llama3(messages);
    case ChatFamily::ChatML: return render_chatml(messages, options.skip_thinking, options.open_thinking);
    case ChatFamily::Mistral:
      if (options.system_prompt_tags) return render_mistral_system_prompt(messages, eos);
      return render_inst(family, messages, bos, eos);
    case ChatFamily::Llama2: return render_inst(family, messages, bos, eos);
    case ChatFamily::DeepSeek: return render_deepseek(messages, eos, options.open_thinking);
    case ChatFamily::Harmony: return render_harmony(messages, options.reasoning_effort);
  }
  return render_chatml(messages, options.skip_thinking, options.open_thinking);
}

}  // namespace orchard::serve
