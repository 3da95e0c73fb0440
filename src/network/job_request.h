#pragma once
// What a generation job asks for, read the same way by every engine that runs the model itself
// (the built-in engine on one machine, every rank of a pod job), so a job gives the same tokens
// wherever it runs.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/generate.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::network {

// models_dir/name.gguf, the file of the model a job names (it may not exist). Throws Error when
// the name could reach outside the folder.
std::string model_path(const std::string& models_dir, const std::string& name);

// {"temperature", "top_p", "top_k", "seed"}; min-p off (the OpenAI API has none).
model::SamplerOptions sampling_from(const nlohmann::json& request);

// The prompt's token ids: "messages" rendered with the model's chat template, else "prompt".
std::vector<model::TokenId> prompt_tokens(const model::Tokenizer& tokenizer, const std::string& arch_name,
                                          const nlohmann::json& request);

// max_tokens capped by what the context leaves after the prompt. Throws Error when the prompt
// fills the context.
model::GenerationOptions generation_options(const nlohmann::json& request, int32_t n_ctx, size_t prompt_size);

}  // namespace orchard::network
