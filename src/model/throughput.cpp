#include "model/throughput.h"

#include <chrono>
#include <vector>

#include "core/error.h"

namespace orchard::model {

Throughput measure_throughput(TokenModel& model, int32_t n_prompt, int32_t n_gen, int repetitions, int32_t n_depth, bool warm_up) {
  if (n_prompt < 0 || n_gen < 0 || n_prompt + n_gen == 0 || repetitions < 1 || n_depth < 0)
    throw Error(error_message("bench",
                              "needs prompt and generated tokens >= 0, not both 0, >= 1 repetition and a depth >= 0; "
                              "got {}, {}, {}, {}",
                              n_prompt, n_gen, repetitions, n_depth));
  if (int64_t{n_depth} + std::max(n_prompt, n_gen) > model.n_ctx())
    throw Error(error_message("bench", "{} prompt or {} generated tokens after a depth of {} do not fit the context of {}",
                              n_prompt, n_gen, n_depth, model.n_ctx()));
  // One token more than the prompt: generation starts from the first, also when there is no
  // prompt. The depth's tokens come first, from the same stream.
  std::vector<TokenId> tokens(static_cast<size_t>(n_depth) + static_cast<size_t>(n_prompt) + 1);
  uint64_t state = 12345;
  for (auto& t : tokens) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<TokenId>((state >> 33) % static_cast<uint64_t>(model.vocab_size()));
  }
  // Positions [begin, end) of the stream in batches; evals rewrite from their position on, so
  // the depth's positions stay as filled while the tests run over what follows them.
  auto evaluate = [&](int32_t begin, int32_t end) {
    for (int32_t done = begin; done < end;) {
      const int32_t n = std::min(end - done, model.max_batch());
      model.eval(std::span<const TokenId>(tokens).subspan(static_cast<size_t>(done), static_cast<size_t>(n)), done);
      done += n;
    }
  };
  evaluate(0, n_depth);
  using clock = std::chrono::steady_clock;
  double prompt_seconds = 0, gen_seconds = 0;
  // A model whose sliding layers keep only their window (Forward::resumable) cannot go back to
  // the depth once a test went further than that past it: the depth is filled again, untimed.
  auto refill = [&] {
    if (model.resumable(n_depth) < n_depth) evaluate(0, n_depth);
  };
  for (int rep = warm_up ? -1 : 0; rep < repetitions; ++rep) {  // rep -1 warms caches and buffers
    refill();
    const auto prompt_start = clock::now();
    evaluate(n_depth, n_depth + n_prompt);
    const auto prompt_end = clock::now();
    refill();
    const auto gen_start = clock::now();
    TokenId token = tokens[static_cast<size_t>(n_depth)];
    for (int32_t i = 0; i < n_gen; ++i) model.eval(std::span<const TokenId>(&token, 1), n_depth + i);
    const auto gen_end = clock::now();
    if (rep < 0) continue;
    prompt_seconds += std::chrono::duration<double>(prompt_end - prompt_start).count();
    gen_seconds += std::chrono::duration<double>(gen_end - gen_start).count();
  }
  Throughput t;
  if (prompt_seconds > 0) t.prompt_tok_s = n_prompt * repetitions / prompt_seconds;
  if (gen_seconds > 0) t.gen_tok_s = n_gen * repetitions / gen_seconds;
  return t;
}

}  // namespace orchard::model
