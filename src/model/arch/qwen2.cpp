// qwen2 (Qwen2, Qwen2.5): llama's layer with biases on the query, key and value projections and
// NeoX RoPE.
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kQwen2{"qwen2", RopeOrdering::NeoX, /*mixture_of_experts=*/false,
                                    [](const ModelConfig& c, int32_t l) {
                                      std::vector<TensorSpec> out;
                                      blocks::attention(c, l, {.qkv_bias = true}, out);
                                      blocks::dense_ffn(c, l, out);
                                      return out;
                                    }};

}  // namespace orchard::model
