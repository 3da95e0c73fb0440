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
  float rope_yarn_factor = 0;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.arch + "_" + info.param.shape + "_" + info.param.type;
  if (info.param.rope_linear_factor > 0) n += "_linear_rope";
  if (info.param.rope_freq_factors) n += "_freq_factors";
  if (info.param.rope_yarn_factor > 0) n += "_yarn";
  for (char& c : n)
    if (c == '-' || c == '.') c = '_';
  return n;
}

// RMS of the logits' error relative to their RMS. The reference dequantizes the same weights,
// so what remains is how the engine computes:
//  - f32, f16, bf16: products in float32 (≈6e-8 relative per operation; measured ≈5e-7 after
//    the whole model), so 2e-6; latent attention's three more products per layer (below)
//    measured 2.2e-6 (deepseek2 f16, AVX-512), so 4e-6 there;
//  - quantized: activations are rounded to 8-bit blocks (Q8_0/Q8_K: ≈0.5% of their RMS per
//    element) before each of about 30 products in a row; measured 1.4-1.6% (q8_0, q4_0) and
//    2.0-2.3% (q4_k_m, whose 256-wide Q8_K blocks round coarser), so 4%.
//  - latent attention (deepseek2) has three more quantized products in a row per layer (the
//    query latent's attn_q_b, each head's attn_k_b and attn_v_b): measured 2.7-2.8% (q8_0,
//    q4_0) and 4.0% (q4_k_m), so 6%.
double tolerance(const std::string& type, const model::ModelConfig& config) {
  if (type == "f32" || type == "f16" || type == "bf16") return config.latent_attention() ? 4e-6 : 2e-6;
  return config.latent_attention() ? 6e-2 : 4e-2;
}

class ForwardVsReference : public ::testing::TestWithParam<Case> {};

// The largest router-probability gap by which the engine may pick an expert the reference did
// not: 8-bit activations move the router's input by ≈1-2% of its RMS (see tolerance()), which
// moves unit-scale router logits by up to ≈0.02 and probabilities of ≈0.1-0.4 by a few 1e-3;
// measured at most 1e-3 (2 of 48 choices differ in the worst case), so 5e-3. Float weights
// must route exactly as the reference.
// Sigmoid scores (deepseek2) move by up to a quarter of their logits' error, but those logits
// see deepseek2's larger error (above), and a group's worth sums two scores: measured at most
// 9e-3 between experts (q8_0) and 1.8e-2 between groups (q4_k_m), so 3e-2.
double routing_gap_tolerance(const std::string& type, const model::ModelConfig& config) {
  if (type == "f32" || type == "f16" || type == "bf16") return 0;
  return config.expert_gating == model::ExpertGating::Sigmoid ? 3e-2 : 5e-3;
}

TEST_P(ForwardVsReference, LogitsMatchFloat64Reference) {
  const Case& c = GetParam();
  const std::string path = testing::synthetic_model(c.arch, c.shape, c.type, c.rope_linear_factor, c.rope_freq_factors,
                                                    c.rope_yarn_factor);
  auto file = model::gguf::Reader::open(path);
  auto config = model::ModelConfig::from_gguf(file);
  const std::vector<int32_t> tokens = {1, 17, 250, 3, 99, 512, 42, 7, 300, 11, 64, 5};

  core::ThreadPool pool(2);
  double worst = 0;
  for (bool repack : {true, false}) {
    model::LoadOptions load;
    load.allow_repack = repack;
    model::ModelWeights weights(file, config, model::Shard::whole(config), load);
    model::Forward forward(weights, 64, 8, pool);
    // A mixture of experts: the reference follows the engine's choice of experts and checks
    // that each differs from its own only where two experts were nearly tied.
    testing::ForcedRouting routing;
    forward.observe_routing([&](int32_t layer, int32_t, int32_t position, std::span<const int32_t> experts) {
      routing.experts[{layer, position}].assign(experts.begin(), experts.end());
    });
    // 8 prompt positions in one batch, then 4 single-token steps.
    std::vector<std::vector<float>> got;
    const auto vocab = static_cast<size_t>(config.vocab_size);
    forward.run(std::span(tokens).first(8), nullptr, 8, 0, /*logits_for_all=*/true);
    for (int32_t t = 0; t < 8; ++t) got.emplace_back(forward.logits(t), forward.logits(t) + vocab);
    for (size_t t = 8; t < tokens.size(); ++t) {
      forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
      got.emplace_back(forward.logits(), forward.logits() + vocab);
    }
    const auto expected = testing::reference_logits(file, tokens, config.n_expert > 0 ? &routing : nullptr);
    if (config.n_expert > 0) {
      EXPECT_EQ(routing.experts.size(), tokens.size() * static_cast<size_t>(config.n_layers - config.n_dense_leading));
      EXPECT_LE(routing.worst_gap, routing_gap_tolerance(c.type, config))
          << routing.differing << " choices differ from the reference's, repack " << repack;
      std::printf("routing: %lld of %zu choices differ, worst gap %.3g\n", static_cast<long long>(routing.differing),
                  routing.experts.size(), routing.worst_gap);
    }
    for (size_t position = 0; position < tokens.size(); ++position) {
      const auto& want = expected[position];
      double sum_want = 0, sum_err = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        sum_want += want[i] * want[i];
        sum_err += (want[i] - got[position][i]) * (want[i] - got[position][i]);
      }
      const double relative = std::sqrt(sum_err / sum_want);
      worst = std::max(worst, relative);
      EXPECT_LT(relative, tolerance(c.type, config)) << "position " << position << " repack " << repack;
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("worst relative RMS error %.3g (tolerance %.3g)\n", worst, tolerance(c.type, config));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (std::string arch : {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral"})
    for (std::string shape : {"tiny", "small"})
      for (std::string type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"}) cases.push_back({arch, shape, type});
  // Every other file type, on the tiny llama and a mixture of experts.
  for (std::string arch : {"llama", "qwen3moe"})
    for (std::string type : {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q5_k_m", "iq4_nl", "iq4_xs", "mxfp4"})
      cases.push_back({arch, "tiny", type});
  // gpt-oss: attention sinks, sliding windows shorter than the prompt, biases everywhere, the
  // clamped SwiGLU and softmax-of-the-chosen routing; mxfp4 as its files have it (MXFP4
  // experts, BF16 elsewhere).
  for (std::string type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "mxfp4"})
    cases.push_back({"gpt-oss", "tiny", type});
  cases.push_back({"gpt-oss", "small", "f32"});
  cases.push_back({"llama", "tiny", "f32", 4.0f, false});
  cases.push_back({"llama", "tiny", "f32", 0, true});
  // YaRN on a whole-head rotation (NeoX and normal ordering); deepseek2 has it on its rotated part.
  cases.push_back({"llama", "tiny", "f32", 0, false, 8.0f});
  cases.push_back({"qwen3", "tiny", "q8_0", 0, false, 8.0f});
  // Latent attention, shared experts, sigmoid and group-limited routing (deepseek2), and the
  // V2-Lite kind (plain query projection, softmax).
  for (std::string type : {"f32", "f16", "q8_0", "q4_0", "q4_k_m"}) cases.push_back({"deepseek2", "tiny", type});
  for (std::string type : {"f32", "q4_k_m"}) cases.push_back({"deepseek2-lite", "tiny", type});
  // Older files' joined attn_kv_b, split at load (its key parts transposed: Q8_0 from quantized files).
  for (std::string type : {"f32", "q8_0", "q4_k_m"}) cases.push_back({"deepseek2-kvb", "tiny", type});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ForwardVsReference, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace orchard
