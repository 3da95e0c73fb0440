#pragma once
// Picks the next token from logits: greedy, or temperature with top-k, top-p and min-p
// filtering and a repetition penalty, in llama.cpp's order (penalty, top-k, top-p, min-p,
// temperature). The random stream is our own (not <random>'s distributions, whose output
// differs between standard libraries), so a seed gives the same tokens on every platform.
#include <cstdint>
#include <deque>
#include <vector>

namespace orchard::model {

struct SamplerOptions {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 40;               // 0: off
  float top_p = 0.95f;              // 1: off
  float min_p = 0.05f;              // 0: off
  float repeat_penalty = 1.0f;      // 1: off
  int32_t repeat_last_n = 64;       // how many recent tokens the penalty looks at
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(const SamplerOptions& options, int32_t vocab_size);

  // Chooses a token from logits [vocab] (not modified). Remembers it for the penalty. A token
  // whose logit is -infinity is never chosen (a grammar's mask); all of them: Error.
  int32_t sample(const float* logits);
  // Tokens that count as already seen for the repetition penalty (the prompt).
  void remember(int32_t token);
  void reset();

  // The candidates that survive the filters for these logits, as (token, probability) sorted by
  // probability; greedy gives one. Used to verify that a sampled token was possible.
  std::vector<std::pair<int32_t, float>> support(const float* logits);

  const SamplerOptions& options() const { return options_; }

 private:
  // penalized_ = the logits after the repetition penalty.
  void penalize(const float* logits);
  // Temperature without top-k, top-p or min-p (the OpenAI API's default).
  bool unfiltered() const;
  int32_t sample_unfiltered();  // after penalize()
  void build_candidates(const float* logits);
  double next_uniform();  // [0, 1)

  SamplerOptions options_;
  int32_t vocab_size_;
  uint64_t rng_state_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<int32_t, float>> candidates_;  // reused: no allocation per token
  std::vector<float> penalized_;                       // [vocab], reused
};

}  // namespace orchard::model
