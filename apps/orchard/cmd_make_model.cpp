#include <fmt/format.h>

#include <cstdio>
#include <iterator>

#include "apps/orchard/commands.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/progress.h"
#include "model/gguf/reader.h"
#include "model/synthetic.h"

namespace orchard::app {
namespace {

// 1234567 -> "1.23 M"; with unit "B": "1.23 MB" (powers of 1000).
std::string with_unit(double v, const char* unit) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T"};
  size_t i = 0;
  for (; v >= 1000 && i + 1 < std::size(kPrefixes); ++i) v /= 1000;
  return fmt::format("{:.3g} {}{}", v, kPrefixes[i], unit);
}

// What the file holds, read back from it: the figures a user checks against what they asked for.
void print_written(const model::SyntheticModelSpec& spec, const std::string& path) {
  const auto file = model::gguf::Reader::open(path);
  const std::string arch = file.get("general.architecture").as_string("general.architecture");
  int64_t parameters = 0;
  uint64_t tensor_bytes = 0;
  for (const auto& t : file.tensors()) {
    parameters += t.elements();
    tensor_bytes += t.size_bytes;
  }
  // The architecture's own keys, those it has (architectures differ in what they write).
  std::string dims;
  for (const auto& [key, words] : {std::pair{"block_count", "layers"}, std::pair{"embedding_length", "wide"},
                                   std::pair{"attention.head_count", "heads"}}) {
    const model::gguf::Value* v = file.find(arch + "." + key);
    if (v) dims += fmt::format("{}{} {}", dims.empty() ? "" : ", ", v->as_int(key), words);
  }
  std::printf("wrote %s: %s, shape %s (%s), type %s\n"
              "  %lld parameters (%s) in %zu tensors, %s of weights, %llu bytes in all (%s)\n",
              path.c_str(), arch.c_str(), spec.shape.c_str(), dims.c_str(), spec.type.c_str(),
              static_cast<long long>(parameters), with_unit(static_cast<double>(parameters), "").c_str(),
              file.tensors().size(), with_unit(static_cast<double>(tensor_bytes), "B").c_str(),
              static_cast<unsigned long long>(file.file_size()), with_unit(static_cast<double>(file.file_size()), "B").c_str());
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto spec = std::make_shared<model::SyntheticModelSpec>();
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a GGUF model with deterministic random weights and a real tokenizer (no download)");
  cmd->add_option("--arch", spec->arch, model::synthetic_architectures())->capture_default_str();
  cmd->add_option("--shape", spec->shape, model::synthetic_shapes())->capture_default_str();
  cmd->add_option("--type", spec->type, model::synthetic_types())->capture_default_str();
  cmd->add_option("--seed", spec->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("--rope-linear-factor", spec->rope_linear_factor, "Write linear RoPE scaling with this factor")
      ->check(above(0));
  cmd->add_option("--rope-yarn-factor", spec->rope_yarn_factor,
                  "Write YaRN RoPE scaling with this factor over a quarter of the context")
      ->check(at_least(1));
  cmd->add_flag("--rope-freq-factors", spec->rope_freq_factors, "Write Llama-3.1-style RoPE frequency factors");
  cmd->add_flag("--fit-corpus", spec->fit_corpus,
                "Write the weights from the built-in corpus's token statistics, so the model strings "
                "together phrases in words (dense llama shapes: small, tinyllama-1.1b)");
  cmd->add_option("--threads", spec->threads, "Threads (default: all cores)")->check(at_least(0));
  cmd->add_option("-o,--output", *output, "Where to write the .gguf file")->required();
  cmd->callback([spec, output] {
    ProgressBar bar("writing " + *output);
    model::write_synthetic_model(*spec, *output, [&](size_t done, size_t total) { bar.update(done, total); });
    bar.finish();
    print_written(*spec, *output);
  });
}

}  // namespace orchard::app
