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

// RMS of the logits' error relative to their RMS. The reference dequantizes the same weights,
// so what remains is how the engine computes:
//  - f32, f16, bf16: products in float32 (≈6e-8 relative per operation; measured ≈5e-7 after
//    the whole model), so 2e-6;
//  - quantized: activations are rounded to 8-bit blocks (Q8_0/Q8_K: ≈0.5% of their RMS per
//    element) before each of about 30 products in a row; measured 1.4-1.6% (q8_0, q4_0) and
//    2.0-2.3% (q4_k_m, whose 256-wide Q8_K blocks round coarser), so 4%.
double tolerance(const std::string& type) {
  if (type == "f32" || type == "f16" || type == "bf16") return 2e-6;
  return 4e-2;
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
  double worst = 0;
  for (bool repack : {true, false}) {
    model::LoadOptions load;
    load.allow_repack = repack;
    model::ModelWeights weights(file, config, model::Shard::whole(config), load);
    model::Forward forward(weights, 64, 8, pool);
    // 8 prompt positions in one batch, then 4 single-token steps.
    forward.run(std::span(tokens).first(8), nullptr, 8, 0, /*logits_for_all=*/true);
    auto check = [&](const float* got, size_t position) {
      const auto& want = expected[position];
      double sum_want = 0, sum_err = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        sum_want += want[i] * want[i];
        sum_err += (want[i] - got[i]) * (want[i] - got[i]);
      }
      const double relative = std::sqrt(sum_err / sum_want);
      worst = std::max(worst, relative);
      EXPECT_LT(relative, tolerance(c.type)) << "position " << position << " repack " << repack;
    };
    for (int32_t t = 0; t < 8; ++t) check(forward.logits(t), static_cast<size_t>(t));
    for (size_t t = 8; t < tokens.size(); ++t) {
      forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
      check(forward.logits(), t);
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("worst relative RMS error %.3g (tolerance %.3g)\n", worst, tolerance(c.type));
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
