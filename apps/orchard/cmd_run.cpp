#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "apps/orchard/commands.h"
#include "apps/orchard/progress.h"
#include "core/error.h"
#include "core/kernels.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/gguf/reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace orchard::app {
namespace {

struct RunOptions {
  std::string model_path;
  std::string prompt;
  int32_t max_tokens = 128;
  model::SamplerOptions sampling;
  int threads = 0;
  int32_t context = 0;
  int32_t batch = 512;
  bool json = false;
  bool no_repack = false;
  std::string logits_path;
};

void write_logits(const std::string& path, const float* logits, int32_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(sizeof(float) * n));
  if (!out) throw Error(error_message("run", "cannot write logits to {}", path));
}

void run_single(const RunOptions& o) {
  auto file = model::gguf::Reader::open(o.model_path);
  auto config = model::ModelConfig::from_gguf(file);
  auto tokenizer = model::Tokenizer::from_gguf(file);
  core::ThreadPool pool(o.threads);

  ProgressBar bar("loading " + o.model_path);
  model::LoadOptions load;
  load.allow_repack = !o.no_repack;
  load.on_progress = [&](size_t done, size_t total) { bar.update(done, total); };
  model::ModelWeights weights(file, config, model::Shard::whole(config), load);
  bar.finish();

  const int32_t n_ctx = o.context > 0 ? o.context : config.context_length;
  model::Forward forward(weights, n_ctx, std::min(o.batch, n_ctx), pool);
  model::LocalModel local(forward);

  std::vector<model::TokenId> prompt = tokenizer.encode(o.prompt, tokenizer.adds_bos());
  model::GenerationOptions gen;
  gen.max_tokens = o.max_tokens;
  gen.sampling = o.sampling;
  auto result = model::generate(local, tokenizer, prompt, gen, [&](model::TokenId, const std::string& text) {
    if (!o.json) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!o.logits_path.empty()) write_logits(o.logits_path, local.last_logits(), config.vocab_size);

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
    std::fprintf(stderr, "prompt: %d tokens, %.2f tok/s | generation: %zu tokens, %.2f tok/s | %d threads, %s kernels\n",
                 result.prompt_tokens, result.prompt_tok_s(), result.tokens.size(), result.gen_tok_s(), pool.size(),
                 core::kernel_isa_name().c_str());
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  cmd->add_option("-m,--model", o->model_path, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-c,--ctx", o->context, "Context length (default: the model's)");
  cmd->add_option("-b,--batch", o->batch, "Prompt positions per forward pass")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  cmd->add_flag("--no-repack", o->no_repack, "Use the file's weight layout as is (no interleaved copy)");
  cmd->add_option("--logits", o->logits_path, "Write the final position's logits (raw float32) here");
  cmd->callback([o] { run_single(*o); });
}

}  // namespace orchard::app
