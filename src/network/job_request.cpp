#include "network/job_request.h"

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

model::SamplerOptions sampling_from(const nlohmann::json& r) {
  model::SamplerOptions s;
  s.temperature = field(r, "temperature", 1.0f);
  s.top_p = field(r, "top_p", 1.0f);
  s.top_k = field(r, "top_k", 0);
  s.min_p = 0;  // the OpenAI API has no min-p: off, as clients expect
  s.seed = field(r, "seed", uint64_t{0});
  if (!(s.temperature >= 0 && s.temperature <= 2) || !(s.top_p >= 0 && s.top_p <= 1) || s.top_k < 0)
    throw Error(error_message("network", "a job's sampling is out of range (temperature {}, top_p {}, top_k {})",
                              s.temperature, s.top_p, s.top_k));
  return s;
}

std::vector<model::TokenId> prompt_tokens(const model::Tokenizer& tokenizer, const std::string& arch_name,
                                          const nlohmann::json& request) {
  if (!request.is_object() || !request.contains("messages"))
    return tokenizer.encode(field(request, "prompt", std::string()), tokenizer.adds_bos(), false);
  const auto& list = request["messages"];
  if (!list.is_array()) throw Error(error_message("network", "a job's 'messages' must be an array"));
  std::vector<serve::ChatMessage> messages;
  for (const auto& msg : list)
    messages.push_back({field(msg, "role", std::string()), field(msg, "content", std::string())});
  auto family = serve::pick_chat_family("", tokenizer, arch_name);
  auto token_text = [&](model::TokenId id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  std::string text = serve::render_chat(family, messages, token_text(tokenizer.bos()), token_text(tokenizer.eos()));
  return tokenizer.encode(text, tokenizer.adds_bos(), true);
}

model::GenerationOptions generation_options(const nlohmann::json& request, int32_t n_ctx, size_t prompt_size) {
  model::GenerationOptions gen;
  gen.sampling = sampling_from(request);
  const int64_t asked = field(request, "max_tokens", int64_t{256});
  if (asked < 1) throw Error(error_message("network", "a job's max_tokens is {}; at least 1", asked));
  gen.max_tokens = static_cast<int32_t>(std::min<int64_t>(asked, n_ctx - static_cast<int64_t>(prompt_size)));
  if (gen.max_tokens < 1) throw Error(error_message("network", "the prompt fills the context of {}", n_ctx));
  return gen;
}

}  // namespace orchard::network
