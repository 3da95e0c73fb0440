#pragma once
// An architecture is a set of hyper-parameters and a table of tensors. Each one lives in its own
// file under arch/ and describes its layers with the shared blocks below (attention variants,
// dense FFN, mixture-of-experts FFN); weight binding, the byte ranges a rank is sent, the
// synthetic model writer and the shape checks all read that one table, so adding an
// architecture is one file plus its tests.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/kernels.h"
#include "model/config.h"

namespace orchard::model {

struct LayerWeights;

// How a tensor divides between ranks that split a layer (tensor parallelism): whole on every
// rank, or a range of its rows or of its columns following one of the shard's ranges.
enum class Split { Whole, Rows, Columns };

// Which of the shard's ranges a split tensor follows.
enum class ShardAxis {
  QueryDims,  // the shard's query heads × head size
  QueryHeads, // the shard's query heads (one value per head: attention sinks)
  KvDims,     // its key/value heads × head size
  FfRows,     // its rows of the dense FFN
  ExpertRows, // its rows of every expert's FFN
  Vocab,      // its rows of the output head
  ValueDims,  // its query heads × value head size (latent attention's output projection)
  SharedRows, // its rows of the shared experts' FFN (split like a dense FFN by tensor and expert splits alike)
};

// What a tensor is for: the synthetic writer picks its type (in a mix such as Q4_K_M) and its
// initial values from this.
enum class TensorRole {
  Embedding,
  Output,
  Matrix,     // a projection; quantized as the file's main type
  MoreBits,   // a projection the mixes keep at more bits in some layers (attn_v, ffn_down)
  Router,     // expert gate: kept F32, as llama.cpp's quantizer keeps it
  Norm,       // F32 vector near 1
  Bias,       // F32 vector near 0
  RopeFactors,
  Sinks,      // F32 attention sink logits, one per head, of about the scores' spread
};

// Where ModelWeights binds a layer tensor.
// A std::vector<float> holds a vector, or the rows of a small matrix (one bias per expert) end
// to end, each cut to the shard's range when the tensor splits by rows.
using LayerSlot = std::variant<std::monostate, core::WeightMatrix LayerWeights::*, std::vector<float> LayerWeights::*,
                               std::vector<core::WeightMatrix> LayerWeights::*>;

struct TensorSpec {
  std::string name;            // "blk.3.attn_q.weight"
  std::vector<int64_t> shape;  // GGUF order: {n} vector, {cols, rows} matrix, {cols, rows, experts} stack
  TensorRole role = TensorRole::Matrix;
  Split split = Split::Whole;
  ShardAxis axis = ShardAxis::QueryDims;
  bool required = true;
  LayerSlot slot = {};         // monostate for the model-wide tensors, which are bound by name

  int64_t rows() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t cols() const { return shape[0]; }
  int64_t experts() const { return shape.size() > 2 ? shape[2] : 1; }
};

struct ArchitectureDef {
  std::string_view name;  // general.architecture
  RopeOrdering rope;
  bool mixture_of_experts;  // experts are required (an architecture such as llama may have them)
  // The tensors of layer `layer`, in file order.
  std::vector<TensorSpec> (*layer_tensors)(const ModelConfig& config, int32_t layer);
  FfnActivation activation = FfnActivation::SwiGlu;
  // > 0: layers l with l % period < period - 1 attend through a sliding window of
  // attention.sliding_window positions (then required); attention.sliding_window_pattern in
  // the file sets another period.
  int32_t sliding_window_period = 0;
};

// The architectures Orchard runs; nullptr for any other name.
const ArchitectureDef* find_architecture(std::string_view name);
// "llama, qwen2, qwen3, qwen3moe, deepseek2, gpt-oss"
std::string supported_architectures();

// The model-wide tensors (embedding, RoPE factors, output norm and head), in file order; the
// output head is optional (absent: tied to the embedding).
std::vector<TensorSpec> model_tensors(const ModelConfig& config);
// Calls f(tensor, layer) for every tensor of the model in file order: model_tensors (layer -1)
// with each layer's between the RoPE factors and the output norm.
void for_each_tensor(const ModelConfig& config, const std::function<void(const TensorSpec&, int32_t layer)>& f);

// Shared blocks the architecture files build their layers from.
namespace blocks {

struct AttentionOptions {
  bool qkv_bias = false;  // qwen2
  bool qk_norm = false;   // qwen3: RMSNorm of each query and key head before RoPE
  bool output_bias = false;  // gpt-oss: attn_output.bias
  bool sinks = false;        // gpt-oss: attn_sinks.weight, one logit per head in its softmax
};
// attn_norm, q/k/v projections (with their biases), q/k norms, attn_output (and its bias),
// attention sinks.
void attention(const ModelConfig& c, int32_t layer, AttentionOptions options, std::vector<TensorSpec>& out);
// ffn_norm, gate/up/down of a SwiGLU FFN of width n_ff.
void dense_ffn(const ModelConfig& c, int32_t layer, std::vector<TensorSpec>& out);
struct MoeOptions {
  // gpt-oss: a bias on the router and on every expert's gate, up and down projection, and the
  // FFN's norm named post_attention_norm.
  bool biases = false;
  bool post_attention_norm = false;
};
// ffn_norm, the router (ffn_gate_inp) and the experts' gate/up/down stacks of width n_ff_exp.
void moe_ffn(const ModelConfig& c, int32_t layer, std::vector<TensorSpec>& out, MoeOptions options = {});
// Multi-head latent attention (deepseek2): attn_norm, the query (attn_q, or attn_q_a, its norm
// and attn_q_b), attn_kv_a_mqa and its norm, the per-head up-projections attn_k_b/attn_v_b
// (stacks of one matrix per head), attn_output.
void latent_attention(const ModelConfig& c, int32_t layer, std::vector<TensorSpec>& out);
// The expert-score bias (exp_probs_b) and the shared experts' gate/up/down (ffn_*_shexp).
void moe_extras(const ModelConfig& c, int32_t layer, std::vector<TensorSpec>& out);

}  // namespace blocks

}  // namespace orchard::model
