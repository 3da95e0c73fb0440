#pragma once
// What a generation job asks for, read the same way by every engine that runs the model itself
// (the built-in engine on one machine, every rank of a pod job), so a job gives the same tokens
// wherever it runs.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/generate.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::network {

inline constexpr int64_t kDefaultMaxTokens = 256;

struct ChatTurn {
  std::string role, content;
};

// A generation job's request, read once where it comes in as JSON (a client's body at the
// coordinator's HTTP edge, the stored row, the job a node agent polled) and passed around typed
// from there; to_json() is what the coordinator stores and its holder receives.
struct JobRequest {
  std::optional<std::string> prompt;  // the text to continue, or else
  std::vector<ChatTurn> messages;     // a chat, rendered with the model's template
  int64_t max_tokens = kDefaultMaxTokens;
  double temperature = 1, top_p = 1;
  int64_t top_k = 0;
  uint64_t seed = 0;

  // {"max_tokens", "temperature", "top_p", "top_k", "seed", "prompt" | "messages"}: absent or
  // null fields take the defaults (no prompt and no messages: an empty prompt); a value of
  // another type, or out of range, is an Error naming the field, never a JSON library exception.
  static JobRequest from_json(const nlohmann::json& request);
  nlohmann::json to_json() const;
};

// models_dir/name.gguf, the file of the model a job names (it may not exist). Throws Error when
// the name could reach outside the folder.
std::string model_path(const std::string& models_dir, const std::string& name);

// The request's sampling; min-p off (the OpenAI API has none).
model::SamplerOptions sampling_from(const JobRequest& request);

// The prompt's token ids: "messages" rendered with the model's chat template, else "prompt".
std::vector<model::TokenId> prompt_tokens(const model::Tokenizer& tokenizer, const std::string& arch_name,
                                          const JobRequest& request);

// max_tokens capped by what the context leaves after the prompt. Throws Error when the prompt
// fills the context.
model::GenerationOptions generation_options(const JobRequest& request, int32_t n_ctx, size_t prompt_size);

// The most prompt tokens a request can stand for: its text's bytes plus the markers a template
// adds. Nodes are paid and clients billed for no more (and quotas reserve this much).
int64_t prompt_token_bound(const JobRequest& request);

}  // namespace orchard::network
