#include "network/job_request.h"

#include "core/error.h"
#include "serve/chat_templates.h"

namespace orchard::network {

std::string model_path(const std::string& models_dir, const std::string& name) {
  if (name.find('/') != std::string::npos || name.find("..") != std::string::npos)
    throw Error(error_message("network", "bad model name '{}'", name));
  return models_dir + "/" + name + ".gguf";
}

model::SamplerOptions sampling_from(const nlohmann::json& r) {
  model::SamplerOptions s;
  s.temperature = r.value("temperature", 1.0f);
  s.top_p = r.value("top_p", 1.0f);
  s.top_k = r.value("top_k", 0);
  s.min_p = 0;  // the OpenAI API has no min-p: off, as clients expect
  s.seed = r.value("seed", uint64_t{0});
  return s;
}

std::vector<model::TokenId> prompt_tokens(const model::Tokenizer& tokenizer, const std::string& arch_name,
                                          const nlohmann::json& request) {
  if (!request.contains("messages")) return tokenizer.encode(request.value("prompt", ""), tokenizer.adds_bos(), false);
  std::vector<serve::ChatMessage> messages;
  for (const auto& msg : request["messages"]) messages.push_back({msg.value("role", ""), msg.value("content", "")});
  auto family = serve::pick_chat_family("", tokenizer, arch_name);
  auto token_text = [&](model::TokenId id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  std::string text = serve::render_chat(family, messages, token_text(tokenizer.bos()), token_text(tokenizer.eos()));
  return tokenizer.encode(text, tokenizer.adds_bos(), true);
}

model::GenerationOptions generation_options(const nlohmann::json& request, int32_t n_ctx, size_t prompt_size) {
  model::GenerationOptions gen;
  gen.sampling = sampling_from(request);
  gen.max_tokens = std::min<int32_t>(request.value("max_tokens", 256), n_ctx - static_cast<int32_t>(prompt_size));
  if (gen.max_tokens < 1) throw Error(error_message("network", "the prompt fills the context of {}", n_ctx));
  return gen;
}

}  // namespace orchard::network
