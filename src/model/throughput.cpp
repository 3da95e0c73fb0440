#include "model/throughput.h"

#include <chrono>
#include <vector>

#include "core/error.h"

namespace orchard::model {

Throughput measure_throughput(TokenModel& model, int32_t n_prompt, int32_t n_gen, int repetitions) {
  if (n_prompt < 0 || n_gen < 0 || n_prompt + n_gen == 0 || repetitions < 1)
    throw Error(error_message("bench", "needs prompt and generated tokens >= 0, not both 0, and >= 1 repetition; got {}, {}, {}",
                              n_prompt, n_gen, repetitions));
  if (std::max(n_prompt, n_gen) > model.n_ctx())
    throw Error(error_message("bench", "{} prompt or {} generated tokens do not fit the context of {}", n_prompt, n_gen,
                              model.n_ctx()));
  // One token more than the prompt: generation starts from the first, also when there is no prompt.
  std::vector<TokenId> tokens(static_cast<size_t>(n_prompt) + 1);
  uint64_t state = 12345;
  for (auto& t : tokens) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<TokenId>((state >> 33) % static_cast<uint64_t>(model.vocab_size()));
  }
  using clock = std::chrono::steady_clock;
  double prompt_seconds = 0, gen_seconds = 0;
  for (int rep = -1; rep < repetitions; ++rep) {  // rep -1 warms caches and buffers
    auto start = clock::now();
    for (int32_t done = 0; done < n_prompt;) {
      const int32_t n = std::min(n_prompt - done, model.max_batch());
      model.eval(std::span<const TokenId>(tokens).subspan(static_cast<size_t>(done), static_cast<size_t>(n)), done);
      done += n;
    }
    auto middle = clock::now();
    TokenId token = tokens.front();
    for (int32_t i = 0; i < n_gen; ++i) model.eval(std::span<const TokenId>(&token, 1), i);
    auto end = clock::now();
    if (rep < 0) continue;
    prompt_seconds += std::chrono::duration<double>(middle - start).count();
    gen_seconds += std::chrono::duration<double>(end - middle).count();
  }
  Throughput t;
  if (prompt_seconds > 0) t.prompt_tok_s = n_prompt * repetitions / prompt_seconds;
  if (gen_seconds > 0) t.gen_tok_s = n_gen * repetitions / gen_seconds;
  return t;
}

}  // namespace orchard::model
