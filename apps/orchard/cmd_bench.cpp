#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/orchard/commands.h"
#include "apps/orchard/split_flags.h"
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
    int repetitions = 3;
    bool json = false;
    bool no_repack = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt and generation tok/s, like llama-bench");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file (ranks of a split need it on rank 0 only)")->required();
  cmd->add_option("-p,--prompt-tokens", o->prompt, "Prompt tokens (pp)")->capture_default_str();
  cmd->add_option("-n,--gen-tokens", o->generate, "Generated tokens (tg)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Measured repetitions after a warm-up")->capture_default_str();
  cmd->add_option("-t,--threads", o->engine.threads, "Threads per rank (default: all cores, shared among local ranks)");
  cmd->add_option("-b,--batch", o->engine.batch, "Prompt positions per forward pass")->capture_default_str();
  cmd->add_flag("--no-repack", o->no_repack, "Use the file's weight layout as is");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  add_split_flags(cmd, o->split);
  cmd->callback([o] {
    Options run = *o;
    run.engine.allow_repack = !o->no_repack;
    run.engine.context = std::max(o->prompt, o->generate);
    if (run.engine.threads == 0) run.engine.threads = parallel::threads_per_local_rank(o->split);
    parallel::run_split(o->split, [&](comm::Group* group, const parallel::Layout& layout) {
      parallel::EngineOptions options = run.engine;
      options.layout = layout;
      parallel::Engine engine(options, group);
      auto t = model::measure_throughput(engine.model(), run.prompt, run.generate, run.repetitions);
      if (group && group->rank() != 0) return;
      const double gb_per_token = static_cast<double>(engine.weights().bytes_per_token()) / 1e9;
      nlohmann::json j = {{"model", options.model_path},
                          {"strategy", parallel::strategy_name(layout.strategy)},
                          {"ranks", group ? group->size() : 1},
                          {"threads", engine.pool().size()},
                          {"kernels", core::kernel_isa_name()},
                          {"prompt_tokens", run.prompt},
                          {"gen_tokens", run.generate},
                          {"prompt_tok_s", t.prompt_tok_s},
                          {"gen_tok_s", t.gen_tok_s},
                          {"rank0_weight_gb_per_token", gb_per_token},
                          {"rank0_gen_gb_s", gb_per_token * t.gen_tok_s}};
      if (run.json) {
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%s | %s, %d rank(s) × %d threads, %s | pp%d %.2f tok/s | tg%d %.2f tok/s | %.2f GB/s of weights\n",
                    options.model_path.c_str(), parallel::strategy_name(layout.strategy).c_str(),
                    group ? group->size() : 1, engine.pool().size(), core::kernel_isa_name().c_str(), run.prompt,
                    t.prompt_tok_s, run.generate, t.gen_tok_s, gb_per_token * t.gen_tok_s);
      }
      std::fflush(stdout);
    });
  });
}

}  // namespace orchard::app
