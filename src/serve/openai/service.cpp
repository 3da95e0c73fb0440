#include "serve/openai/service.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <mutex>
#include <random>

namespace orchard::serve::openai {
namespace {

std::string special_text(const model::Tokenizer& tokenizer, model::TokenId id) {
  return id >= 0 ? tokenizer.token_text(id) : std::string();
}

// Response ids and default seeds: unpredictable, never repeated within a process in practice.
uint64_t random_u64() {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mutex);
  return rng();
}

// Tools the model is offered: written into the prompt, and its reply read for calls.
bool tools_offered(const ApiRequest& r) { return !r.tools.empty() && r.tool_choice != ToolChoice::None; }

// Families whose reasoning models open their reply with <think>...</think> (DeepSeek R1, Qwen3,
// QwQ); their other models never write it there, so every reply of theirs is read for it.
bool thinks_in_tags(ChatFamily family, std::string_view jinja) {
  return family == ChatFamily::ChatML || family == ChatFamily::DeepSeek || template_thinks(jinja);
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Service::Service(Engine& engine, Scheduler& scheduler, Metrics& metrics, ChatFamily chat_family)
    : engine_(engine),
      scheduler_(scheduler),
      metrics_(metrics),
      chat_family_(chat_family),
      bos_text_(special_text(engine.tokenizer(), engine.tokenizer().bos())),
      eos_text_(special_text(engine.tokenizer(), engine.tokenizer().eos())),
      think_tags_(thinks_in_tags(chat_family, engine.info().chat_template)),
      can_skip_thinking_(chat_family == ChatFamily::ChatML && template_can_skip_thinking(engine.info().chat_template)),
      opens_thinking_((chat_family == ChatFamily::ChatML || chat_family == ChatFamily::DeepSeek) &&
                      template_opens_thinking(engine.info().chat_template)),
      system_prompt_tags_(chat_family == ChatFamily::Mistral && template_has_system_prompt(engine.info().chat_template)) {}

std::string Service::chat_prompt(const ApiRequest& r) const {
  const bool tools_on = tools_offered(r);
  const bool tool_turns =
      std::any_of(r.messages.begin(), r.messages.end(), [](const ChatMessage& m) { return m.role == "tool" || !m.tool_calls.empty(); });
  const RenderOptions options{.reasoning_effort = r.reasoning_effort,
                              .skip_thinking = !r.thinking && can_skip_thinking_,
                              .open_thinking = opens_thinking_,
                              .system_prompt_tags = system_prompt_tags_};
  if (!tools_on && !tool_turns) return render_chat(chat_family_, r.messages, bos_text_, eos_text_, options);
  return render_chat(chat_family_,
                     structured::render_tool_turns(structured::tool_style(chat_family_, engine_.info().chat_template), r.messages,
                                                   tools_on ? std::span(r.tools) : std::span<const structured::ToolFunction>()),
                     bos_text_, eos_text_, options);
}

std::vector<model::TokenId> Service::prompt_tokens(const ApiRequest& r) const {
  const model::Tokenizer& tokenizer = engine_.tokenizer();
  if (r.endpoint == Endpoint::ChatCompletions) return tokenizer.encode(chat_prompt(r), tokenizer.adds_bos(), true);
  // Raw prompts may spell out a chat format themselves, so special token texts count (as in
  // llama.cpp's server).
  if (r.prompt) return tokenizer.encode(*r.prompt, tokenizer.adds_bos(), true);
  return r.prompt_tokens;
}

Started Service::start(Endpoint endpoint, std::string_view body) { return start(parse_request(endpoint, body)); }

Started Service::start(ApiRequest request) {
  const Endpoint endpoint = request.endpoint;
  Started s{std::move(request), {}, {}, {}};
  const ApiRequest& r = s.request;
  const ModelInfo& info = engine_.info();
  check_model(r.model);

  const char* prompt_param = endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  GenerationRequest g;
  const bool chat = endpoint == Endpoint::ChatCompletions;
  // A chat prompt that ends in an opened think block (templates that open it themselves) starts
  // the reply inside its reasoning: the parser is told so from the rendered text.
  bool thinking_open = false;
  if (chat) {
    const std::string text = chat_prompt(r);
    thinking_open = think_tags_ && text.ends_with("<think>\n");
    g.prompt = engine_.tokenizer().encode(text, engine_.tokenizer().adds_bos(), true);
  } else {
    g.prompt = prompt_tokens(r);
  }
  if (g.prompt.empty()) throw invalid_request("the prompt is empty", prompt_param);
  const int32_t vocab = engine_.tokenizer().vocab_size();
  for (model::TokenId t : g.prompt)
    if (t >= vocab) throw invalid_request(fmt::format("token {} is outside the vocabulary of {} tokens", t, vocab), prompt_param);

  const auto n_prompt = static_cast<int32_t>(g.prompt.size());
  const int32_t n_ctx = scheduler_.n_ctx();
  if (n_prompt >= n_ctx || (r.max_tokens && static_cast<int64_t>(n_prompt) + *r.max_tokens > n_ctx)) {
    const std::string requested = r.max_tokens ? fmt::format("{} tokens ({} in the prompt, {} for the completion)",
                                                             static_cast<int64_t>(n_prompt) + *r.max_tokens, n_prompt, *r.max_tokens)
                                               : fmt::format("{} tokens in the prompt", n_prompt);
    throw invalid_request(fmt::format("this model's maximum context length is {} tokens, but {} were requested", n_ctx, requested),
                          r.max_tokens && n_prompt < n_ctx ? "max_tokens" : prompt_param, "context_length_exceeded");
  }
  const int32_t room = n_ctx - n_prompt;
  g.max_tokens = r.max_tokens ? *r.max_tokens : r.default_max_tokens > 0 ? std::min(r.default_max_tokens, room) : room;
  g.sampling = r.sampling;
  if (!r.seeded) g.sampling.seed = random_u64();
  g.stop = r.stop;
  g.ignore_eos = r.ignore_eos;
  const bool tools_on = tools_offered(r);
  const structured::ToolStyle style = structured::tool_style(chat_family_, info.chat_template);
  std::shared_ptr<const structured::Grammar> grammar = r.format;
  if (tools_on && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named)) {
    std::vector<structured::ToolFunction> allowed;
    for (const auto& f : r.tools)
      if (r.tool_choice == ToolChoice::Required || f.name == r.tool_name) allowed.push_back(f);
    grammar = structured::tool_call_grammar(style, allowed);  // the schemas compiled in parse_request already
  }
  if (grammar) g.constraint = std::make_shared<structured::Constraint>(structured::Constraint{grammar, token_trie()});

  s.meta.id = fmt::format("{}-{:016x}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", random_u64());
  s.meta.created = unix_seconds();
  s.meta.model = info.id;
  // Harmony replies always need reading: their analysis channel is reasoning, not content; so do
  // the replies of families whose reasoning models think in <think> tags.
  if (tools_on || (chat && (style == structured::ToolStyle::Harmony || think_tags_)))
    s.tool_parser = std::make_shared<structured::ToolCallParser>(style, fmt::format("call_{:016x}_", random_u64()),
                                                                 structured::ReplyOptions{.calls = tools_on, .think_tags = chat && think_tags_, .thinking_open = thinking_open});
  try {
    s.job = scheduler_.submit(std::move(g));
  } catch (const QueueFullError&) {
    throw ApiError(429, "rate_limit_exceeded",
                   fmt::format("the server is busy: {} requests are being served and {} wait; retry later", scheduler_.active_slots(),
                               scheduler_.queue_depth()),
                   {}, "queue_full");
  }
  return s;
}

void Service::check_model(const std::string& name) const {
  const ModelInfo& info = engine_.info();
  if (!name.empty() && name != info.id)
    throw ApiError(404, "invalid_request_error", fmt::format("the model '{}' does not exist; this server serves '{}'", name, info.id),
                   "model", "model_not_found");
}

std::shared_ptr<const structured::TokenTrie> Service::token_trie() {
  std::lock_guard lock(trie_mutex_);
  if (!trie_) trie_ = std::make_shared<structured::TokenTrie>(engine_.tokenizer());
  return trie_;
}

std::string Service::models_body() const { return openai::models_body(engine_.info()); }

std::string Service::health_body() const {
  return nlohmann::json{{"status", "ok"},
                        {"model", engine_.info().id},
                        {"slots", scheduler_.n_slots()},
                        {"active_slots", scheduler_.active_slots()},
                        {"queue_depth", scheduler_.queue_depth()},
                        {"context_length", scheduler_.n_ctx()},
                        {"chat_template", chat_family_name(chat_family_)}}
      .dump();
}

std::string Service::metrics_text() const {
  Gauges g;
  g.queue_depth = scheduler_.queue_depth();
  g.active_slots = scheduler_.active_slots();
  g.n_slots = scheduler_.n_slots();
  g.rank_forward_seconds = engine_.rank_forward_seconds();
  return metrics_.render(g);
}

}  // namespace orchard::serve::openai
