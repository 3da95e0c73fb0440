#include "model/architecture.h"

#include <fmt/format.h>

#include "model/weights.h"

namespace orchard::model {

extern const ArchitectureDef kLlama;
extern const ArchitectureDef kQwen2;
extern const ArchitectureDef kQwen3;
extern const ArchitectureDef kQwen3Moe;
extern const ArchitectureDef kDeepseek2;
extern const ArchitectureDef kGptOss;

namespace {

constexpr const ArchitectureDef* kArchitectures[] = {&kLlama, &kQwen2, &kQwen3, &kQwen3Moe, &kDeepseek2, &kGptOss};

std::string layer_name(int32_t layer, std::string_view tensor) { return fmt::format("blk.{}.{}", layer, tensor); }

}  // namespace

const ArchitectureDef* find_architecture(std::string_view name) {
  for (const ArchitectureDef* a : kArchitectures)
    if (a->name == name) return a;
  return nullptr;
}

std::string supported_architectures() {
  std::string out;
  for (const ArchitectureDef* a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a->name);
  return out;
}

std::vector<TensorSpec> model_tensors(const ModelConfig& c) {
  const int64_t d = c.n_embd, vocab = c.vocab_size;
  std::vector<TensorSpec> out;
  out.push_back({.name = "token_embd.weight", .shape = {d, vocab}, .role = TensorRole::Embedding});
  out.push_back({.name = "rope_freqs.weight", .shape = {c.rope_dims / 2}, .role = TensorRole::RopeFactors,
                 .required = false});
  out.push_back({.name = "output_norm.weight", .shape = {d}, .role = TensorRole::Norm});
  out.push_back({.name = "output.weight", .shape = {d, vocab}, .role = TensorRole::Output, .split = Split::Rows,
                 .axis = ShardAxis::Vocab, .required = false});
  return out;
}

void for_each_tensor(const ModelConfig& c, const std::function<void(const TensorSpec&, int32_t layer)>& f) {
  const std::vector<TensorSpec> global = model_tensors(c);
  f(global[0], -1);
  f(global[1], -1);
  for (int32_t l = 0; l < c.n_layers; ++l)
    for (const TensorSpec& t : c.arch->layer_tensors(c, l)) f(t, l);
  f(global[2], -1);
  f(global[3], -1);
}

namespace blocks {

void attention(const ModelConfig& c, int32_t l, AttentionOptions options, std::vector<TensorSpec>& out) {
  const int64_t d = c.n_embd, q = c.q_dim(), kv = c.kv_dim();
  out.push_back({layer_name(l, "attn_norm.weight"), {d}, TensorRole::Norm, Split::Whole, ShardAxis::QueryDims, true,
                 &LayerWeights::attn_norm});
  out.push_back({layer_name(l, "attn_q.weight"), {d, q}, TensorRole::Matrix, Split::Rows, ShardAxis::QueryDims, true,
                 &LayerWeights::wq});
  out.push_back({layer_name(l, "attn_k.weight"), {d, kv}, TensorRole::Matrix, Split::Rows, ShardAxis::KvDims, true,
                 &LayerWeights::wk});
  out.push_back({layer_name(l, "attn_v.weight"), {d, kv}, TensorRole::MoreBits, Split::Rows, ShardAxis::KvDims, true,
                 &LayerWeights::wv});
  if (options.qkv_bias) {
    out.push_back({layer_name(l, "attn_q.bias"), {q}, TensorRole::Bias, Split::Rows, ShardAxis::QueryDims, true,
                   &LayerWeights::bq});
    out.push_back({layer_name(l, "attn_k.bias"), {kv}, TensorRole::Bias, Split::Rows, ShardAxis::KvDims, true,
                   &LayerWeights::bk});
    out.push_back({layer_name(l, "attn_v.bias"), {kv}, TensorRole::Bias, Split::Rows, ShardAxis::KvDims, true,
                   &LayerWeights::bv});
  }
  if (options.qk_norm) {
    out.push_back({layer_name(l, "attn_q_norm.weight"), {c.head_dim}, TensorRole::Norm, Split::Whole,
                   ShardAxis::QueryDims, true, &LayerWeights::q_norm});
    out.push_back({layer_name(l, "attn_k_norm.weight"), {c.head_dim}, TensorRole::Norm, Split::Whole,
                   ShardAxis::QueryDims, true, &LayerWeights::k_norm});
  }
  out.push_back({layer_name(l, "attn_output.weight"), {q, d}, TensorRole::Matrix, Split::Columns,
                 ShardAxis::QueryDims, true, &LayerWeights::wo});
  // Added to the summed product, so whole on every rank.
  if (options.output_bias)
    out.push_back({layer_name(l, "attn_output.bias"), {d}, TensorRole::Bias, Split::Whole, ShardAxis::QueryDims, true,
                   &LayerWeights::bo});
  if (options.sinks)
    out.push_back({layer_name(l, "attn_sinks.weight"), {c.n_heads}, TensorRole::Sinks, Split::Rows,
                   ShardAxis::QueryHeads, true, &LayerWeights::attn_sinks});
}

void dense_ffn(const ModelConfig& c, int32_t l, std::vector<TensorSpec>& out) {
  const int64_t d = c.n_embd, ff = c.n_ff;
  out.push_back({layer_name(l, "ffn_norm.weight"), {d}, TensorRole::Norm, Split::Whole, ShardAxis::FfRows, true,
                 &LayerWeights::ffn_norm});
  out.push_back({layer_name(l, "ffn_gate.weight"), {d, ff}, TensorRole::Matrix, Split::Rows, ShardAxis::FfRows, true,
                 &LayerWeights::w_gate});
  out.push_back({layer_name(l, "ffn_up.weight"), {d, ff}, TensorRole::Matrix, Split::Rows, ShardAxis::FfRows, true,
                 &LayerWeights::w_up});
  out.push_back({layer_name(l, "ffn_down.weight"), {ff, d}, TensorRole::MoreBits, Split::Columns, ShardAxis::FfRows,
                 true, &LayerWeights::w_down});
}

void moe_ffn(const ModelConfig& c, int32_t l, std::vector<TensorSpec>& out, MoeOptions options) {
  const int64_t d = c.n_embd, ff = c.n_ff_exp, n = c.n_expert;
  out.push_back({layer_name(l, options.post_attention_norm ? "post_attention_norm.weight" : "ffn_norm.weight"), {d},
                 TensorRole::Norm, Split::Whole, ShardAxis::ExpertRows, true, &LayerWeights::ffn_norm});
  // Every rank routes every token itself (the router is small), so all agree on the choice.
  out.push_back({layer_name(l, "ffn_gate_inp.weight"), {d, n}, TensorRole::Router, Split::Whole, ShardAxis::ExpertRows,
                 true, &LayerWeights::router});
  if (options.biases) {
    out.push_back({layer_name(l, "ffn_gate_inp.bias"), {n}, TensorRole::Bias, Split::Whole, ShardAxis::ExpertRows,
                   true, &LayerWeights::router_bias});
    // The gate and up biases follow their rows; the down bias is added to the summed product.
    out.push_back({layer_name(l, "ffn_gate_exps.bias"), {ff, n}, TensorRole::Bias, Split::Rows, ShardAxis::ExpertRows,
                   true, &LayerWeights::expert_gate_bias});
    out.push_back({layer_name(l, "ffn_up_exps.bias"), {ff, n}, TensorRole::Bias, Split::Rows, ShardAxis::ExpertRows,
                   true, &LayerWeights::expert_up_bias});
    out.push_back({layer_name(l, "ffn_down_exps.bias"), {d, n}, TensorRole::Bias, Split::Whole, ShardAxis::ExpertRows,
                   true, &LayerWeights::expert_down_bias});
  }
  out.push_back({layer_name(l, "ffn_gate_exps.weight"), {d, ff, n}, TensorRole::Matrix, Split::Rows,
                 ShardAxis::ExpertRows, true, &LayerWeights::expert_gate});
  out.push_back({layer_name(l, "ffn_up_exps.weight"), {d, ff, n}, TensorRole::Matrix, Split::Rows,
                 ShardAxis::ExpertRows, true, &LayerWeights::expert_up});
  out.push_back({layer_name(l, "ffn_down_exps.weight"), {ff, d, n}, TensorRole::MoreBits, Split::Columns,
                 ShardAxis::ExpertRows, true, &LayerWeights::expert_down});
}

void latent_attention(const ModelConfig& c, int32_t l, std::vector<TensorSpec>& out) {
  const int64_t d = c.n_embd, q = c.q_dim(), latent = c.kv_lora_rank, rope = c.rope_dims;
  const int64_t nope = c.head_dim - c.rope_dims, heads = c.n_heads;
  out.push_back({layer_name(l, "attn_norm.weight"), {d}, TensorRole::Norm, Split::Whole, ShardAxis::QueryDims, true,
                 &LayerWeights::attn_norm});
  // The latents are small and every rank computes them whole: each keeps the whole cache.
  if (c.q_lora_rank > 0) {
    const int64_t rank = c.q_lora_rank;
    out.push_back({layer_name(l, "attn_q_a_norm.weight"), {rank}, TensorRole::Norm, Split::Whole, ShardAxis::QueryDims,
                   true, &LayerWeights::q_a_norm});
    out.push_back({layer_name(l, "attn_q_a.weight"), {d, rank}, TensorRole::Matrix, Split::Whole, ShardAxis::QueryDims,
                   true, &LayerWeights::wq_a});
    out.push_back({layer_name(l, "attn_q_b.weight"), {rank, q}, TensorRole::Matrix, Split::Rows, ShardAxis::QueryDims,
                   true, &LayerWeights::wq});
  } else {
    out.push_back({layer_name(l, "attn_q.weight"), {d, q}, TensorRole::Matrix, Split::Rows, ShardAxis::QueryDims, true,
                   &LayerWeights::wq});
  }
  out.push_back({layer_name(l, "attn_kv_a_norm.weight"), {latent}, TensorRole::Norm, Split::Whole, ShardAxis::KvDims,
                 true, &LayerWeights::kv_a_norm});
  out.push_back({layer_name(l, "attn_kv_a_mqa.weight"), {d, latent + rope}, TensorRole::Matrix, Split::Whole,
                 ShardAxis::KvDims, true, &LayerWeights::wkv_a});
  // One matrix per head; every rank binds them all (views) and uses its own heads'. The joined
  // attn_kv_b of older files is bound by ModelWeights itself, split into that form.
  if (c.joined_kv_b) {
    out.push_back({layer_name(l, "attn_kv_b.weight"), {latent, heads * (nope + c.value_head_dim)}, TensorRole::Matrix,
                   Split::Whole, ShardAxis::QueryDims, true, {}});
  } else {
    out.push_back({layer_name(l, "attn_k_b.weight"), {nope, latent, heads}, TensorRole::Matrix, Split::Whole,
                   ShardAxis::QueryDims, true, &LayerWeights::k_b});
    out.push_back({layer_name(l, "attn_v_b.weight"), {latent, c.value_head_dim, heads}, TensorRole::MoreBits,
                   Split::Whole, ShardAxis::QueryDims, true, &LayerWeights::v_b});
  }
  out.push_back({layer_name(l, "attn_output.weight"), {heads * c.value_head_dim, d}, TensorRole::Matrix,
                 Split::Columns, ShardAxis::ValueDims, true, &LayerWeights::wo});
}

void moe_extras(const ModelConfig& c, int32_t l, std::vector<TensorSpec>& out) {
  const int64_t d = c.n_embd, ff = static_cast<int64_t>(c.n_ff_exp) * c.n_expert_shared;
  out.push_back({layer_name(l, "exp_probs_b.bias"), {c.n_expert}, TensorRole::Bias, Split::Whole,
                 ShardAxis::ExpertRows, false, &LayerWeights::expert_bias});
  if (c.n_expert_shared == 0) return;
  out.push_back({layer_name(l, "ffn_gate_shexp.weight"), {d, ff}, TensorRole::Matrix, Split::Rows,
                 ShardAxis::SharedRows, true, &LayerWeights::shared_gate});
  out.push_back({layer_name(l, "ffn_up_shexp.weight"), {d, ff}, TensorRole::Matrix, Split::Rows, ShardAxis::SharedRows,
                 true, &LayerWeights::shared_up});
  out.push_back({layer_name(l, "ffn_down_shexp.weight"), {ff, d}, TensorRole::MoreBits, Split::Columns,
                 ShardAxis::SharedRows, true, &LayerWeights::shared_down});
}

}  // namespace blocks

}  // namespace orchard::model
