#pragma once
// Writes real GGUF models with deterministic random weights and a real learned tokenizer, so
// tests, demos and benchmarks need no download. Weights are scaled so activations stay near
// unit size through every layer.
#include <cstdint>
#include <functional>
#include <string>

namespace orchard::model {

struct SyntheticModelSpec {
  std::string arch = "llama";   // llama | qwen2 | qwen3 | qwen3moe | mixtral (llama with experts) | deepseek2 | deepseek2-lite | deepseek2-kvb | gpt-oss
  std::string shape = "tiny";   // tiny | small | tinyllama-1.1b | llama-8b | moe-3b
  std::string type = "f32";     // a file type of synthetic_types(): f32, q4_k_m, iq4_xs, ...
  uint64_t seed = 1;
  float rope_linear_factor = 0;  // > 0: write linear RoPE scaling metadata with this factor
  float rope_yarn_factor = 0;    // > 0: YaRN metadata with this factor over a quarter of the context
  bool rope_freq_factors = false;  // write a llama-3.1-style rope_freqs.weight tensor
  int threads = 0;               // for generating and quantizing; 0: all cores
  // Write the embedding, output head, norms and every layer's attention and FFN from the built-in
  // corpus's token statistics (corpus_fit.h), so the model continues text in the corpus's words
  // (dense llama shapes only).
  bool fit_corpus = false;
};

// Every file is marked synthetic in its metadata (orchard.synthetic, orchard.synthetic.note: what
// its text will be like, which `run` prints). Throws Error naming the bad field for an unknown
// arch, shape or type.
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path,
                           const std::function<void(size_t done, size_t total)>& on_progress = {});

std::string synthetic_shapes();  // "tiny, small, tinyllama-1.1b, llama-8b, moe-3b"
std::string synthetic_architectures();  // "llama, qwen2, qwen3, qwen3moe, mixtral, deepseek2, deepseek2-lite, deepseek2-kvb, gpt-oss"
std::string synthetic_types();   // "f32, f16, bf16, q8_0, q4_0, q4_1, ..., q4_k_m, q5_k_m, iq4_xs, mxfp4"

}  // namespace orchard::model
