#pragma once
// llama-bench-style throughput of a TokenModel: prompt processing of n_prompt tokens in
// batches, and, as a separate test from the same starting point (as llama-bench's tg does),
// generation of n_gen tokens one at a time; both after n_depth tokens already in the cache
// (llama-bench's --n-depth; 0: from an empty context); fixed pseudo-random token ids.
#include <cstdint>

#include "model/generate.h"

namespace orchard::model {

struct Throughput {
  double prompt_tok_s = 0;  // n_prompt / seconds, mean over repetitions
  double gen_tok_s = 0;     // n_gen / seconds, mean over repetitions
};

// Fills the first n_depth positions once (not timed), then runs `repetitions` times after one
// warm-up pass (none when !warm_up: a 16k-token prompt's warm-up would double a run of
// minutes, and its caches are cold either way); every rank of a parallel model must call it with the same arguments. n_depth +
// n_prompt and n_depth + n_gen must each fit the context; either test may be 0 tokens (it is
// skipped and its rate stays 0), not both; repetitions >= 1; n_depth >= 0. Throws Error otherwise.
Throughput measure_throughput(TokenModel& model, int32_t n_prompt, int32_t n_gen, int repetitions, int32_t n_depth = 0,
                              bool warm_up = true);

}  // namespace orchard::model
