// The engine's logits against the naive float64 forward pass, for every architecture, shape and
// weight type, through both prompt batches and single-token decode steps (the KV cache path).
#include <gtest/gtest.h>

#include <cmath>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model_files.h"
#include "model/reference_forward.h"

namespace orchard {
namespace {

struct Case {
  std::string arch, shape, type;
  float rope_linear_factor = 0;
  bool rope_freq_factors = false;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.arch + "_" + info.param.shape + "_" + info.param.type;
  if (info.param.rope_linear_factor > 0) n += "_linear_rope";
  if (info.param.rope_freq_factors) n += "_freq_factors";
  for (char& c : n)
    if (c == '-' || c == '.') c = '_';
  return n;
}

// Error allowed relative to the logits' RMS. Float weights: only float32 rounding (≈1e-6 per
// op, a few hundred ops deep) separates the engine from float64. Quantized weights: the engine
// also rounds activations to 8 bits (Q8_0/Q8_K, relative error ≈ 1/254 per element, averaging
// down over a dot product's terms), so a few per cent of the RMS after several layers.
double tolerance(const std::string& type) {
  if (type == "f32") return 2e-4;
  if (type == "f16" || type == "bf16") return 1e-2;
  return 6e-2;
}

class ForwardVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardVsReference, LogitsMatchFloat64Reference) {
  const Case& c = GetParam();
  const std::string path = testing::synthetic_model(c.arch, c.shape, c.type, c.rope_linear_factor, c.rope_freq_factors);
  auto file = model::gguf::Reader::open(path);
  auto config = model::ModelConfig::from_gguf(file);
  const std::vector<int32_t> tokens = {1, 17, 250, 3, 99, 512, 42, 7, 300, 11, 64, 5};
  const auto expected = testing::reference_logits(file, tokens);

  core::ThreadPool pool(2);
  for (bool repack : {true, false}) {
    model::LoadOptions load;
    load.allow_repack = repack;
    model::ModelWeights weights(file, config, model::Shard::whole(config), load);
    model::Forward forward(weights, 64, 8, pool);
    // 8 prompt positions in one batch, then 4 single-token steps.
    forward.run(std::span(tokens).first(8), nullptr, 8, 0, /*logits_for_all=*/true);
    auto check = [&](const float* got, size_t position) {
      const auto& want = expected[position];
      double rms = 0, max_err = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        rms += want[i] * want[i];
        max_err = std::max(max_err, std::abs(want[i] - got[i]));
      }
      rms = std::sqrt(rms / static_cast<double>(want.size()));
      EXPECT_LT(max_err / rms, tolerance(c.type)) << "position " << position << " repack " << repack;
    };
    for (int32_t t = 0; t < 8; ++t) check(forward.logits(t), static_cast<size_t>(t));
    for (size_t t = 8; t < tokens.size(); ++t) {
      forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
      check(forward.logits(), t);
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::string arch : {"llama", "qwen2", "qwen3"})
    for (std::string shape : {"tiny", "small"})
      for (std::string type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"}) cases.push_back({arch, shape, type});
  cases.push_back({"llama", "tiny", "f32", 4.0f, false});
  cases.push_back({"llama", "tiny", "f32", 0, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ForwardVsReference, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace orchard
