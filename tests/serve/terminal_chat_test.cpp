// `orchard chat`'s conversation (serve::converse) on a scripted engine: replies as reasoning
// models write them, shown and kept in the history as the chat shows and keeps them, and the
// prompts the templates' variants render.
#include "serve/terminal_chat.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_files.h"
#include "scripted_engine.h"

namespace orchard::serve {
namespace {

struct Conversation {
  std::string out, err;
  // What the model was given, as text: each prompt, in pieces where the scheduler fed it in
  // several (the last piece holds all before it).
  std::vector<std::string> prompts;
};

// Chats `turns` with a model of `arch` whose every reply is `reply` (served with `jinja` as its
// chat template, when given).
Conversation chat(const std::string& arch, const std::string& reply, const std::string& turns, TerminalChatOptions options,
                  std::optional<std::string> jinja = std::nullopt) {
  const std::string model = testing::synthetic_model(arch, "tiny", "q8_0");
  const std::string log = ::testing::TempDir() + "/terminal-chat-prompts-" + std::to_string(getpid()) + ".txt";
  std::filesystem::remove(log);
  Conversation c;
  {
    ScriptedEngine engine(model, reply, log, std::move(jinja));
    const ChatFamily family = pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture);
    std::istringstream in(turns);
    std::ostringstream out, err;
    std::atomic<bool> interrupted{false};
    options.sampling.temperature = 0;
    converse(engine, family, options, in, out, err, interrupted);
    c.out = out.str();
    c.err = err.str();
  }
  std::ifstream file(log);
  const std::string all((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  for (size_t at = 0, end; (end = all.find("\n---\n", at)) != std::string::npos; at = end + 5) c.prompts.push_back(all.substr(at, end - at));
  std::filesystem::remove(log);
  return c;
}

TerminalChatOptions hiding_thinking() {
  TerminalChatOptions o;
  o.show_thinking = false;
  return o;
}

TerminalChatOptions dimmed_output() {
  TerminalChatOptions o;
  o.dim = true;
  return o;
}

constexpr std::string_view kThinkReply = "<think>\nThe user greets me.\n</think>\n\nHello there!";

// The thinking is shown before the reply as ollama's CLI shows it; --hide-thinking leaves it out.
TEST(TerminalChat, ShowsTheThinkingApartFromTheReply) {
  const Conversation shown = chat("qwen3", std::string(kThinkReply), "hi\nagain\n", {});
  const std::string turn = "Thinking...\nThe user greets me.\n...done thinking.\n\nHello there!\n";
  EXPECT_EQ(shown.out, turn + turn);

  const Conversation hidden = chat("qwen3", std::string(kThinkReply), "hi\nagain\n", hiding_thinking());
  EXPECT_EQ(hidden.out, "Hello there!\nHello there!\n");

  // On a terminal the block is dimmed, and the reply after it plain again.
  const Conversation dimmed = chat("qwen3", std::string(kThinkReply), "hi\n", dimmed_output());
  EXPECT_EQ(dimmed.out, "\x1b[2mThinking...\nThe user greets me.\n...done thinking.\n\n\x1b[0mHello there!\n");

  // A reply that never thinks has no block.
  const Conversation plain = chat("qwen3", "Hello there!", "hi\n", {});
  EXPECT_EQ(plain.out, "Hello there!\n");
}

// The history keeps the content alone: gpt-oss's next prompt gives the first reply back as its
// final-channel message, without the analysis.
TEST(TerminalChat, TheThinkingStaysOutOfTheHistory) {
  const Conversation c = chat("gpt-oss", "<|channel|>analysis<|message|>Need a greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
                              "hi\nagain\n", {});
  EXPECT_EQ(c.out, "Thinking...\nNeed a greeting.\n...done thinking.\n\nHi!\nThinking...\nNeed a greeting.\n...done thinking.\n\nHi!\n");
  ASSERT_FALSE(c.prompts.empty()) << c.err;
  EXPECT_NE(c.prompts.back().find("<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>Hi!<|end|>"
                              "<|start|>user<|message|>again<|end|><|start|>assistant"),
            std::string::npos)
      << c.prompts.back();
  for (const std::string& p : c.prompts) EXPECT_EQ(p.find("Need a greeting"), std::string::npos) << p;
}

// DeepSeek R1's newer template opens the think block in the prompt: the reply, which has no
// <think> of its own, is still shown as thinking, then the answer.
TEST(TerminalChat, AReplyInsideATemplatesThinkBlock) {
  const std::string r1 =
      "{% for message in messages %}{{'<｜User｜>' + message['content']}}{% endfor %}"
      "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
  const Conversation c = chat("deepseek2", "The user greets me.\n</think>\n\nHello!", "hi\n", {}, r1);
  EXPECT_EQ(c.out, "Thinking...\nThe user greets me.\n...done thinking.\n\nHello!\n");
  ASSERT_FALSE(c.prompts.empty()) << c.err;
  EXPECT_TRUE(c.prompts.back().ends_with("<｜User｜>hi<｜Assistant｜><think>\n")) << c.prompts.back();
}

// Mistral's newer templates: the system message in [SYSTEM_PROMPT] tags, the turn without spaces.
TEST(TerminalChat, MistralSystemPromptTemplate) {
  const std::string v11 =
      "{{- bos_token }}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
      "{%- for message in loop_messages %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endfor %}";
  TerminalChatOptions brief;
  brief.system = "Be brief.";
  const Conversation c = chat("qwen3", "Sure.", "hi\n", brief, v11);
  EXPECT_EQ(c.out, "Sure.\n");
  ASSERT_FALSE(c.prompts.empty()) << c.err;
  EXPECT_TRUE(c.prompts.back().ends_with("[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]hi[/INST]")) << c.prompts.back();
}

}  // namespace
}  // namespace orchard::serve
