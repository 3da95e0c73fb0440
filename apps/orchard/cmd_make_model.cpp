#include <cstdio>

#include "apps/orchard/commands.h"
#include "apps/orchard/progress.h"
#include "model/synthetic.h"

namespace orchard::app {

void add_make_model_command(CLI::App& app) {
  auto spec = std::make_shared<model::SyntheticModelSpec>();
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a GGUF model with deterministic random weights and a real tokenizer (no download)");
  cmd->add_option("--arch", spec->arch, model::synthetic_architectures())->capture_default_str();
  cmd->add_option("--shape", spec->shape, model::synthetic_shapes())->capture_default_str();
  cmd->add_option("--type", spec->type, model::synthetic_types())->capture_default_str();
  cmd->add_option("--seed", spec->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("--rope-linear-factor", spec->rope_linear_factor, "Write linear RoPE scaling with this factor");
  cmd->add_flag("--rope-freq-factors", spec->rope_freq_factors, "Write Llama-3.1-style RoPE frequency factors");
  cmd->add_option("--threads", spec->threads, "Threads (default: all cores)");
  cmd->add_option("-o,--output", *output, "Where to write the .gguf file")->required();
  cmd->callback([spec, output] {
    ProgressBar bar("writing " + *output);
    model::write_synthetic_model(*spec, *output, [&](size_t done, size_t total) { bar.update(done, total); });
    bar.finish();
  });
}

}  // namespace orchard::app
