#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>
#include <nlohmann/json.hpp>

#include "apps/orchard/cache_type_flag.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/split_flags.h"
#include "core/error.h"
#include "core/kernels.h"
#include "model/throughput.h"
#include "parallel/engine.h"

namespace orchard::app {

void add_bench_command(CLI::App& app) {
  struct Options {
    parallel::EngineOptions engine;
    parallel::SplitOptions split;
    int32_t prompt = 512;
    int32_t generate = 128;
    std::vector<int32_t> depths = {0};
    int repetitions = 3;
    bool json = false;
    bool no_repack = false;
    bool no_warmup = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt and generation tok/s, like llama-bench");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file (ranks of a split need it on rank 0 only)")->required();
  cmd->add_option("-p,--prompt-tokens", o->prompt, "Prompt tokens (pp; 0: measure generation only)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("-n,--gen-tokens", o->generate, "Generated tokens (tg; 0: measure the prompt only)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("-d,--depth", o->depths,
                  "Tokens already in the KV cache before each test (llama-bench's --n-depth); a comma list runs each")
      ->delimiter(',')
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("-r,--repetitions", o->repetitions, "Measured repetitions after a warm-up")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("-t,--threads", o->engine.threads, "Threads per rank (default: all cores, shared among local ranks)")
      ->check(at_least(0));
  cmd->add_option("-b,--batch", o->engine.batch, "Prompt positions per forward pass")->capture_default_str()->check(at_least(1));
  add_cache_type_flag(cmd, o->engine.cache_type);
  cmd->add_flag("--no-repack", o->no_repack, "Use the file's weight layout as is");
  cmd->add_flag("--no-warmup", o->no_warmup, "Skip the warm-up pass before the repetitions (llama-bench's --no-warmup)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  add_split_flags(cmd, o->split);
  cmd->callback([o] {
    if (o->prompt == 0 && o->generate == 0)
      throw Error(error_message("bench", "-p 0 and -n 0 leave nothing to measure: give -p (prompt tokens) or -n (generated tokens)"));
    check_split_flags(o->split);
    Options run = *o;
    run.engine.allow_repack = !o->no_repack;
    run.engine.context = *std::max_element(o->depths.begin(), o->depths.end()) + std::max(o->prompt, o->generate);
    if (run.engine.threads == 0) run.engine.threads = parallel::threads_per_local_rank(o->split);
    parallel::run_split(o->split, [&](comm::Group* group, const parallel::Layout& layout) {
      parallel::EngineOptions options = run.engine;
      options.layout = layout;
      parallel::Engine engine(options, group);
      if ((!group || group->rank() == 0) && !run.json) std::fprintf(stderr, "%s\n", describe_kv_cache(engine.forward(), 1).c_str());
      for (const int32_t depth : run.depths) {
        auto t = model::measure_throughput(engine.model(), run.prompt, run.generate, run.repetitions, depth, !run.no_warmup);
        if (group && group->rank() != 0) continue;
        const double gb_per_token = static_cast<double>(engine.weights().bytes_per_token()) / 1e9;
        // A test of 0 tokens was not run: its rate is null (JSON) or left out (text), never 0.
        auto rate = [](int32_t tokens, double tok_s) { return tokens > 0 ? nlohmann::json(tok_s) : nlohmann::json(nullptr); };
        nlohmann::json j = {{"model", options.model_path},
                            {"strategy", parallel::strategy_name(layout.strategy)},
                            {"ranks", group ? group->size() : 1},
                            {"threads", engine.pool().size()},
                            {"kernels", core::kernel_isa_name()},
                            {"cache_type", model::kv_type_name(run.engine.cache_type)},
                            {"depth", depth},
                            {"prompt_tokens", run.prompt},
                            {"gen_tokens", run.generate},
                            {"prompt_tok_s", rate(run.prompt, t.prompt_tok_s)},
                            {"gen_tok_s", rate(run.generate, t.gen_tok_s)},
                            {"rank0_weight_gb_per_token", gb_per_token},
                            {"rank0_gen_gb_s", rate(run.generate, gb_per_token * t.gen_tok_s)}};
        if (run.json) {
          std::printf("%s\n", j.dump().c_str());
        } else {
          std::string rates;
          const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
          if (run.prompt > 0) rates += fmt::format(" | pp{}{} {:.2f} tok/s", run.prompt, at, t.prompt_tok_s);
          if (run.generate > 0)
            rates += fmt::format(" | tg{}{} {:.2f} tok/s | {:.2f} GB/s of weights", run.generate, at, t.gen_tok_s,
                                 gb_per_token * t.gen_tok_s);
          std::printf("%s | %s, %d rank(s) × %d threads, %s, %s cache%s\n", options.model_path.c_str(),
                      parallel::strategy_name(layout.strategy).c_str(), group ? group->size() : 1, engine.pool().size(),
                      core::kernel_isa_name().c_str(), std::string(model::kv_type_name(run.engine.cache_type)).c_str(),
                      rates.c_str());
        }
        std::fflush(stdout);
      }
    });
  });
}

}  // namespace orchard::app
