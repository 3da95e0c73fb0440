// Aggregate decode rate of 1, 2, 4 (up to SEQUENCES) concurrent sequences on `orchard serve`'s engine: one
// batched pass per round (LocalEngine::eval_batch, what the scheduler does) against one pass
// per sequence (each slot's own eval, as before batching), measured alternately in one run so
// that the machine's drift hits both alike. Prints ratios against the one-at-a-time rate of a
// single sequence.
//
// With PROMPT, it measures what `orchard serve` does for SEQUENCES requests that arrive together
// (bench/serve_batch.sh's engine column): each sequence's prompt of PROMPT positions, all in
// batched passes of at most the engine's batch, then TOKENS tokens each (the first from the
// prompt's logits), every round one batched pass; it prints the aggregate tok/s, best of
// REPETITIONS, and nothing else.
//
//   bench_batch_decode MODEL.gguf [THREADS=all] [TOKENS=32] [REPETITIONS=3] [SEQUENCES=4] [PROMPT]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/local_engine.h"

namespace {

using orchard::model::SequenceStep;
using orchard::model::TokenId;
using orchard::serve::LocalEngine;

constexpr int32_t kPrompt = 64;  // each sequence decodes after a prompt of this many positions

int int_argument(char** argv, int argc, int i, int fallback) {
  if (i >= argc) return fallback;
  char* end = nullptr;
  const long value = std::strtol(argv[i], &end, 10);
  if (*end != '\0' || value < 1 || value > 1 << 20)
    throw orchard::Error(orchard::error_message("bench", "argument {} must be a positive integer, not '{}'", i, argv[i]));
  return static_cast<int>(value);
}

TokenId greedy(LocalEngine& engine, int32_t sequence) {
  const float* logits = engine.slot(sequence).last_logits();
  return static_cast<TokenId>(std::max_element(logits, logits + engine.slot(sequence).vocab_size()) - logits);
}

// Seconds to decode `tokens` positions after the prompt in each of k sequences.
double decode_seconds(LocalEngine& engine, int32_t k, int32_t tokens, bool batched) {
  std::vector<TokenId> last(static_cast<size_t>(k), 1);
  std::vector<SequenceStep> steps(static_cast<size_t>(k));
  const auto start = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < tokens; ++i) {
    for (int32_t s = 0; s < k; ++s) steps[static_cast<size_t>(s)] = {s, std::span(&last[static_cast<size_t>(s)], 1), kPrompt + i};
    if (batched) {
      engine.eval_batch(steps);
    } else {
      for (const SequenceStep& step : steps) engine.slot(step.sequence).eval(step.tokens, step.pos);
    }
    for (int32_t s = 0; s < k; ++s) last[static_cast<size_t>(s)] = greedy(engine, s);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds for k sequences to evaluate their prompts and generate `tokens` tokens each, as the
// server's scheduler runs requests that arrive together.
double serving_seconds(LocalEngine& engine, const std::vector<std::vector<TokenId>>& prompts, int32_t tokens) {
  const auto k = static_cast<int32_t>(prompts.size());
  std::vector<SequenceStep> steps;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t s = 0; s < k;) {
    steps.clear();
    int32_t positions = 0;
    for (; s < k && positions + static_cast<int32_t>(prompts[static_cast<size_t>(s)].size()) <= engine.max_batch(); ++s) {
      steps.push_back({s, prompts[static_cast<size_t>(s)], 0});
      positions += static_cast<int32_t>(prompts[static_cast<size_t>(s)].size());
    }
    if (steps.empty()) throw orchard::Error(orchard::error_message("bench", "a prompt does not fit the engine's batch of {}", engine.max_batch()));
    engine.eval_batch(steps);
  }
  std::vector<TokenId> last(static_cast<size_t>(k));
  for (int32_t s = 0; s < k; ++s) last[static_cast<size_t>(s)] = greedy(engine, s);
  steps.resize(static_cast<size_t>(k));
  const auto prompt = static_cast<int32_t>(prompts[0].size());
  for (int32_t i = 1; i < tokens; ++i) {
    for (int32_t s = 0; s < k; ++s) steps[static_cast<size_t>(s)] = {s, std::span(&last[static_cast<size_t>(s)], 1), prompt + i - 1};
    engine.eval_batch(steps);
    for (int32_t s = 0; s < k; ++s) last[static_cast<size_t>(s)] = greedy(engine, s);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [THREADS=all] [TOKENS=32] [REPETITIONS=3] [SEQUENCES=4] [PROMPT]\n", argv[0]);
    return 2;
  }
  orchard::serve::LocalEngineOptions options;
  options.model_path = argv[1];
  options.threads = argc > 2 ? int_argument(argv, argc, 2, 0) : 0;
  const int32_t tokens = int_argument(argv, argc, 3, 32);
  const int repetitions = int_argument(argv, argc, 4, 3);
  const int32_t max_sequences = int_argument(argv, argc, 5, 4);
  const int32_t serving_prompt = int_argument(argv, argc, 6, 0);
  options.n_slots = max_sequences;
  options.n_ctx = std::max(kPrompt, serving_prompt) + tokens;
  LocalEngine engine(options);

  if (serving_prompt > 0) {
    // Each sequence its own prompt, as the server's requests have.
    std::vector<std::vector<TokenId>> prompts(static_cast<size_t>(max_sequences), std::vector<TokenId>(static_cast<size_t>(serving_prompt)));
    for (int32_t s = 0; s < max_sequences; ++s)
      for (int32_t i = 0; i < serving_prompt; ++i)
        prompts[static_cast<size_t>(s)][static_cast<size_t>(i)] = 1 + (i * 37 + s * 101 + 11) % (engine.tokenizer().vocab_size() - 1);
    serving_seconds(engine, prompts, std::min(tokens, 4));  // warm-up
    double best = 1e30;
    for (int r = 0; r < repetitions; ++r) best = std::min(best, serving_seconds(engine, prompts, tokens));
    std::printf("%.2f\n", max_sequences * tokens / best);
    return 0;
  }

  std::vector<TokenId> prompt(kPrompt);
  for (int32_t i = 0; i < kPrompt; ++i) prompt[static_cast<size_t>(i)] = 1 + (i * 37 + 11) % (engine.tokenizer().vocab_size() - 1);
  for (int32_t s = 0; s < max_sequences; ++s) engine.slot(s).eval(prompt, 0);

  std::printf("%s, %d threads, %d tokens per sequence after a %d-position prompt, best of %d\n", argv[1],
              engine.threads(), tokens, kPrompt, repetitions);
  std::printf("%-10s %22s %16s %22s %24s\n", "sequences", "one-at-a-time (tok/s)", "batched (tok/s)",
              "batched / one-at-a-time", "batched / 1 seq. alone");
  double baseline = 0;
  for (int32_t k = 1; k <= max_sequences; k *= 2) {
    decode_seconds(engine, k, std::min(tokens, 4), true);  // warm-up
    double alone = 1e30, batched = 1e30;
    for (int r = 0; r < repetitions; ++r) {
      // Alternating which goes first evens out a machine that speeds up or slows down.
      const bool batched_first = r % 2 == 0;
      const double first = decode_seconds(engine, k, tokens, batched_first);
      const double second = decode_seconds(engine, k, tokens, !batched_first);
      batched = std::min(batched, batched_first ? first : second);
      alone = std::min(alone, batched_first ? second : first);
    }
    const double alone_rate = k * tokens / alone, batched_rate = k * tokens / batched;
    if (k == 1) baseline = alone_rate;
    std::printf("%-10d %22.2f %16.2f %22.2fx %23.2fx\n", k, alone_rate, batched_rate, batched_rate / alone_rate,
                batched_rate / baseline);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
