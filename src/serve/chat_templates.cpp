#include "serve/chat_templates.h"

#include <array>
#include <utility>

namespace orchard::serve {
namespace {

constexpr std::array<std::pair<ChatFamily, std::string_view>, 4> kFamilyNames = {{
    {ChatFamily::Llama2, "llama2"},
    {ChatFamily::Llama3, "llama3"},
    {ChatFamily::ChatML, "chatml"},
    {ChatFamily::Mistral, "mistral"},
}};

// Turn markers that identify a family; checked in this order because Llama 2 templates contain
// Mistral's "[INST]" too.
constexpr std::string_view kLlama3Marker = "<|start_header_id|>";
constexpr std::string_view kChatMLMarker = "<|im_start|>";
constexpr std::string_view kInstMarker = "[INST]";
constexpr std::string_view kLlama2SystemMarker = "<<SYS>>";

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
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

std::string render_chatml(std::span<const ChatMessage> messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
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
    if (text == kChatMLMarker) found = ChatFamily::ChatML;
    if (text == kInstMarker && !found) found = ChatFamily::Mistral;
  }
  return found;
}

ChatFamily family_from_architecture(std::string_view arch) {
  return arch.starts_with("qwen") ? ChatFamily::ChatML : ChatFamily::Llama2;
}

ChatFamily pick_chat_family(std::string_view jinja, const model::Tokenizer& tokenizer, std::string_view arch) {
  if (auto family = family_from_template(jinja)) return *family;
  if (auto family = family_from_vocab(tokenizer)) return *family;
  return family_from_architecture(arch);
}

std::string render_chat(ChatFamily family, std::span<const ChatMessage> messages, std::string_view bos,
                        std::string_view eos) {
  switch (family) {
    case ChatFamily::Llama3: return render_llama3(messages);
    case ChatFamily::ChatML: return render_chatml(messages);
    case ChatFamily::Llama2:
    case ChatFamily::Mistral: return render_inst(family, messages, bos, eos);
  }
  return render_chatml(messages);
}

}  // namespace orchard::serve
