#include "model/config.h"

#include <fmt/ranges.h>

#include "core/error.h"
#include "model/architecture.h"

namespace orchard::model {
namespace {

int32_t positive_int(const gguf::Reader& file, const std::string& key) {
  int64_t v = file.get(key).as_int(key);
  if (v <= 0 || v > (int64_t{1} << 30))
    throw FormatError(error_message("model", "{}: {} = {} is out of range, expected 1 to 2^30", file.path(), key, v));
  return static_cast<int32_t>(v);
}

int32_t optional_int(const gguf::Reader& file, const std::string& key, int32_t fallback) {
  return file.find(key) ? positive_int(file, key) : fallback;
}

float optional_float(const gguf::Reader& file, const std::string& key, float fallback) {
  const gguf::Value* v = file.find(key);
  return v ? static_cast<float>(v->as_float(key)) : fallback;
}

// The mixture-of-experts keys, when the architecture requires experts or the file has them
// (llama with experts is Mixtral).
void read_experts(const gguf::Reader& file, const std::string& p, ModelConfig& c) {
  if (!c.arch->mixture_of_experts && !file.find(p + "expert_count")) return;
  c.n_expert = positive_int(file, p + "expert_count");
  c.n_expert_used = positive_int(file, p + "expert_used_count");
  if (c.n_expert_used > c.n_expert)
    throw FormatError(error_message("model", "{}: {}expert_used_count {} is more than expert_count {}", file.path(), p,
                                    c.n_expert_used, c.n_expert));
  // Mixtral files give the experts' width as feed_forward_length.
  c.n_ff_exp = file.find(p + "expert_feed_forward_length") || c.n_ff == 0
                   ? positive_int(file, p + "expert_feed_forward_length")
                   : c.n_ff;
  if (const auto* v = file.find(p + "leading_dense_block_count")) {
    const int64_t leading = v->as_int(p + "leading_dense_block_count");
    if (leading < 0 || leading > (int64_t{1} << 30))
      throw FormatError(error_message("model", "{}: {}leading_dense_block_count = {} is out of range", file.path(), p,
                                      leading));
    c.n_dense_leading = static_cast<int32_t>(leading);
  }
  if (const auto* v = file.find(p + "expert_weights_norm")) c.expert_weights_norm = v->as_bool(p + "expert_weights_norm");
  // llama.cpp's numbering: 1 softmax, 2 sigmoid (DeepSeek V3), 3 softmax over the chosen experts'
  // logits (gpt-oss, whose files leave the key out): softmax over all of them renormalized over
  // the chosen is the same weights.
  if (const auto* v = file.find(p + "expert_gating_func")) {
    const int64_t code = v->as_int(p + "expert_gating_func");
    if (code != 1 && code != 3)
      throw FormatError(error_message(
          "model", "{}: {}expert_gating_func = {} is not supported; supported: 1 (softmax), 3 (softmax of the chosen)",
          file.path(), p, code));
    if (code == 3) c.expert_weights_norm = true;
  }
  for (const char* key : {"expert_shared_count", "expert_shared_feed_forward_length"})
    if (const auto* v = file.find(p + key); v && v->as_int(p + key) != 0)
      throw FormatError(error_message("model", "{}: {}{} is set: shared experts are not supported yet", file.path(), p,
                                      key));
}

// The sliding window, for an architecture whose layers have one.
void read_sliding_window(const gguf::Reader& file, const std::string& p, ModelConfig& c) {
  if (c.arch->sliding_window_period == 0) return;
  c.sliding_window = positive_int(file, p + "attention.sliding_window");
  c.sliding_window_period = c.arch->sliding_window_period;
  if (const auto* v = file.find(p + "attention.sliding_window_pattern")) {
    const int64_t period = v->as_int(p + "attention.sliding_window_pattern");
    if (period < 0 || period > (int64_t{1} << 30))
      throw FormatError(error_message("model", "{}: {}attention.sliding_window_pattern = {} is out of range",
                                      file.path(), p, period));
    c.sliding_window_period = static_cast<int32_t>(period);
  }
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::Reader& file) {
  ModelConfig c;
  c.arch_name = file.get("general.architecture").as_string("general.architecture");
  c.arch = find_architecture(c.arch_name);
  if (!c.arch)
    throw FormatError(error_message("model", "{}: architecture '{}' is not supported; supported: {}", file.path(),
                                    c.arch_name, supported_architectures()));
  c.rope_ordering = c.arch->rope;
  c.ffn_activation = c.arch->activation;
  if (const auto* v = file.find("general.name")) c.name = v->as_string("general.name");

  const std::string p = c.arch_name + ".";
  c.n_embd = positive_int(file, p + "embedding_length");
  c.n_layers = positive_int(file, p + "block_count");
  c.n_ff = optional_int(file, p + "feed_forward_length", 0);
  read_experts(file, p, c);
  // A model whose every layer is a mixture of experts may leave the dense width out.
  if (c.n_expert == 0 || c.n_dense_leading > 0) c.n_ff = positive_int(file, p + "feed_forward_length");
  if (c.n_ff == 0) c.n_ff = c.n_ff_exp;
  c.n_heads = positive_int(file, p + "attention.head_count");
  c.n_kv_heads = optional_int(file, p + "attention.head_count_kv", c.n_heads);
  c.context_length = optional_int(file, p + "context_length", 2048);
  c.head_dim = optional_int(file, p + "attention.key_length", c.n_embd / c.n_heads);
  c.rope_dims = optional_int(file, p + "rope.dimension_count", c.head_dim);
  c.rms_eps = optional_float(file, p + "attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope_theta = optional_float(file, p + "rope.freq_base", 10000.0f);
  read_sliding_window(file, p, c);

  if (const auto* type = file.find(p + "rope.scaling.type")) {
    const std::string& kind = type->as_string(p + "rope.scaling.type");
    float factor = optional_float(file, p + "rope.scaling.factor", 1.0f);
    if (kind == "linear" && factor > 0) {
      c.rope_freq_scale = 1.0f / factor;
    } else if (kind != "none" && kind != "linear") {
      throw FormatError(error_message("model", "{}: rope scaling '{}' is not supported; supported: none, linear",
                                      file.path(), kind));
    }
  } else if (const auto* scale = file.find(p + "rope.scale_linear")) {
    float factor = static_cast<float>(scale->as_float(p + "rope.scale_linear"));
    if (factor > 0) c.rope_freq_scale = 1.0f / factor;
  }

  if (c.n_heads % c.n_kv_heads != 0)
    throw FormatError(error_message("model", "{}: {} attention heads do not divide into {} key/value heads",
                                    file.path(), c.n_heads, c.n_kv_heads));
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0)
    throw FormatError(error_message("model", "{}: rope.dimension_count {} must be even and at most head size {}",
                                    file.path(), c.rope_dims, c.head_dim));

  const auto& embd = file.tensor("token_embd.weight");
  if (embd.shape.size() != 2 || embd.shape[0] != c.n_embd)
    throw FormatError(error_message("model", "{}: token_embd.weight has shape [{}], expected [{}, vocab]", file.path(),
                                    fmt::join(embd.shape, ", "), c.n_embd));
  c.vocab_size = static_cast<int32_t>(embd.shape[1]);
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  c.has_rope_freq_factors = file.find_tensor("rope_freqs.weight") != nullptr;
  return c;
}

}  // namespace orchard::model
