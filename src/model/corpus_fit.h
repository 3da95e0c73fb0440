#pragma once
// Weights that make a synthetic llama-shaped model continue text the way Orchard's bundled corpus
// does, without any training, so the built-in default model says something a person recognizes as
// language. The weights are written, not learned: they encode the corpus's token statistics in the
// residual stream.
//   - The embedding holds, for each token b, its bigram continuations as a sum of random "logit
//     codes" u_c (one unit vector per token in a subspace), weighed by how much more often c
//     follows b than chance; the output head reads the codes back (row c = u_c) and adds each
//     token's log unigram frequency through a constant dimension.
//   - Layer 0 copies the previous token's identity into the residual: one attention head per used
//     KV head has constant queries and keys whose RoPE phases make the score peak at distance 1
//     (the pair amplitudes chosen by maximizing the worst margin over every other distance in the
//     context), and values that carry the token's identity code.
//   - Every layer's FFN is a key-value memory: a hidden unit fires (SiLU of a steep gate) only
//     when the previous and current identity codes both match its trigram context (a, b) and
//     writes the codes of what followed "a b" in the corpus. Contexts whose second token already
//     has one continuation need no unit; the rest are taken by frequency until the units run out.
//   - Every other layer contribution is zero (attention outputs of layers 1..n), and a padding
//     dimension sets every embedding to the same norm, much larger than its content, so that RMS
//     normalization scales every position alike.
// Dimensions are grouped in 32-wide blocks by role (codes, identities, constant, padding) so that
// block-quantized types (Q4_0, Q8_0) keep each role's scale.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::model {

// Values of the tensors the fit sets, by GGUF name, row-major [rows][cols] as the tensor table
// gives them (every layer's attention and FFN matrices, norms, the embedding and the output head).
// The tensors not listed keep their random values; they do not reach the output. Throws Error
// naming what the config lacks (a llama-style dense model, RoPE over whole 64-wide heads, an
// embedding wide enough for the codes).
std::map<std::string, std::vector<float>> fit_corpus_weights(const ModelConfig& config, const Tokenizer& tokenizer,
                                                              uint64_t seed);

// How strongly each RoPE pair of a head_dim-wide head should weigh the distance-1 peak: weights
// summing to 1 that maximize the smallest score margin between distance 1 and any other distance
// in [0, n_ctx). Returns the weights and that margin (per unit of score).
struct PreviousTokenPeak {
  std::vector<double> pair_weights;
  double margin = 0;
};
PreviousTokenPeak previous_token_peak(int32_t head_dim, float rope_theta, int32_t n_ctx);

}  // namespace orchard::model
