#pragma once
// The OpenAI API's behaviour without its transport: a request body in, a running job (or an
// ApiError) out; bodies for the models list, health and metrics. The HTTP layer (routes) only
// moves these strings.
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "serve/chat_templates.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/openai/schema.h"
#include "serve/scheduler.h"
#include "serve/structured/token_mask.h"
#include "serve/structured/tool_calls.h"

namespace orchard::serve::openai {

struct Started {
  ApiRequest request;
  ResponseMeta meta;
  std::shared_ptr<Job> job;
  // Chat with tools the model may call, in Harmony, or in a family whose reasoning models think
  // in <think> tags (ChatML, DeepSeek): splits its text into content, reasoning and tool_calls.
  // Null otherwise (text completions, other families without tools or with tool_choice "none").
  // The request's `thinking` is the caller's to honour: reasoning still comes out of the parser.
  std::shared_ptr<structured::ToolCallParser> tool_parser;
};

class Service {
 public:
  // All four must outlive the service.
  Service(Engine& engine, Scheduler& scheduler, Metrics& metrics, ChatFamily chat_family);

  // Parses the body, renders the chat prompt, tokenizes and queues the generation. Throws
  // ApiError: 400 for a bad body, an empty prompt, token ids outside the vocabulary, or a prompt
  // (plus max_tokens, when given) longer than the context (code context_length_exceeded); 404
  // for a model that isn't this one (code model_not_found); 429 when the queue is full.
  Started start(Endpoint endpoint, std::string_view body);
  // The same for a request already parsed, by this API's schema or another's (Ollama's).
  Started start(ApiRequest request);

  // The prompt tokens a request stands for (chat: the rendered template).
  std::vector<model::TokenId> prompt_tokens(const ApiRequest& request) const;
  // A chat request's prompt as text: its messages in the chat template.
  std::string chat_prompt(const ApiRequest& request) const;

  // Throws ApiError 404 (code model_not_found) unless `name` is empty or this server's model.
  void check_model(const std::string& name) const;

  const ModelInfo& info() const { return engine_.info(); }
  int32_t n_ctx() const { return scheduler_.n_ctx(); }
  std::string models_body() const;
  std::string health_body() const;
  std::string metrics_text() const;
  ChatFamily chat_family() const { return chat_family_; }

 private:
  Engine& engine_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  // The vocabulary's trie for constrained sampling, built at the first request that needs it.
  std::shared_ptr<const structured::TokenTrie> token_trie();

  ChatFamily chat_family_;
  std::string bos_text_, eos_text_;
  bool think_tags_;         // replies may open with <think>...</think>
  bool can_skip_thinking_;  // the template writes an empty think block when asked not to think
  bool opens_thinking_;     // the template opens the think block where the reply starts
  bool system_prompt_tags_; // Mistral's newer templates: [SYSTEM_PROMPT]...[/SYSTEM_PROMPT]
  std::mutex trie_mutex_;
  std::shared_ptr<const structured::TokenTrie> trie_;
};

}  // namespace orchard::serve::openai
