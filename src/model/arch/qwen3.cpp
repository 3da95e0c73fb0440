// qwen3 (dense Qwen3): no biases; each query and key head is RMS-normalized before RoPE, and the
// head size is set apart from n_embd / n_heads (attention.key_length).
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kQwen3{"qwen3", RopeOrdering::NeoX, /*mixture_of_experts=*/false,
                                    [](const ModelConfig& c, int32_t l) {
                                      std::vector<TensorSpec> out;
                                      blocks::attention(c, l, {.qk_norm = true}, out);
                                      blocks::dense_ffn(c, l, out);
                                      return out;
                                    }};

}  // namespace orchard::model
