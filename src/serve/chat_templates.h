#pragma once
// Chat prompts for the common model families, rendered in C++ (no Jinja): the family is picked
// from the model's tokenizer.chat_template metadata, else from its vocabulary's special tokens,
// else from its architecture.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace orchard::serve {

enum class ChatFamily {
  Llama2,   // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] assistant </s>
  Llama3,   // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  ChatML,   // <|im_start|>role\ncontent<|im_end|>\n (Qwen)
  Mistral,  // [INST] user [/INST] assistant</s> (system text leads the first user turn)
  DeepSeek, // system<｜User｜>user<｜Assistant｜>assistant<｜end▁of▁sentence｜> (V3, R1)
  Harmony,  // <|start|>role<|channel|>...<|message|>content<|end|> (gpt-oss; OpenAI's Harmony)
};

// A call an assistant turn made (OpenAI's message.tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessage {
  // {role, content}, as before turns had tool calls (no initializer warnings at those sites).
  ChatMessage(std::string role_ = {}, std::string content_ = {}) : role(std::move(role_)), content(std::move(content_)) {}

  // "system", "user" or "assistant"; "tool" before structured::render_tool_turns, which may
  // also write "raw" (text put into the prompt as is: Mistral, DeepSeek), "ipython" (Llama 3),
  // "tools" (Harmony: the functions namespace) and "functions.NAME" (Harmony: a result).
  std::string role;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant turns that called tools
  std::string tool_call_id;              // tool turns: the call answered
};

// "llama2", "llama3", "chatml", "mistral", "deepseek", "harmony"
std::string_view chat_family_name(ChatFamily family);
// Inverse of chat_family_name; nullopt for any other text.
std::optional<ChatFamily> parse_chat_family(std::string_view name);

// The family a Jinja chat template belongs to, recognised by its markers; nullopt when none
// matches.
std::optional<ChatFamily> family_from_template(std::string_view jinja);
// The family whose turn markers are special tokens of this vocabulary; nullopt when none are.
std::optional<ChatFamily> family_from_vocab(const model::Tokenizer& tokenizer);
// The family an architecture's models use by default: qwen* → ChatML, deepseek* → DeepSeek,
// gpt-oss → Harmony, anything else → Llama2.
ChatFamily family_from_architecture(std::string_view arch);
// Template metadata first (may be empty), then vocabulary, then architecture.
ChatFamily pick_chat_family(std::string_view jinja, const model::Tokenizer& tokenizer, std::string_view arch);

// Whether a Jinja chat template belongs to a model that thinks in <think>...</think> first
// (DeepSeek R1, Qwen3, QwQ).
bool template_thinks(std::string_view jinja);
// Whether a Jinja chat template opens the think block itself where the reply starts (DeepSeek
// R1's newer template writes "<｜Assistant｜><think>\n", QwQ's "<|im_start|>assistant\n<think>\n"):
// the reply then starts inside its reasoning, without a <think> of its own.
bool template_opens_thinking(std::string_view jinja);
// Whether a Jinja chat template is Mistral's newer kind (v7 tokenizers on, the v11 ones among
// them: Mistral Small 3.x, Magistral, Devstral), which writes system text as
// [SYSTEM_PROMPT]...[/SYSTEM_PROMPT].
bool template_has_system_prompt(std::string_view jinja);
// Whether a Jinja chat template lets the caller turn thinking off (Qwen3's enable_thinking: false
// writes an empty <think></think> block where the reply starts).
bool template_can_skip_thinking(std::string_view jinja);

// What a prompt asks of a reasoning model.
struct RenderOptions {
  std::string_view reasoning_effort = "medium";  // Harmony's "Reasoning:" line: low, medium or high
  // ChatML: the reply starts after an empty think block, as Qwen3's template writes it with
  // enable_thinking false, so the model answers without thinking.
  bool skip_thinking = false;
  // ChatML, DeepSeek: the prompt ends in "<think>\n", as templates that open the think block
  // write it (template_opens_thinking); skip_thinking wins.
  bool open_thinking = false;
  // Mistral: the newer templates' form (template_has_system_prompt): each system message as
  // [SYSTEM_PROMPT]...[/SYSTEM_PROMPT] where it stands, user turns as [INST]...[/INST] without
  // the spaces of the older ones, replies as they are followed by EOS.
  bool system_prompt_tags = false;
};

// The prompt text for `messages`, ending where the assistant's next reply starts. It leaves out
// the leading BOS token (the tokenizer adds it when the model wants one) but writes the special
// tokens between turns, so it must be encoded with parse_special. `eos` is the text of the end
// of sequence token, closing earlier assistant turns in the Llama 2 and Mistral formats. Roles
// other than system/user/assistant are the caller's to refuse. In the families without a system
// role (Llama 2, Mistral) system text leads the next user turn, or stands as a user turn of its
// own when no user turn follows it. Harmony writes its system message (the reasoning effort,
// its channels) and puts system/developer text in the developer message's instructions; earlier
// assistant turns are final-channel messages, their tool_calls commentary messages to
// functions.NAME.
std::string render_chat(ChatFamily family, std::span<const ChatMessage> messages, std::string_view bos,
                        std::string_view eos, const RenderOptions& options = {});

}  // namespace orchard::serve
