// deepseek2 (DeepSeek V2, V2-Lite, V3, R1; Kimi K2): multi-head latent attention (keys and
// values decompressed per head from one small latent per position, which is all the cache
// keeps), leading dense layers, then mixtures of experts with shared experts, routed by softmax
// (V2) or by sigmoid scores with a selection bias and group-limited choice (V3, Kimi K2).
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kDeepseek2{"deepseek2", RopeOrdering::Normal, /*mixture_of_experts=*/true,
                                        [](const ModelConfig& c, int32_t l) {
                                          std::vector<TensorSpec> out;
                                          blocks::latent_attention(c, l, out);
                                          if (c.moe_layer(l)) {
                                            blocks::moe_ffn(c, l, out);
                                            blocks::moe_extras(c, l, out);
                                          } else {
                                            blocks::dense_ffn(c, l, out);
                                          }
                                          return out;
                                        }};

}  // namespace orchard::model
