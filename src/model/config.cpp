#include "model/config.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace orchard::model {
namespace {

struct ArchitectureInfo {
  std::string_view name;
  Architecture arch;
  RopeOrdering rope;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {"llama", Architecture::Llama, RopeOrdering::Normal},
    {"qwen2", Architecture::Qwen2, RopeOrdering::NeoX},
    {"qwen3", Architecture::Qwen3, RopeOrdering::NeoX},
};

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

}  // namespace

std::string supported_architectures() {
  std::string out;
  for (const auto& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

ModelConfig ModelConfig::from_gguf(const gguf::Reader& file) {
  ModelConfig c;
  c.arch_name = file.get("general.architecture").as_string("general.architecture");
  const ArchitectureInfo* info = nullptr;
  for (const auto& a : kArchitectures)
    if (a.name == c.arch_name) info = &a;
  if (!info)
    throw FormatError(error_message("model", "{}: architecture '{}' is not supported; supported: {}", file.path(),
                                    c.arch_name, supported_architectures()));
  c.arch = info->arch;
  c.rope_ordering = info->rope;
  if (const auto* v = file.find("general.name")) c.name = v->as_string("general.name");

  const std::string p = c.arch_name + ".";
  c.n_embd = positive_int(file, p + "embedding_length");
  c.n_layers = positive_int(file, p + "block_count");
  c.n_ff = positive_int(file, p + "feed_forward_length");
  c.n_heads = positive_int(file, p + "attention.head_count");
  c.n_kv_heads = optional_int(file, p + "attention.head_count_kv", c.n_heads);
  c.context_length = optional_int(file, p + "context_length", 2048);
  c.head_dim = optional_int(file, p + "attention.key_length", c.n_embd / c.n_heads);
  c.rope_dims = optional_int(file, p + "rope.dimension_count", c.head_dim);
  c.rms_eps = optional_float(file, p + "attention.layer_norm_rms_epsilon", 1e-5f);
  c.rope_theta = optional_float(file, p + "rope.freq_base", 10000.0f);

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
  c.has_qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.has_qk_norm = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  c.has_rope_freq_factors = file.find_tensor("rope_freqs.weight") != nullptr;
  return c;
}

}  // namespace orchard::model
