#pragma once
// The hyper-parameters of a model, read from GGUF metadata ("<arch>.embedding_length", ...).
#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf/reader.h"

namespace orchard::model {

struct ArchitectureDef;

// How RoPE pairs the dimensions of a head: Normal rotates (2i, 2i+1) (llama, as GGUF stores
// its permuted q/k), NeoX rotates (i, i + d/2) (qwen2, qwen3).
enum class RopeOrdering { Normal, NeoX };

// How a router's logits become expert scores (llama.cpp's expert_gating_func numbering; its 3,
// a softmax of the chosen experts' logits, is Softmax with the weights normalized).
enum class ExpertGating { Softmax = 1, Sigmoid = 2 };

// The FFN's gated activation: SwiGlu is silu(gate)·up; ClampedSwiGlu (gpt-oss) clamps gate
// above and up to ±7 and computes gate·σ(1.702·gate)·(up + 1).
enum class FfnActivation { SwiGlu, ClampedSwiGlu };

struct ModelConfig {
  const ArchitectureDef* arch = nullptr;  // its tensor table (architecture.h)
  std::string arch_name;          // "llama", "qwen2", "qwen3", "qwen3moe", "deepseek2", "gpt-oss"
  std::string name;               // general.name, may be empty
  // orchard.synthetic.note of a file make-model wrote (what its text will be like); empty otherwise.
  std::string synthetic_note;
  int32_t n_embd = 0;             // width of the residual stream
  int32_t n_layers = 0;
  int32_t n_heads = 0;            // query heads
  int32_t n_kv_heads = 0;         // key/value heads (grouped-query attention when < n_heads)
  int32_t head_dim = 0;           // per head; qwen3 sets it apart from n_embd / n_heads
  int32_t n_ff = 0;               // dense FFN inner width
  // Mixture of experts (all 0 in a dense model): each MoE layer holds n_expert FFNs of width
  // n_ff_exp, of which every token visits n_expert_used, chosen by a router.
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_exp = 0;
  int32_t n_dense_leading = 0;    // the first layers keep a dense FFN
  bool expert_weights_norm = true;  // the chosen experts' weights are rescaled to sum to one
  ExpertGating expert_gating = ExpertGating::Softmax;
  float expert_weights_scale = 1.0f;  // the chosen experts' weights are multiplied by this (after norm)
  // Group-limited routing (DeepSeek V3): experts form n_expert_groups equal groups; a token
  // chooses among the experts of its n_expert_groups_used best groups only (0: no groups).
  int32_t n_expert_groups = 0;
  int32_t n_expert_groups_used = 0;
  int32_t n_expert_shared = 0;    // shared experts every token visits, as one FFN of n_shared × n_ff_exp
  FfnActivation ffn_activation = FfnActivation::SwiGlu;
  // Sliding-window attention (gpt-oss): in sliding layers a position sees itself and the
  // sliding_window - 1 positions before it; in the others every earlier position. 0: none.
  int32_t sliding_window = 0;
  // Which layers slide, as llama.cpp's attention.sliding_window_pattern says: those with
  // l % period < period - 1 (gpt-oss: 2, the even layers), every layer when 0.
  int32_t sliding_window_period = 0;
  int32_t vocab_size = 0;
  int32_t context_length = 0;     // trained context
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;   // linear scaling: positions are multiplied by this
  int32_t rope_dims = 0;          // dimensions of a head that rotate (usually head_dim)
  RopeOrdering rope_ordering = RopeOrdering::Normal;
  bool tied_output = false;       // no output.weight: the embedding is reused
  bool has_rope_freq_factors = false;  // llama 3.1 "rope_freqs.weight"
  // YaRN (rope.scaling.type "yarn"): each frequency blends from interpolated (× rope_freq_scale)
  // to extrapolated (unscaled) over the dimensions between the corrections of yarn_beta_fast
  // and yarn_beta_slow rotations in the original context; cos and sin are scaled by rope_mscale.
  bool rope_yarn = false;
  int32_t yarn_original_context = 0;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_log_multiplier = 0;  // DeepSeek's mscale_all_dim (GGUF stores 0.1 × it)
  float rope_mscale = 1.0f;       // magnitude of the rotation: cos and sin are multiplied by it
  // Multi-head latent attention (deepseek2: kv_lora_rank > 0). A head's query and key are
  // head_dim = nope + rope_dims wide (the rope_dims rotated ones last), its value value_head_dim;
  // keys and values come from one latent of kv_lora_rank per position (what the cache keeps,
  // with the rotated rope_dims shared by every head). q_lora_rank > 0: the query goes through a
  // latent of that width too.
  int32_t q_lora_rank = 0;
  int32_t kv_lora_rank = 0;
  int32_t value_head_dim = 0;
  float attention_scale = 0;      // multiplies q·k; 0: 1/√head_dim
  // Older conversions hold every head's key and value up-projections in one attn_kv_b, which
  // the weights split at load into the per-head attn_k_b/attn_v_b form.
  bool joined_kv_b = false;

  bool latent_attention() const { return kv_lora_rank > 0; }

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  // Floats the KV cache keeps per position and layer for kv_heads of the KV heads: each one's key
  // and value, or, with latent attention, the latent (as key and as value) and the rotated part,
  // whatever the heads.
  int64_t kv_cache_floats(int32_t kv_heads) const {
    return latent_attention() ? int64_t{2} * kv_lora_rank + rope_dims : int64_t{2} * kv_heads * head_dim;
  }
  bool moe_layer(int32_t layer) const { return n_expert > 0 && layer >= n_dense_leading; }
  bool sliding_layer(int32_t layer) const {
    return sliding_window > 0 &&
           (sliding_window_period == 0 || layer % sliding_window_period < sliding_window_period - 1);
  }
  // Positions a sliding layer's ring keeps in a cache of n_ctx positions written up to max_batch
  // at a time (KvCache: the window plus a batch, every slot kept twice), or 0 where no layer
  // slides or the ring would be no smaller than n_ctx. Forward sizes its caches by this.
  int32_t sliding_ring(int32_t n_ctx, int32_t max_batch) const {
    bool sliding = false;
    for (int32_t l = 0; l < n_layers; ++l) sliding = sliding || sliding_layer(l);
    return sliding && int64_t{sliding_window} + max_batch - 1 <= n_ctx / 2 ? sliding_window + max_batch - 1 : 0;
  }
  // Slots (positions' keys and values) the layer's cache holds: twice its ring, or n_ctx.
  int64_t kv_slots(int32_t layer, int32_t n_ctx, int32_t max_batch) const {
    const int32_t ring = sliding_layer(layer) ? sliding_ring(n_ctx, max_batch) : 0;
    return ring > 0 ? int64_t{2} * ring : n_ctx;
  }

  // Reads and checks the metadata. Unknown architecture: FormatError listing the supported
  // ones; missing keys name the key; an expert gating function other than softmax names it;
  // inconsistent numbers (heads not dividing, tensors of the wrong shape) name both sides.
  static ModelConfig from_gguf(const gguf::Reader& file);
};

}  // namespace orchard::model
