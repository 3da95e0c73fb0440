#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "apps/orchard/cache_type_flag.h"
#include "apps/orchard/cluster_launch.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/expert_stats_flag.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/progress.h"
#include "apps/orchard/sampling_flags.h"
#include "apps/orchard/split_flags.h"
#include "core/error.h"
#include "core/kernels.h"
#include "parallel/engine.h"

namespace orchard::app {
namespace {

struct RunOptions {
  parallel::EngineOptions engine;
  std::string prompt;
  int32_t max_tokens = 128;
  model::SamplerOptions sampling;
  bool seed_given = false;  // --seed: else a sampled run draws one
  bool json = false;
  bool no_repack = false;
  std::string logits_path;
  std::string expert_stats_path;
  parallel::SplitOptions split;
  ClusterLaunchFlags cluster;
};

void write_logits(const std::string& path, const float* logits, int32_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(sizeof(float) * n));
  if (!out) throw Error(error_message("run", "cannot write logits to {}", path));
}

// One rank's part of the run (the only rank when group is null). Rank 0 speaks for the job.
void run_rank(const RunOptions& o, comm::Group* group) {
  const bool speaker = !group || group->rank() == 0;
  parallel::EngineOptions options = o.engine;
  options.allow_repack = !o.no_repack;
  ProgressBar bar("loading " + options.model_path);
  ProgressBar receiving("receiving this rank's shard from rank 0");
  if (speaker) options.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  options.on_receive_progress = [&](size_t done, size_t total) { receiving.update(done, total); };
  if (speaker) place_by_expert_stats(o.expert_stats_path, options.layout);
  parallel::Engine engine(options, group);
  receiving.finish();
  bar.finish();
  if (speaker) std::fprintf(stderr, "%s\n", describe_kv_cache(engine.forward(), 1).c_str());
  // Each stage's first tensor rank sees its layers' routing (every rank of a group routes alike).
  const bool records = !group || options.layout.tensor_rank_of(group->rank()) == 0;
  ExpertStatsRecorder expert_stats(o.expert_stats_path, {&engine.forward()}, records, speaker);

  if (speaker && !engine.config().synthetic_note.empty() && !o.json)
    std::fprintf(stderr, "note: %s is %s\n", options.model_path.c_str(), engine.config().synthetic_note.c_str());
  const auto& tokenizer = engine.tokenizer();
  std::vector<model::TokenId> prompt = tokenizer.encode(o.prompt, tokenizer.adds_bos());
  model::GenerationOptions gen;
  gen.max_tokens = o.max_tokens;
  gen.sampling = o.sampling;
  if (gen.sampling.temperature > 0 && !o.seed_given) {
    // A sampled run differs each time, as serve's requests do; the seed is said so that this one
    // can be repeated. Every rank samples the token itself: rank 0's seed is everyone's.
    std::random_device entropy;
    uint64_t seed = (static_cast<uint64_t>(entropy()) << 32) | entropy();
    if (group) group->broadcast(&seed, sizeof seed, 0);
    gen.sampling.seed = seed;
    if (speaker) std::fprintf(stderr, "seed %llu (repeat with --seed %llu)\n", static_cast<unsigned long long>(seed),
                              static_cast<unsigned long long>(seed));
  }
  auto result = model::generate(engine.model(), tokenizer, prompt, gen, [&](model::TokenId, const std::string& text) {
    if (speaker && !o.json) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  expert_stats.finish(group);
  if (!speaker) return;
  if (!o.logits_path.empty()) write_logits(o.logits_path, engine.model().last_logits(), engine.config().vocab_size);
  if (o.json) {
    nlohmann::json j = {{"tokens", result.tokens},
                        {"text", result.text},
                        {"prompt_tokens", result.prompt_tokens},
                        {"prompt_tok_s", result.prompt_tok_s()},
                        {"gen_tokens", static_cast<int>(result.tokens.size())},
                        {"gen_tok_s", result.gen_tok_s()}};
    if (gen.sampling.temperature > 0) j["seed"] = gen.sampling.seed;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "prompt: %d tokens, %.2f tok/s | generation: %zu tokens, %.2f tok/s | %s, %d rank(s) × %d threads, %s kernels\n",
                 result.prompt_tokens, result.prompt_tok_s(), result.tokens.size(), result.gen_tok_s(),
                 parallel::strategy_name(o.engine.layout.strategy).c_str(), group ? group->size() : 1,
                 engine.pool().size(), core::kernel_isa_name().c_str());
  }
  std::fflush(stdout);
}

void run(RunOptions o) {
  check_split_flags(o.split);
  if (auto code = place_split(o.cluster, o.split, {o.engine.model_path, o.engine.context, o.engine.batch, o.engine.cache_type})) {
    if (*code != 0) std::exit(*code);
    return;
  }
  if (o.engine.threads == 0) o.engine.threads = parallel::threads_per_local_rank(o.split);
  o.engine.layout.strategy = parallel::parse_strategy(o.split.strategy);
  parallel::run_split(o.split, [&](comm::Group* group, const parallel::Layout& layout) {
    RunOptions mine = o;
    mine.engine.layout = layout;
    run_rank(mine, group);
  });
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, on one process or split over several ranks");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file (ranks of a split need it on rank 0 only)")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate at most")->capture_default_str()->check(at_least(1));
  CLI::Option* seed = add_sampling_flags(cmd, o->sampling, "Sampling seed (default: a random one, printed)");
  cmd->add_option("-t,--threads", o->engine.threads, "Threads per rank (default: all cores, shared among local ranks)")
      ->check(at_least(0));
  cmd->add_option("-c,--ctx", o->engine.context, "Context length (default: the model's)")->check(at_least(0));
  cmd->add_option("-b,--batch", o->engine.batch, "Prompt positions per forward pass (pipeline chunk)")
      ->capture_default_str()
      ->check(at_least(1));
  add_cache_type_flag(cmd, o->engine.cache_type);
  cmd->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  cmd->add_flag("--no-repack", o->no_repack, "Use the file's weight layout as is (no interleaved copy)");
  cmd->add_option("--logits", o->logits_path, "Write the final position's logits (raw float32) here");
  add_expert_stats_flag(cmd, o->expert_stats_path);
  add_split_flags(cmd, o->split);
  add_cluster_launch_flags(cmd, o->cluster);
  cmd->callback([o, seed] {
    RunOptions options = *o;
    options.seed_given = seed->count() > 0;
    run(std::move(options));
  });
}

}  // namespace orchard::app
