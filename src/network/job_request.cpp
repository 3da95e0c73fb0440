#include "network/job_request.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "serve/chat_templates.h"

namespace orchard::network {
namespace {

// The request's `key`, or `fallback` when absent or null; a value of another type is an Error
// naming the key (the agent hands the job back with it), never a JSON library exception.
template <typename T>
T field(const nlohmann::json& request, const char* key, T fallback) {
  if (!request.is_object()) throw Error(error_message("network", "a job's request must be a JSON object"));
  const auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  const bool fits = std::is_same_v<T, std::string> ? it->is_string()
                    : std::is_floating_point_v<T>   ? it->is_number()
                    : std::is_unsigned_v<T> ? it->is_number_unsigned() || (it->is_number_integer() && *it >= 0)
                                                    : it->is_number_integer();
  if (!fits) throw Error(error_message("network", "a job's '{}' is {}, not the value expected", key, it->dump()));
  return it->get<T>();
}

}  // namespace

std::string model_path(const std::string& models_dir, const std::string& name) {
  if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
    throw Error(error_message("network", "bad model name '{}'", name));
  return models_dir + "/" + name + ".gguf";
}

JobRequest JobRequest::from_json(const nlohmann::json& r) {
  JobRequest q;
  q.max_tokens = field(r, "max_tokens", kDefaultMaxTokens);
  q.temperature = field(r, "temperature", 1.0);
  q.top_p = field(r, "top_p", 1.0);
  q.top_k = field(r, "top_k", int64_t{0});
  q.seed = field(r, "seed", uint64_t{0});
  if (q.max_tokens < 1) throw Error(error_message("network", "a job's max_tokens is {}; at least 1", q.max_tokens));
  if (!(q.temperature >= 0 && q.temperature <= 2) || !(q.top_p >= 0 && q.top_p <= 1) || q.top_k < 0 ||
      q.top_k > std::numeric_limits<int32_t>::max())
    throw Error(error_message("network", "a job's sampling is out of range (temperature {}, top_p {}, top_k {})",
                              q.temperature, q.top_p, q.top_k));
  const auto list = r.find("messages");
  if (list == r.end() || list->is_null()) {
    q.prompt = field(r, "prompt", std::string());
    return q;
  }
  if (!list->is_array()) throw Error(error_message("network", "a job's 'messages' must be an array"));
  for (const auto& msg : *list) q.messages.push_back({field(msg, "role", std::string()), field(msg, "content", std::string())});
  return q;
}

nlohmann::json JobRequest::to_json() const {
  nlohmann::json out = {{"max_tokens", max_tokens}, {"temperature", temperature}, {"top_p", top_p},
                        {"top_k", top_k},           {"seed", seed}};
  if (prompt) {
    out["prompt"] = *prompt;
  } else {
    out["messages"] = nlohmann::json::array();
    for (const ChatTurn& m : messages) out["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  return out;
}

model::SamplerOptions sampling_from(const JobRequest& r) {
  model::SamplerOptions s;
  s.temperature = static_cast<float>(r.temperature);
  s.top_p = static_cast<float>(r.top_p);
  s.top_k = static_cast<int32_t>(r.top_k);
  s.min_p = 0;  // the OpenAI API has no min-p: off, as clients expect
  s.seed = r.seed;
  return s;
}

std::vector<model::TokenId> prompt_tokens(const model::Tokenizer& tokenizer, const std::string& arch_name,
                                          const JobRequest& request) {
  if (request.prompt) return tokenizer.encode(*request.prompt, tokenizer.adds_bos(), false);
  std::vector<serve::ChatMessage> messages;
  for (const ChatTurn& m : request.messages) messages.push_back({m.role, m.content});
  auto family = serve::pick_chat_family("", tokenizer, arch_name);
  auto token_text = [&](model::TokenId id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  std::string text = serve::render_chat(family, messages, token_text(tokenizer.bos()), token_text(tokenizer.eos()));
  return tokenizer.encode(text, tokenizer.adds_bos(), true);
}

model::GenerationOptions generation_options(const JobRequest& request, int32_t n_ctx, size_t prompt_size) {
  model::GenerationOptions gen;
  gen.sampling = sampling_from(request);
  gen.max_tokens = static_cast<int32_t>(std::min<int64_t>(request.max_tokens, n_ctx - static_cast<int64_t>(prompt_size)));
  if (gen.max_tokens < 1) throw Error(error_message("network", "the prompt fills the context of {}", n_ctx));
  return gen;
}

int64_t prompt_token_bound(const JobRequest& request) {
  // Every token of a prompt stands for at least one byte of its text, except the markers a
  // template adds: a few around a plain prompt (BOS), a few per chat message (its turn's header and
  // end) and the assistant turn's header.
  constexpr int64_t kPromptMarkers = 4, kMessageMarkers = 16, kChatMarkers = 32;
  if (request.prompt) return static_cast<int64_t>(request.prompt->size()) + kPromptMarkers;
  int64_t bound = kChatMarkers;
  for (const ChatTurn& m : request.messages)
    bound += static_cast<int64_t>(m.content.size() + m.role.size()) + kMessageMarkers;
  return bound;
}

}  // namespace orchard::network
