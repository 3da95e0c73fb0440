// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention, and in every layer a mixture of
// experts: a softmax router picks expert_used_count of expert_count experts per token, their
// weights renormalized to sum to one.
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kQwen3Moe{"qwen3moe", RopeOrdering::NeoX, /*mixture_of_experts=*/true,
                                       [](const ModelConfig& c, int32_t l) {
                                         std::vector<TensorSpec> out;
                                         blocks::attention(c, l, {.qk_norm = true}, out);
                                         blocks::moe_ffn(c, l, out);
                                         return out;
                                       }};

}  // namespace orchard::model
