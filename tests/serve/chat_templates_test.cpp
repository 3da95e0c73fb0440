#include "serve/chat_templates.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace orchard::serve {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Name a fruit."},
};

// Expected strings written out from each family's reference template (Meta's Llama 2 and 3,
// Qwen's ChatML, Mistral-7B-Instruct v0.1 with system text leading the first user turn), less
// the leading BOS the tokenizer adds.
TEST(ChatTemplates, Llama2) {
  EXPECT_EQ(render_chat(ChatFamily::Llama2, kConversation, "<s>", "</s>"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Name a fruit. [/INST]");
}

TEST(ChatTemplates, Llama3) {
  EXPECT_EQ(render_chat(ChatFamily::Llama3, kConversation, "<|begin_of_text|>", "<|end_of_text|>"),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nName a fruit.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplates, ChatML) {
  EXPECT_EQ(render_chat(ChatFamily::ChatML, kConversation, "", "<|endoftext|>"),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nName a fruit.<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplates, Mistral) {
  EXPECT_EQ(render_chat(ChatFamily::Mistral, kConversation, "<s>", "</s>"),
            "[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Name a fruit. [/INST]");
}

// DeepSeek V3's template: the system text first, no BOS (the tokenizer's), replies closed by EOS.
TEST(ChatTemplates, DeepSeek) {
  EXPECT_EQ(render_chat(ChatFamily::DeepSeek, kConversation, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Name a fruit.<｜Assistant｜>");
}

// OpenAI's Harmony format (gpt-oss): its own system message, the caller's system text as the
// developer's instructions, earlier replies in the final channel.
TEST(ChatTemplates, Harmony) {
  EXPECT_EQ(render_chat(ChatFamily::Harmony, kConversation, "<|startoftext|>", "<|return|>"),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
            "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
            "<|start|>user<|message|>Hi<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello!<|end|>"
            "<|start|>user<|message|>Name a fruit.<|end|>"
            "<|start|>assistant");
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  EXPECT_EQ(render_chat(ChatFamily::Harmony, user, "", "").find("<|start|>developer"), std::string::npos);
}

// gpt-oss's reasoning effort is its system message's "Reasoning:" line.
TEST(ChatTemplates, HarmonyReasoningEffort) {
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  EXPECT_EQ(render_chat(ChatFamily::Harmony, user, "", "", {.reasoning_effort = "high"}),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
            "Reasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>user<|message|>Hi<|end|><|start|>assistant");
}

// Reasoning models: earlier replies lose their thinking (DeepSeek R1's template keeps what follows
// the last </think>, Qwen3's the same), and Qwen3 with thinking off answers after an empty block.
TEST(ChatTemplates, ReasoningModelsTurns) {
  const std::vector<ChatMessage> turns = {{"user", "Hi"}, {"assistant", "<think>\nA greeting.\n</think>\n\nHello!"}, {"user", "Bye"}};
  EXPECT_EQ(render_chat(ChatFamily::DeepSeek, turns, "", "<｜end▁of▁sentence｜>"),
            "<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
  EXPECT_EQ(render_chat(ChatFamily::ChatML, turns, "", "", {.skip_thinking = true}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_TRUE(template_can_skip_thinking(
      "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"));
  EXPECT_FALSE(template_can_skip_thinking("{{- '<|im_start|>assistant\\n' }}"));
}

// DeepSeek R1's newer template (and QwQ's) opens the think block where the reply starts:
//   {% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}
// An earlier reply is given back without its thinking, as before.
TEST(ChatTemplates, TemplatesThatOpenTheThinkBlock) {
  const RenderOptions open{.open_thinking = true};
  std::vector<ChatMessage> conversation = kConversation;
  conversation[2].content = "<think>\nA greeting.\n</think>\n\nHello!";
  EXPECT_EQ(render_chat(ChatFamily::DeepSeek, conversation, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", open),
            "Be brief.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Name a fruit.<｜Assistant｜><think>\n");
  // QwQ: {{- '<|im_start|>assistant\n<think>\n' }}
  EXPECT_EQ(render_chat(ChatFamily::ChatML, conversation, "", "<|endoftext|>", open),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(template_opens_thinking("{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"));
  EXPECT_TRUE(template_opens_thinking("{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}"));
  // R1's first template, V3's, and Qwen3's (whose empty block only turns thinking off) do not.
  EXPECT_FALSE(template_opens_thinking("{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"));
  EXPECT_FALSE(template_opens_thinking(
      "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}"
      "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"));
}

// Mistral's newer templates (Mistral Small 3.1/3.2, Magistral, Devstral) write
//   {{- bos_token }}... {{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
//   user: {{- '[INST]' + message['content'] + '[/INST]' }}
//   system (later): {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
//   assistant: {{- message['content'] + eos_token }}
// (with no system message they write a default one of their own, dated; ours writes none).
TEST(ChatTemplates, MistralSystemPromptTags) {
  const RenderOptions tags{.system_prompt_tags = true};
  EXPECT_EQ(render_chat(ChatFamily::Mistral, kConversation, "<s>", "</s>", tags),
            "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]Hello!</s>[INST]Name a fruit.[/INST]");
  const std::vector<ChatMessage> later = {{"user", "Hi"}, {"assistant", "Hello!"}, {"system", "Now in French."}, {"user", "Bye"}};
  EXPECT_EQ(render_chat(ChatFamily::Mistral, later, "<s>", "</s>", tags),
            "[INST]Hi[/INST]Hello!</s>[SYSTEM_PROMPT]Now in French.[/SYSTEM_PROMPT][INST]Bye[/INST]");
  EXPECT_TRUE(template_has_system_prompt("{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"));
  EXPECT_FALSE(template_has_system_prompt("{{ '[INST] ' + message['content'] + ' [/INST]' }}"));
  // The older form stays for the older templates.
  EXPECT_EQ(render_chat(ChatFamily::Mistral, kConversation, "<s>", "</s>"),
            "[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Name a fruit. [/INST]");
}

TEST(ChatTemplates, SystemWithoutUserTurnStandsAlone) {
  const std::vector<ChatMessage> only_system = {{"system", "Rules."}};
  EXPECT_EQ(render_chat(ChatFamily::Llama2, only_system, "<s>", "</s>"), "[INST] <<SYS>>\nRules.\n<</SYS>> [/INST]");
  EXPECT_EQ(render_chat(ChatFamily::Mistral, only_system, "<s>", "</s>"), "[INST] Rules.\n\n [/INST]");
}

TEST(ChatTemplates, UserOnly) {
  const std::vector<ChatMessage> user = {{"user", "  Hi  "}};
  EXPECT_EQ(render_chat(ChatFamily::Llama2, user, "<s>", "</s>"), "[INST] Hi [/INST]");
  EXPECT_EQ(render_chat(ChatFamily::Llama3, user, "", ""),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplates, FamilyFromTemplateMarkers) {
  EXPECT_EQ(family_from_template("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"), ChatFamily::Llama3);
  EXPECT_EQ(family_from_template("{{'<|im_start|>' + message['role'] + '\n'}}"), ChatFamily::ChatML);
  EXPECT_EQ(family_from_template("{% set content = '<<SYS>>\\n' + system_message %}{{ bos_token + '[INST] ' }}"), ChatFamily::Llama2);
  EXPECT_EQ(family_from_template("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFamily::Mistral);
  EXPECT_EQ(family_from_template("{{ message['content'] }}"), std::nullopt);
  EXPECT_EQ(family_from_template(""), std::nullopt);
  EXPECT_EQ(family_from_template("{{- \"<|start|>assistant<|channel|>final<|message|>\" }}"), ChatFamily::Harmony);
  EXPECT_EQ(family_from_template("{{'<｜User｜>' + message['content'] + '<｜Assistant｜>'}}"), ChatFamily::DeepSeek);
}

model::Tokenizer vocab_with(std::vector<std::string> specials) {
  model::VocabData v;
  v.model = "gpt2";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(fmt::format("t{}", b));
  v.kinds.assign(v.tokens.size(), model::TokenKind::Normal);
  for (auto& s : specials) {
    v.tokens.push_back(std::move(s));
    v.kinds.push_back(model::TokenKind::Control);
  }
  return model::Tokenizer::from_vocab(v);
}

TEST(ChatTemplates, FamilyFromVocabulary) {
  EXPECT_EQ(family_from_vocab(vocab_with({"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})),
            ChatFamily::Llama3);
  EXPECT_EQ(family_from_vocab(vocab_with({"<|endoftext|>", "<|im_start|>", "<|im_end|>"})), ChatFamily::ChatML);
  EXPECT_EQ(family_from_vocab(vocab_with({"[INST]", "[/INST]"})), ChatFamily::Mistral);
  EXPECT_EQ(family_from_vocab(vocab_with({"<s>", "</s>"})), std::nullopt);
  EXPECT_EQ(family_from_vocab(vocab_with({"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>"})), ChatFamily::Harmony);
  EXPECT_EQ(family_from_vocab(vocab_with({"<｜User｜>", "<｜Assistant｜>"})), ChatFamily::DeepSeek);
  // The tool-call markers a reply is parsed by decode to their text; other control tokens don't.
  const auto mistral = vocab_with({"[INST]", "[/INST]", "[TOOL_CALLS]"});
  EXPECT_EQ(mistral.decode(mistral.encode("[TOOL_CALLS]", false)), "[TOOL_CALLS]");
  EXPECT_EQ(mistral.decode(mistral.encode("[INST]", false)), "");
}

TEST(ChatTemplates, PickPrefersTemplateThenVocabularyThenArchitecture) {
  const auto chatml_vocab = vocab_with({"<|im_start|>", "<|im_end|>"});
  const auto plain_vocab = vocab_with({"<s>", "</s>"});
  EXPECT_EQ(pick_chat_family("<|start_header_id|>", chatml_vocab, "llama"), ChatFamily::Llama3);
  EXPECT_EQ(pick_chat_family("", chatml_vocab, "llama"), ChatFamily::ChatML);
  EXPECT_EQ(pick_chat_family("", plain_vocab, "qwen3"), ChatFamily::ChatML);
  EXPECT_EQ(pick_chat_family("", plain_vocab, "llama"), ChatFamily::Llama2);
  EXPECT_EQ(pick_chat_family("", plain_vocab, "deepseek2"), ChatFamily::DeepSeek);
  EXPECT_EQ(pick_chat_family("", plain_vocab, "gpt-oss"), ChatFamily::Harmony);
}

TEST(ChatTemplates, FamilyNamesRoundTrip) {
  for (ChatFamily f : {ChatFamily::Llama2, ChatFamily::Llama3, ChatFamily::ChatML, ChatFamily::Mistral, ChatFamily::DeepSeek,
                       ChatFamily::Harmony})
    EXPECT_EQ(parse_chat_family(chat_family_name(f)), f);
  EXPECT_EQ(parse_chat_family("jinja"), std::nullopt);
}

}  // namespace
}  // namespace orchard::serve
