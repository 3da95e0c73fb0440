// llama (Llama 1-3, TinyLlama, Mistral) and its mixture-of-experts form (Mixtral): the same
// architecture name, with ffn_gate_inp and expert stacks in place of the dense FFN when the
// file has "llama.expert_count".
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kLlama{
    "llama", RopeOrdering::Normal, /*mixture_of_experts=*/false, [](const ModelConfig& c, int32_t l) {
      std::vector<TensorSpec> out;
      blocks::attention(c, l, {}, out);
      if (c.moe_layer(l))
        blocks::moe_ffn(c, l, out);
      else
        blocks::dense_ffn(c, l, out);
      return out;
    }};

}  // namespace orchard::model
