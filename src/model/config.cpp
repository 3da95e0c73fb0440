#include "model/config.h"

#include <fmt/ranges.h>

#include <cmath>
#include <string_view>

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
  const bool deepseek2 = c.arch_name == "deepseek2";
  c.n_ff_exp = file.find(p + "expert_feed_forward_length") || c.n_ff == 0 || deepseek2
                   ? positive_int(file, p + "expert_feed_forward_length")
                   : c.n_ff;
  if (const auto* v = file.find(p + "leading_dense_block_count")) {
    const int64_t leading = v->as_int(p + "leading_dense_block_count");
    if (leading < 0 || leading > (int64_t{1} << 30))
      throw FormatError(error_message("model", "{}: {}leading_dense_block_count = {} is out of range", file.path(), p,
                                      leading));
    c.n_dense_leading = static_cast<int32_t>(leading);
  }
  // DeepSeek V2 leaves the weights as the router gave them unless told (llama.cpp's default).
  if (deepseek2) c.expert_weights_norm = false;
  if (const auto* v = file.find(p + "expert_weights_norm")) c.expert_weights_norm = v->as_bool(p + "expert_weights_norm");
  // llama.cpp's numbering: 1 softmax, 2 sigmoid (DeepSeek V3), 3 softmax over the chosen experts'
  // logits (gpt-oss, whose files leave the key out): softmax over all of them renormalized over
  // the chosen is the same weights.
  if (const auto* v = file.find(p + "expert_gating_func")) {
    const int64_t code = v->as_int(p + "expert_gating_func");
    if (code != 1 && code != 2 && code != 3)
      throw FormatError(error_message("model",
                                      "{}: {}expert_gating_func = {} is not supported; supported: 1 (softmax), 2 "
                                      "(sigmoid), 3 (softmax of the chosen)",
                                      file.path(), p, code));
    c.expert_gating = code == 2 ? ExpertGating::Sigmoid : ExpertGating::Softmax;
    if (code == 3) c.expert_weights_norm = true;
  }
  // 0 (absent in most files) means no scaling, as in llama.cpp.
  if (const float scale = optional_float(file, p + "expert_weights_scale", 0.0f); scale != 0) {
    if (!(scale > 0) || !std::isfinite(scale))
      throw FormatError(error_message("model", "{}: {}expert_weights_scale = {} must be positive", file.path(), p, scale));
    c.expert_weights_scale = scale;
  }
  if (const int32_t groups = optional_int(file, p + "expert_group_count", 0); groups > 1) {
    c.n_expert_groups = groups;
    c.n_expert_groups_used = positive_int(file, p + "expert_group_used_count");
    if (c.n_expert % groups != 0 || c.n_expert_groups_used > groups ||
        c.n_expert_groups_used * (c.n_expert / groups) < c.n_expert_used)
      throw FormatError(error_message("model",
                                      "{}: {} experts in {}expert_group_count {} groups, {} of them used, cannot give "
                                      "expert_used_count {}: expected groups dividing the experts and enough of them used",
                                      file.path(), c.n_expert, p, groups, c.n_expert_groups_used, c.n_expert_used));
  }
  // deepseek2 is the architecture whose table has shared experts (one FFN of count × the
  // experts' width, without a gate of its own).
  if (deepseek2) c.n_expert_shared = positive_int(file, p + "expert_shared_count");
  for (const char* key : {"expert_shared_count", "expert_shared_feed_forward_length"}) {
    if (deepseek2 && std::string_view(key) == "expert_shared_count") continue;
    if (const auto* v = file.find(p + key); v && v->as_int(p + key) != 0)
      throw FormatError(error_message("model", "{}: {}{} is set: shared experts are not supported yet", file.path(), p,
                                      key));
  }
}

// YaRN's magnitude factor for a context `factor` times the original one (llama.cpp's get_mscale).
double yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

// rope.scaling.* of a "yarn" file. The magnitude follows llama.cpp: 0.1·ln(factor) + 1, or with
// a yarn_log_multiplier the ratio of two such factors (1 for deepseek2, whose own attention
// scale carries it instead, see read_latent_attention).
void read_yarn(const gguf::Reader& file, const std::string& p, float factor, ModelConfig& c) {
  if (!(factor >= 1) || !std::isfinite(factor))
    throw FormatError(error_message("model", "{}: {}rope.scaling.factor = {} for yarn, expected at least 1",
                                    file.path(), p, factor));
  c.rope_yarn = true;
  c.rope_freq_scale = 1.0f / factor;
  c.yarn_original_context = optional_int(file, p + "rope.scaling.original_context_length", c.context_length);
  c.yarn_beta_fast = optional_float(file, p + "rope.scaling.yarn_beta_fast", 32.0f);
  c.yarn_beta_slow = optional_float(file, p + "rope.scaling.yarn_beta_slow", 1.0f);
  if (!(c.yarn_beta_fast > c.yarn_beta_slow && c.yarn_beta_slow > 0))
    throw FormatError(error_message("model", "{}: yarn_beta_fast {} and yarn_beta_slow {}: expected fast > slow > 0",
                                    file.path(), c.yarn_beta_fast, c.yarn_beta_slow));
  // The file holds 0.1 × mscale_all_dim (as llama.cpp's converter writes it).
  c.yarn_log_multiplier = optional_float(file, p + "rope.scaling.yarn_log_multiplier", 0.0f) / 0.1f;
  double magnitude = yarn_mscale(factor, 1.0);
  if (c.yarn_log_multiplier != 0) {
    const double own = c.arch_name == "deepseek2" && c.yarn_log_multiplier != 1 ? c.yarn_log_multiplier : 1.0;
    magnitude = yarn_mscale(factor, own) / yarn_mscale(factor, c.yarn_log_multiplier);
  }
  c.rope_mscale = static_cast<float>(magnitude * optional_float(file, p + "rope.scaling.attn_factor", 1.0f));
}

// Multi-head latent attention's widths (deepseek2). Files from llama.cpp since the split of
// attn_kv_b write the per-head widths as key_length_mla/value_length_mla (key_length and
// value_length then describe the latent a position keeps); older ones as key_length/value_length.
void read_latent_attention(const gguf::Reader& file, const std::string& p, ModelConfig& c) {
  c.kv_lora_rank = positive_int(file, p + "attention.kv_lora_rank");
  if (const auto* v = file.find(p + "attention.q_lora_rank")) {
    const int64_t rank = v->as_int(p + "attention.q_lora_rank");
    if (rank < 0 || rank > (int64_t{1} << 30))
      throw FormatError(error_message("model", "{}: {}attention.q_lora_rank = {} is out of range", file.path(), p, rank));
    c.q_lora_rank = static_cast<int32_t>(rank);
  }
  c.rope_dims = positive_int(file, p + "rope.dimension_count");
  if (file.find(p + "attention.key_length_mla")) {
    c.head_dim = positive_int(file, p + "attention.key_length_mla");
    c.value_head_dim = positive_int(file, p + "attention.value_length_mla");
    const int32_t key = optional_int(file, p + "attention.key_length", c.kv_lora_rank + c.rope_dims);
    const int32_t value = optional_int(file, p + "attention.value_length", c.kv_lora_rank);
    if (key != c.kv_lora_rank + c.rope_dims || value != c.kv_lora_rank)
      throw FormatError(error_message("model",
                                      "{}: {}attention.key_length {} and value_length {} do not describe the latent of "
                                      "kv_lora_rank {} and {} rope dimensions (expected {} and {})",
                                      file.path(), p, key, value, c.kv_lora_rank, c.rope_dims,
                                      c.kv_lora_rank + c.rope_dims, c.kv_lora_rank));
  } else {
    c.head_dim = positive_int(file, p + "attention.key_length");
    c.value_head_dim = positive_int(file, p + "attention.value_length");
  }
  // Older conversions hold each head's key and value up-projections joined in one attn_kv_b.
  c.joined_kv_b = file.find_tensor("blk.0.attn_kv_b.weight") && !file.find_tensor("blk.0.attn_k_b.weight");
  if (c.rope_dims % 2 != 0 || c.rope_dims >= c.head_dim)
    throw FormatError(error_message("model",
                                    "{}: {}rope.dimension_count {} must be even and less than the key head size {}",
                                    file.path(), p, c.rope_dims, c.head_dim));
  // Every head has its own keys and values, all decompressed from one latent: as far as a
  // split is concerned, as many KV heads as query heads.
  c.n_kv_heads = c.n_heads;
  // llama.cpp's scale: 1/√head_dim times the square of YaRN's magnitude with mscale_all_dim.
  double mscale = 1.0;
  if (c.rope_yarn) mscale = c.rope_mscale * (1.0 + 0.1 * c.yarn_log_multiplier * std::log(1.0 / c.rope_freq_scale));
  c.attention_scale = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(c.head_dim)));
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
  if (const auto* v = file.find("orchard.synthetic.note")) c.synthetic_note = v->as_string("orchard.synthetic.note");

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
    } else if (kind == "yarn") {
      read_yarn(file, p, factor, c);
    } else if (kind != "none" && kind != "linear") {
      throw FormatError(error_message("model", "{}: rope scaling '{}' is not supported; supported: none, linear, yarn",
                                      file.path(), kind));
    }
  } else if (const auto* scale = file.find(p + "rope.scale_linear")) {
    float factor = static_cast<float>(scale->as_float(p + "rope.scale_linear"));
    if (factor > 0) c.rope_freq_scale = 1.0f / factor;
  }

  if (c.arch_name == "deepseek2") read_latent_attention(file, p, c);

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
