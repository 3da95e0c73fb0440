#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "apps/orchard/commands.h"
#include "apps/orchard/progress.h"
#include "comm/bootstrap.h"
#include "comm/launcher.h"
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
  bool json = false;
  bool no_repack = false;
  std::string logits_path;
  // Splitting over several ranks.
  int world = 1;
  std::string strategy = "single";
  int tp = 0;
  int pp = 0;
  std::string backend = "shm";
  double link_latency_us = 0;
  double link_gbps = 0;
  double comm_timeout_s = 10;
  bool pin_cpus = false;
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
  if (speaker) options.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  parallel::Engine engine(options, group);
  bar.finish();

  const auto& tokenizer = engine.tokenizer();
  std::vector<model::TokenId> prompt = tokenizer.encode(o.prompt, tokenizer.adds_bos());
  model::GenerationOptions gen;
  gen.max_tokens = o.max_tokens;
  gen.sampling = o.sampling;
  auto result = model::generate(engine.model(), tokenizer, prompt, gen, [&](model::TokenId, const std::string& text) {
    if (speaker && !o.json) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!speaker) return;
  if (!o.logits_path.empty()) write_logits(o.logits_path, engine.model().last_logits(), engine.config().vocab_size);
  if (o.json) {
    nlohmann::json j = {{"tokens", result.tokens},
                        {"text", result.text},
                        {"prompt_tokens", result.prompt_tokens},
                        {"prompt_tok_s", result.prompt_tok_s()},
                        {"gen_tokens", static_cast<int>(result.tokens.size())},
                        {"gen_tok_s", result.gen_tok_s()}};
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

// Hybrid takes --tp, --pp or both; the others are implied by the world size.
int tensor_group_size(const RunOptions& o, int world) {
  if (o.pp > 0 && o.tp > 0 && o.pp * o.tp != world)
    throw Error(error_message("run", "--tp {} × --pp {} is not the world of {} ranks", o.tp, o.pp, world));
  if (o.tp > 0) return o.tp;
  if (o.pp > 0 && world % o.pp == 0) return world / o.pp;
  if (o.pp > 0) throw Error(error_message("run", "--pp {} does not divide the world of {} ranks", o.pp, world));
  return 0;
}

void run(RunOptions o) {
  // Started by `orchard launch` or mpirun: this process is one rank of a job.
  if (std::getenv("ORCHARD_WORLD") || std::getenv("OMPI_COMM_WORLD_SIZE")) {
    comm::Config config = comm::config_from_env();
    comm::Group group = comm::init(config);
    o.engine.layout = parallel::Layout::make(parallel::parse_strategy(o.strategy), group.size(),
                                             tensor_group_size(o, group.size()));
    run_rank(o, group.size() > 1 ? &group : nullptr);
    return;
  }
  const auto strategy = parallel::parse_strategy(o.strategy);
  if (o.world == 1 && strategy == parallel::Strategy::Single) {
    run_rank(o, nullptr);
    return;
  }
  o.engine.layout = parallel::Layout::make(strategy, o.world, tensor_group_size(o, o.world));
  if (o.engine.threads == 0)
    o.engine.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / o.world);
  comm::Config base;
  base.backend = comm::parse_backend(o.backend);
  base.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.comm_timeout_s * 1000));
  base.link.latency_us = o.link_latency_us;
  base.link.gbps = o.link_gbps;
  comm::LocalLaunchOptions launch;
  launch.pin_cpus = o.pin_cpus;
  std::fflush(stdout);
  auto exits = comm::spawn_local_ranks(o.world, base, [&](comm::Group& group) { run_rank(o, &group); }, launch);
  for (const auto& e : exits)
    if (!e.ok()) throw Error(error_message("run", "rank {} failed: {}", e.rank, e.describe()));
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt, on one process or split over several ranks");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->engine.threads, "Threads per rank (default: all cores, shared among local ranks)");
  cmd->add_option("-c,--ctx", o->engine.context, "Context length (default: the model's)");
  cmd->add_option("-b,--batch", o->engine.batch, "Prompt positions per forward pass (pipeline chunk)")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  cmd->add_flag("--no-repack", o->no_repack, "Use the file's weight layout as is (no interleaved copy)");
  cmd->add_option("--logits", o->logits_path, "Write the final position's logits (raw float32) here");
  cmd->add_option("--world", o->world, "Start this many local ranks and split the model over them")->capture_default_str();
  cmd->add_option("--strategy", o->strategy, "single | pipeline | tensor | hybrid")->capture_default_str();
  cmd->add_option("--tp", o->tp, "Hybrid: ranks per tensor-parallel group (pp = world / tp)");
  cmd->add_option("--pp", o->pp, "Hybrid: pipeline stages (tp = world / pp)");
  cmd->add_option("--backend", o->backend, "ring | shm | mpi (local ranks)")->capture_default_str();
  cmd->add_option("--link-latency-us", o->link_latency_us, "Emulated link latency per message");
  cmd->add_option("--link-gbps", o->link_gbps, "Emulated link bandwidth cap");
  cmd->add_option("--comm-timeout", o->comm_timeout_s, "Seconds without progress before a peer is declared dead")
      ->capture_default_str();
  cmd->add_flag("--pin-cpus", o->pin_cpus, "Pin local rank r to CPU r");
  cmd->callback([o] { run(*o); });
}

}  // namespace orchard::app
