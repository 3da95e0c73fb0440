#include "model/generate.h"

#include "core/error.h"

namespace orchard::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GenerationResult generate(TokenModel& model, const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                          const GenerationOptions& options, const TokenCallback& on_token) {
  GenerationResult result;
  result.prompt_tokens = static_cast<int32_t>(prompt.size());
  if (prompt.empty()) throw Error(error_message("generate", "the prompt has no tokens"));
  if (result.prompt_tokens >= model.n_ctx())
    throw Error(error_message("generate", "the prompt has {} tokens; the context holds {}", prompt.size(), model.n_ctx()));

  Sampler sampler(options.sampling, model.vocab_size());
  for (TokenId t : prompt) sampler.remember(t);

  auto start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < prompt.size();) {
    size_t n = std::min(prompt.size() - done, static_cast<size_t>(model.max_batch()));
    model.eval(prompt.subspan(done, n), static_cast<int32_t>(done));
    done += n;
  }
  result.prompt_seconds = seconds_since(start);

  Tokenizer::StreamDecoder decoder(tokenizer);
  int32_t pos = result.prompt_tokens;
  start = std::chrono::steady_clock::now();
  while (static_cast<int32_t>(result.tokens.size()) < options.max_tokens) {
    TokenId token = sampler.sample(model.last_logits());
    result.tokens.push_back(token);
    bool end = tokenizer.is_end_of_generation(token);
    std::string text = end ? std::string() : decoder.push(token);
    result.text += text;
    if (on_token && !on_token(token, text)) break;
    if (end && options.stop_at_end_of_generation) {
      result.stopped_at_end = true;
      break;
    }
    if (static_cast<int32_t>(result.tokens.size()) == options.max_tokens) break;
    if (pos >= model.n_ctx()) break;  // the context is full
    model.eval(std::span<const TokenId>(&token, 1), pos++);
    ++result.decode_steps;
  }
  result.decode_seconds = seconds_since(start);
  std::string tail = decoder.finish();
  if (!tail.empty()) {
    result.text += tail;
    if (on_token) on_token(-1, tail);
  }
  return result;
}

}  // namespace orchard::model
