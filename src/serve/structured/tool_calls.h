#pragma once
// Tool calling in the chat template's own style: tool definitions written into the prompt,
// earlier calls and their results turned into turns the template renders, the model's calls
// parsed out of its text (whole or as it streams), and the grammar of a valid call for
// tool_choice "required" or a named function.
//
// Styles, by chat family:
//   Hermes (ChatML/Qwen, and Llama 2 / Mistral, which have no tool format of their own): tools
//     listed in <tools></tools> in the system turn; a call is
//     <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>; results come back in a user
//     turn as <tool_response>\n...\n</tool_response>.
//   Llama 3 (3.1's JSON tool calling): tools listed in the first user turn; a call is the whole
//     reply, {"name": ..., "parameters": {...}}; results come back as "ipython" turns.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/chat_templates.h"
#include "serve/structured/grammar.h"

namespace orchard::serve::structured {

struct ToolFunction {
  std::string name;
  std::string description;
  nlohmann::json parameters;  // a JSON schema of the arguments (an object)
};

enum class ToolStyle { Hermes, Llama3 };
ToolStyle tool_style(ChatFamily family);

// The messages to render: tools described where the style puts them (when `tools` is not
// empty), assistant turns' tool_calls written into their content, tool turns as the style's
// result turns. Roles are then system/user/assistant (and "ipython" for Llama 3).
std::vector<ChatMessage> render_tool_turns(ToolStyle style, std::span<const ChatMessage> messages, std::span<const ToolFunction> tools);

// The grammar of one call of one of `allowed` (each a function of `tools`), arguments following
// its parameters schema. Throws SchemaError for a schema the grammar can't honour.
std::shared_ptr<Grammar> tool_call_grammar(ToolStyle style, std::span<const ToolFunction> allowed);

// Splits a reply into content and calls. Fed the text as it comes (push), it returns the
// content that is certainly not part of a call; finish() returns the rest of the content and
// the calls. When a call does not parse, its text counts as content and no call is returned.
class ToolCallParser {
 public:
  // Call ids are `id_prefix` followed by the call's index.
  ToolCallParser(ToolStyle style, std::string id_prefix);
  std::string push(std::string_view text);
  struct Result {
    std::string content;  // what push() had not returned yet
    std::vector<ChatToolCall> calls;
  };
  Result finish();
  // A whole reply at once (push then finish); content is empty when only spacing surrounds the calls.
  Result whole(std::string_view text);

 private:
  ToolStyle style_;
  std::string id_prefix_;
  std::string held_;       // text not returned yet
  bool in_calls_ = false;  // a call has started: everything from here is held
  bool started_ = false;   // Llama 3: the reply's first non-space byte was seen
};

// The calls in `text` as the style writes them (empty when it holds none, or one doesn't parse).
std::vector<ChatToolCall> parse_tool_calls(ToolStyle style, std::string_view text, const std::string& id_prefix);

}  // namespace orchard::serve::structured
