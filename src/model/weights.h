#pragma once
// The weights a rank holds, bound to the mapped GGUF file (or repacked copies of it), checked
// against the config's shapes.
#include <functional>
#include <memory>
#include <vector>

#include "core/kernels.h"
#include "model/config.h"
#include "model/gguf/reader.h"
#include "model/shard.h"

namespace orchard::model {

// One layer's tensors as its architecture's table (architecture.h) binds them; what the table
// does not name stays empty, and the forward pass runs the blocks whose weights are there.
struct LayerWeights {
  std::vector<float> attn_norm;       // F32 [n_embd]
  core::WeightMatrix wq;              // [shard q_dim, n_embd]
  core::WeightMatrix wk;              // [shard kv_dim, n_embd]
  core::WeightMatrix wv;              // [shard kv_dim, n_embd]
  core::WeightMatrix wo;              // [n_embd, shard q_dim]
  std::vector<float> bq, bk, bv;      // qwen2 biases, F32 [shard q_dim] / [shard kv_dim]
  std::vector<float> q_norm, k_norm;  // qwen3, F32 [head_dim]
  std::vector<float> bo;              // gpt-oss, F32 [n_embd]: added once to the summed attn_output product
  std::vector<float> attn_sinks;      // gpt-oss, F32 [shard n_heads]: each head's sink logit
  std::vector<float> ffn_norm;        // F32 [n_embd]
  core::WeightMatrix w_gate;          // [shard n_ff, n_embd]
  core::WeightMatrix w_up;            // [shard n_ff, n_embd]
  core::WeightMatrix w_down;          // [n_embd, shard n_ff]
  // Mixture of experts: the router and, per expert, its FFN (views into the file's stacks).
  std::vector<float> router;                    // F32 [n_expert, n_embd]
  // gpt-oss's biases: the router's, and every expert's gate/up (its shard rows) and down.
  std::vector<float> router_bias;               // F32 [n_expert]
  std::vector<float> expert_gate_bias;          // F32 [n_expert, shard n_ff_exp]
  std::vector<float> expert_up_bias;            // F32 [n_expert, shard n_ff_exp]
  std::vector<float> expert_down_bias;          // F32 [n_expert, n_embd]
  std::vector<core::WeightMatrix> expert_gate;  // [n_expert] of [shard n_ff_exp, n_embd]
  std::vector<core::WeightMatrix> expert_up;    // [n_expert] of [shard n_ff_exp, n_embd]
  std::vector<core::WeightMatrix> expert_down;  // [n_expert] of [n_embd, shard n_ff_exp]

  // deepseek2: the expert-score bias (added for choosing only) and the shared experts' FFN.
  std::vector<float> expert_bias;     // F32 [n_expert]
  core::WeightMatrix shared_gate;     // [shard shared rows, n_embd]
  core::WeightMatrix shared_up;       // as shared_gate
  core::WeightMatrix shared_down;     // [n_embd, shard shared rows]
  // Multi-head latent attention (deepseek2); wq is then attn_q or, after wq_a, attn_q_b.
  core::WeightMatrix wq_a;                // [q_lora_rank, n_embd]
  std::vector<float> q_a_norm;            // F32 [q_lora_rank]
  core::WeightMatrix wkv_a;               // [kv_lora_rank + rope_dims, n_embd]
  std::vector<float> kv_a_norm;           // F32 [kv_lora_rank]
  std::vector<core::WeightMatrix> k_b;    // [n_heads] of [kv_lora_rank, head_dim - rope_dims]
  std::vector<core::WeightMatrix> v_b;    // [n_heads] of [value_head_dim, kv_lora_rank]

  bool has_experts() const { return !expert_gate.empty(); }
};

struct LoadOptions {
  bool allow_repack = true;
  // Called after each tensor is bound, with (tensors done, tensors in all); for progress bars.
  std::function<void(size_t, size_t)> on_progress;
};

class ModelWeights {
 public:
  // Binds the tensors `shard` needs; throws FormatError naming any missing tensor or wrong
  // shape/type.
  ModelWeights(const gguf::Reader& file, const ModelConfig& config, const Shard& shard, const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const Shard& shard() const { return shard_; }
  const LayerWeights& layer(int32_t global_layer) const { return layers_.at(global_layer - shard_.layer_begin); }
  // Embedding row of `token` into dst [n_embd].
  void embed(int32_t token, float* dst) const;
  const std::vector<float>& output_norm() const { return output_norm_; }
  const core::WeightMatrix& output() const { return output_; }  // [shard n_vocab, n_embd]
  const std::vector<float>& rope_freq_factors() const { return rope_freq_factors_; }
  // Bytes of weights read per generated token (for bandwidth figures): in a mixture of experts,
  // the chosen experts' share (n_expert_used of n_expert) of the expert stacks.
  size_t bytes_per_token() const;

 private:
  ModelConfig config_;
  Shard shard_;
  core::WeightMatrix token_embd_;  // [vocab, n_embd]
  std::vector<LayerWeights> layers_;
  std::vector<float> output_norm_;
  core::WeightMatrix output_;
  std::vector<float> rope_freq_factors_;
  std::vector<std::vector<uint8_t>> owned_slices_;  // column slices gathered out of the file
};

}  // namespace orchard::model

namespace orchard::model {

// A span of the model file's bytes.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// The bytes of `file` that ModelWeights reads for `shard` (row ranges of row-split tensors,
// whole tensors otherwise; per expert for stacks), so a rank without the file can be sent
// exactly those.
std::vector<ByteRange> shard_byte_ranges(const gguf::Reader& file, const ModelConfig& config, const Shard& shard);

}  // namespace orchard::model
