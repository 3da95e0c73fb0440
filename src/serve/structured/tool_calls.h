#pragma once
// Tool calling in the chat template's own style: tool definitions written into the prompt,
// earlier calls and their results turned into turns the template renders, the model's calls
// parsed out of its text (whole or as it streams), and the grammar of a valid call for
// tool_choice "required" or a named function.
//
// Styles, by chat family:
//   Hermes (ChatML/Qwen, and Llama 2, which has no tool format of its own): tools listed in
//     <tools></tools> in the system turn; a call is
//     <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>; results come back in a user
//     turn as <tool_response>\n...\n</tool_response>.
//   Llama 3 (3.1's JSON tool calling): tools listed in the first user turn; a call is the whole
//     reply, {"name": ..., "parameters": {...}}; results come back as "ipython" turns.
//   Mistral (v3 tokenizer): [AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS] before the last user turn;
//     calls are [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]; results are
//     [TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS].
//   DeepSeek (V3/R1): tools described in the system text; calls are
//     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//     (V3.1's NAME<｜tool▁sep｜>{...} is read too); results are <｜tool▁output▁begin｜> blocks.
//   Harmony (gpt-oss): tools in the developer message's `namespace functions`, TypeScript-like;
//     a call is a commentary message to=functions.NAME; results are messages from
//     functions.NAME. Its replies also carry an analysis channel, returned as reasoning.
// Mistral's newer tokenizers (v11 on: Mistral Small 3.2, Magistral, Devstral) write each call as
// [TOOL_CALLS]NAME[ARGS]{...} (or NAME[CALL_ID]ID[ARGS]{...}); the parser reads that form too.
// Reasoning models of the other families (DeepSeek R1, Qwen3, QwQ) open their reply with
// <think>...</think>: with ReplyOptions::think_tags that block is reasoning.
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

enum class ToolStyle { Hermes, Llama3, Mistral, MistralV11, DeepSeek, Harmony };
// The family's style; Mistral's is MistralV11 when its Jinja template writes calls with [ARGS]
// (tools as [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS], calls [TOOL_CALLS]NAME[ARGS]{...},
// results [TOOL_RESULTS]TEXT[/TOOL_RESULTS]).
ToolStyle tool_style(ChatFamily family, std::string_view jinja = {});

// The messages to render: tools described where the style puts them (when `tools` is not
// empty), assistant turns' tool_calls written into their content (Harmony: kept, its renderer
// writes them), tool turns as the style's result turns. Roles are then system/user/assistant,
// "ipython" (Llama 3), "raw" (Mistral, DeepSeek), "tools" and "functions.NAME" (Harmony).
std::vector<ChatMessage> render_tool_turns(ToolStyle style, std::span<const ChatMessage> messages, std::span<const ToolFunction> tools);

// Harmony's TypeScript-like declaration of the tools, the body of its `namespace functions`.
std::string harmony_namespace(std::span<const ToolFunction> tools);

// The grammar of one call of one of `allowed` (each a function of `tools`), arguments following
// its parameters schema. Throws SchemaError for a schema the grammar can't honour.
std::shared_ptr<Grammar> tool_call_grammar(ToolStyle style, std::span<const ToolFunction> allowed);

// A piece of a streamed call: the first piece of call `index` has its id and name (and maybe
// arguments), later ones only more of the arguments' text, as OpenAI streams them.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;
};

// What a piece of the reply's text adds: content shown to the user, reasoning (Harmony's
// analysis channel) and pieces of calls. Within one delta reasoning comes first, then content,
// then the calls.
struct ReplyDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

// What a reply holds besides content.
struct ReplyOptions {
  bool calls = true;        // the style's tool calls (false: all but reasoning is content)
  // A reply that opens with <think> (after spacing) reasons until </think>; the reasoning comes
  // without the tags and the spacing around it, the content without the spacing after </think>.
  bool think_tags = false;
  // With think_tags: the prompt ended in an opened <think> (a template that opens the block
  // itself), so the reply starts inside its reasoning, without a <think> of its own.
  bool thinking_open = false;
};

// Splits a reply into content, reasoning and calls as it streams. push() returns what is
// certainly known; a call's arguments stream as they are written once its name is known.
// A call region that does not parse (no name where one belongs) is held and read whole at
// finish(); if no call comes out of it, its text counts as content.
class ToolCallParser {
 public:
  // Call ids are `id_prefix` followed by the call's index. Harmony's channels are read whatever
  // the options say.
  ToolCallParser(ToolStyle style, std::string id_prefix, ReplyOptions options = {});
  ReplyDelta push(std::string_view text);
  struct Finished {
    ReplyDelta last;                  // what push() had not returned yet
    std::vector<ChatToolCall> calls;  // every call of the reply, whole
  };
  Finished finish();
  struct Result {
    std::string content;
    std::string reasoning;
    std::vector<ChatToolCall> calls;
  };
  // A whole reply at once; content is empty when only spacing surrounds the calls.
  Result whole(std::string_view text);

 private:
  enum class Mode { Text, Header, Arguments, Trailer, Held, Done, Body, ThinkOpen, Thinking, Plain };
  Mode after_thinking() const;
  bool in_call_region() const;
  void run(ReplyDelta& out, bool at_end);
  bool step_think_open(bool at_end);
  bool step_thinking(ReplyDelta& out, bool at_end);
  bool step_text(ReplyDelta& out, bool at_end);
  bool step_header(ReplyDelta& out, bool at_end);
  bool step_arguments(ReplyDelta& out);
  bool step_trailer(bool at_end);
  bool step_harmony_header(ReplyDelta& out, bool at_end);
  bool step_harmony_body(ReplyDelta& out, bool at_end);
  void add_content(ReplyDelta& out, std::string_view text);
  void start_call(ReplyDelta& out, std::string name);
  void add_arguments(ReplyDelta& out, std::string_view text);

  ToolStyle style_;
  std::string id_prefix_;
  ReplyOptions options_;
  bool reasoning_started_ = false;  // reasoning other than spacing was returned
  bool skip_space_ = false;         // drop spacing up to the content after </think>
  std::string held_;          // text not consumed yet
  std::string region_;        // the calls' text since the first opener, for a region that fails
  Mode mode_ = Mode::Text;
  bool started_ = false;      // the reply's first non-space byte was seen
  bool content_started_ = false;  // content other than spacing was returned
  std::string space_;         // spacing at the reply's start, held until it is known to be content
  std::vector<ChatToolCall> calls_;
  // The arguments value being scanned: nesting depth, inside a string, after a backslash.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, string_value_ = false;
  std::string string_args_;   // a value given as a JSON string, decoded once it closes
  bool object_closed_ = false;  // Mistral: the call's object after its arguments has closed
  bool mistral_names_ = false;  // Mistral: calls in the [TOOL_CALLS]NAME[ARGS]{...} form
  // Harmony: the message being read (reasoning, content, or a call) and whether its header is done.
  enum class Channel { Content, Reasoning, Call } channel_ = Channel::Content;
};

// The calls in `text` as the style writes them (empty when it holds none, or one doesn't parse).
std::vector<ChatToolCall> parse_tool_calls(ToolStyle style, std::string_view text, const std::string& id_prefix);

}  // namespace orchard::serve::structured
