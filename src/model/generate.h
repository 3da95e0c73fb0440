#pragma once
// The generation loop: prompt processing in batches, then one token at a time, sampling and
// streaming each token's text. Written against TokenModel, so the same loop drives one rank or
// a whole parallel group.
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::model {

// Anything that turns tokens at positions into next-token logits.
class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Runs tokens at positions [pos, pos + tokens.size()); tokens.size() <= max_batch().
  virtual void eval(std::span<const TokenId> tokens, int32_t pos) = 0;
  // F32 [vocab] of the last position evaluated.
  virtual const float* last_logits() const = 0;
  virtual int32_t max_batch() const = 0;
  virtual int32_t n_ctx() const = 0;
  virtual int32_t vocab_size() const = 0;
  // Where eval can go on from when asked for pos: pos, or 0 when the model's sliding-window
  // layers no longer hold the window before pos (Forward::resumable), and every position from
  // 0 must be evaluated again. A rewind (a prompt cache's reuse, a benchmark's repetitions)
  // asks first; eval refuses what it cannot serve.
  virtual int32_t resumable(int32_t pos) const { return pos; }
};

// The model on this rank alone.
class LocalModel : public TokenModel {
 public:
  explicit LocalModel(Forward& forward) : forward_(forward) {}
  void eval(std::span<const TokenId> tokens, int32_t pos) override {
    forward_.run(tokens, nullptr, static_cast<int32_t>(tokens.size()), pos);
  }
  const float* last_logits() const override { return forward_.logits(); }
  int32_t max_batch() const override { return forward_.max_batch(); }
  int32_t n_ctx() const override { return forward_.n_ctx(); }
  int32_t vocab_size() const override { return forward_.config().vocab_size; }
  int32_t resumable(int32_t pos) const override { return forward_.resumable(0, pos); }

 private:
  Forward& forward_;
};

struct GenerationOptions {
  int32_t max_tokens = 128;
  SamplerOptions sampling;
  bool stop_at_end_of_generation = true;
};

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated, not the prompt
  std::string text;
  int32_t prompt_tokens = 0;
  double prompt_seconds = 0;    // prompt processing, up to the first logits
  int32_t decode_steps = 0;     // forward passes of one token
  double decode_seconds = 0;
  bool stopped_at_end = false;  // an end-of-generation token was produced

  double prompt_tok_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double gen_tok_s() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

// Called with each new token and the text it completes (possibly empty while a UTF-8
// character is still incomplete). Returning false stops generation.
using TokenCallback = std::function<bool(TokenId token, const std::string& text)>;

// Generates after `prompt` (token ids, BOS included when wanted), starting at position 0.
// Throws Error when the prompt does not fit the context.
GenerationResult generate(TokenModel& model, const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                          const GenerationOptions& options, const TokenCallback& on_token = {});

}  // namespace orchard::model
