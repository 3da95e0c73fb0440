#pragma once
// The trust check: one prompt-processing pass over prompt + output (logits for every position)
// confirms each output token at a fraction of generating it again. Greedy jobs: the token must
// be the argmax (within a tolerance, since another machine's kernels round differently).
// Sampled jobs: the token must lie within the sampler's support (top-k/top-p/min-p survivors).
#include <cstdint>
#include <span>

#include "model/forward.h"
#include "model/sampler.h"

namespace orchard::network {

struct CheckResult {
  bool ok = true;
  int64_t checked = 0;       // output tokens confirmed
  int64_t mismatch_at = -1;  // index into the output of the first token that could not be produced
};

// Logit gap under which a different argmax still counts as the same greedy choice.
inline constexpr float kGreedyTolerance = 1e-2f;

// prompt + output must fit forward's context. Uses positions from 0 (overwrites its KV cache).
CheckResult check_output(model::Forward& forward, std::span<const model::TokenId> prompt,
                         std::span<const model::TokenId> output, const model::SamplerOptions& sampling);

}  // namespace orchard::network
