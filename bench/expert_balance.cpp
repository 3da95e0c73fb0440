// How evenly an expert split of 2 ranks shares each decode step's expert choices, from the
// routing one rank makes while generating TEXT: for each placement (even runs or runs by the
// counts of an --expert-stats FILE, with 0-16 replicated experts) the busier rank's choices per
// MoE layer and step, over the mean (used / 2). Counts, not times: a loaded host cannot spoil
// them, and a decode step waits for the busier rank at every MoE layer.
//
//   bench_expert_balance MODEL.gguf STATS.json "TEXT" [TOKENS=96]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/generate.h"
#include "parallel/engine.h"
#include "parallel/expert_stats.h"

namespace orchard {
namespace {

void run(const std::string& model_path, const std::string& stats, const std::string& text, int32_t tokens) {
  parallel::EngineOptions options;
  options.model_path = model_path;
  options.context = 1024;
  options.batch = 64;
  parallel::Engine engine(options, nullptr);
  const model::ModelConfig& config = engine.config();
  if (config.n_expert == 0) throw Error(error_message("bench", "{} has no experts", model_path));
  const auto counts = parallel::read_expert_counts(stats);
  if (counts.empty()) throw Error(error_message("bench", "no expert statistics in {}", stats));
  const auto& tok = engine.tokenizer();
  const auto prompt = tok.encode(text, tok.adds_bos());
  // Each decode step's choices per MoE layer, and the prompt's choices per layer (one chunk
  // when the prompt fits a batch: its rows meet at every layer's combine).
  std::vector<std::pair<int32_t, std::vector<int32_t>>> steps;
  std::vector<std::vector<int32_t>> prompt_choices(static_cast<size_t>(config.n_layers));
  engine.forward().observe_routing([&](int32_t layer, int32_t, int32_t pos, std::span<const int32_t> experts) {
    if (pos >= static_cast<int32_t>(prompt.size())) steps.emplace_back(layer, std::vector<int32_t>(experts.begin(), experts.end()));
    else prompt_choices[static_cast<size_t>(layer)].insert(prompt_choices[static_cast<size_t>(layer)].end(), experts.begin(), experts.end());
  });
  model::GenerationOptions generation;
  generation.max_tokens = tokens;
  generation.stop_at_end_of_generation = false;
  model::generate(engine.model(), tok, prompt, generation, [](model::TokenId, const std::string&) { return true; });
  const int32_t used = config.n_expert_used;
  std::printf("%zu decode steps of a MoE layer (%d tokens), %d of %d experts each\n", steps.size(), tokens, used,
              config.n_expert);
  for (const bool by_stats : {false, true})
    for (const int replicas : {0, 2, 4, 8, 16}) {
      auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
      layout.expert_replicas = std::min(replicas, config.n_expert);
      if (by_stats) layout.expert_loads = counts;
      layout.validate(config, 2);
      const model::Shard shard = parallel::shard_for_rank(config, layout, 0);
      std::vector<int32_t> members(static_cast<size_t>(used));
      double busier = 0, held = 0;
      for (const auto& [layer, chosen] : steps) {
        model::assign_experts(shard, layer, chosen, used, members);
        int32_t first = 0;
        for (int32_t m : members) first += m == 0;
        busier += std::max(first, used - first);
      }
      for (int32_t l = 0; l < config.n_layers; ++l) held += shard.n_experts_held(l, config.n_expert);
      // The prompt: each layer waits for the member with more of its rows' choices.
      double prompt_busier = 0;
      int32_t prompt_layers = 0;
      for (int32_t l = 0; l < config.n_layers; ++l) {
        const auto& chosen = prompt_choices[static_cast<size_t>(l)];
        if (chosen.empty()) continue;
        std::vector<int32_t> members(chosen.size());
        model::assign_experts(shard, l, chosen, used, members);
        double first = 0;
        for (int32_t m : members) first += m == 0;
        prompt_busier += std::max(first, static_cast<double>(chosen.size()) - first) / (chosen.size() / 2.0);
        ++prompt_layers;
      }
      std::printf("placement %-5s replicas %2d: busier rank %.3f choices, %.3f x the mean; prompt (%zu rows) %.3f x; rank 0 "
                  "holds %.1f experts a layer\n",
                  by_stats ? "stats" : "even", replicas, busier / static_cast<double>(steps.size()),
                  busier / static_cast<double>(steps.size()) / (used / 2.0), prompt.size(),
                  prompt_layers > 0 ? prompt_busier / prompt_layers : 1.0, held / config.n_layers);
    }
}

}  // namespace
}  // namespace orchard

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_expert_balance MODEL.gguf STATS.json \"TEXT\" [TOKENS=96]\n");
    return 2;
  }
  try {
    orchard::run(argv[1], argv[2], argv[3], argc > 4 ? std::max(1, std::atoi(argv[4])) : 96);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
