// gpt-oss (gpt-oss-20b, gpt-oss-120b): biased attention whose heads each have a learned sink
// logit in their softmax, the even layers attending through a sliding window; in every layer a
// mixture of experts with biases throughout, whose chosen experts are weighed by a softmax over
// just their router logits (llama.cpp's gating 3: the same as softmax then renormalizing), and
// a clamped SwiGLU. NeoX RoPE, RMSNorm, an untied output head.
#include "model/architecture.h"

namespace orchard::model {

extern const ArchitectureDef kGptOss{"gpt-oss",
                                     RopeOrdering::NeoX,
                                     /*mixture_of_experts=*/true,
                                     [](const ModelConfig& c, int32_t l) {
                                       std::vector<TensorSpec> out;
                                       blocks::attention(
                                           c, l, {.qkv_bias = true, .output_bias = true, .sinks = true}, out);
                                       blocks::moe_ffn(c, l, out, {.biases = true, .post_attention_norm = true});
                                       return out;
                                     },
                                     FfnActivation::ClampedSwiGlu,
                                     /*sliding_window_period=*/2};

}  // namespace orchard::model
