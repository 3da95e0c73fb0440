// KV caches of F16 and Q8_0 elements against F32 over a few hundred positions (prompt chunks
// and decode steps) on tiny models of each attention kind: standard with grouped heads (llama),
// latent (deepseek2), sliding windows and sinks (gpt-oss); F32 logits a thousand and more
// positions deep against the float64 reference; a prefix copied between sequences continues as
// if computed there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model_files.h"
#include "model/reference_forward.h"

namespace orchard {
namespace {

using model::KvType;
using model::TokenId;

std::vector<TokenId> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> pick(1, vocab - 1);
  std::vector<TokenId> tokens(n);
  for (TokenId& t : tokens) t = pick(rng);
  return tokens;
}

struct Run {
  std::vector<double> log_probs;  // [position][vocab]
  std::vector<std::vector<int32_t>> routes;  // [position]: every MoE layer's set of experts, layer by layer
};

// Log-probabilities of every position: `prompt` positions in chunks of 64, then one token at a
// time (the decode path), each position's whole vocabulary; and each position's expert choices.
Run log_probs(const model::ModelWeights& weights, KvType type, const std::vector<TokenId>& tokens, size_t prompt,
              core::ThreadPool& pool) {
  model::Forward forward(weights, static_cast<int32_t>(tokens.size()), 64, pool, nullptr, 1, type);
  const auto vocab = static_cast<size_t>(weights.config().vocab_size);
  Run run;
  run.routes.resize(tokens.size());
  forward.observe_routing([&](int32_t, int32_t, int32_t position, std::span<const int32_t> experts) {
    // The set of experts: their order (by probability) may swap without changing the sum.
    auto& route = run.routes[static_cast<size_t>(position)];
    const auto begin = route.insert(route.end(), experts.begin(), experts.end());
    std::sort(begin, route.end());
  });
  std::vector<double>& out = run.log_probs;
  auto keep = [&](const float* logits) {
    double max = *std::max_element(logits, logits + vocab), sum = 0;
    for (size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
    for (size_t i = 0; i < vocab; ++i) out.push_back(logits[i] - max - std::log(sum));
  };
  for (size_t done = 0; done < prompt;) {
    const auto n = static_cast<int32_t>(std::min<size_t>(64, prompt - done));
    forward.run(std::span(tokens).subspan(done, static_cast<size_t>(n)), nullptr, n, static_cast<int32_t>(done), true);
    for (int32_t i = 0; i < n; ++i) keep(forward.logits(i));
    done += static_cast<size_t>(n);
  }
  for (size_t t = prompt; t < tokens.size(); ++t) {
    forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
    keep(forward.logits());
  }
  return run;
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const auto n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= n, mb /= n;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return ab / std::sqrt(aa * bb);
}

struct Case {
  std::string arch, type;
};

class KvCacheTypes : public ::testing::TestWithParam<Case> {};

// 256 prompt positions and 64 decode steps: r of all 320 × vocab log-probabilities against the
// F32 cache's. F16 rounds each key and value by 2^-11 of itself, Q8_0 by up to 1/254 of its
// block's largest: measured r ≥ 0.9999 for both on the dense llama; the issue asks 0.999.
// A mixture of experts amplifies any difference where a router's top choices nearly tie: one
// expert swapped at one layer moves that position's logits by whole units (Q8_0 on deepseek2
// and gpt-oss: 15 and 18 positions of 320 route differently somewhere, r 0.993 and 0.997 over
// all of them; 8-bit activations reroute as often, test_forward's 2 of 48). So r is taken over
// the positions routed as F32 routed them, and those must be at least 90% (measured 94%).
TEST_P(KvCacheTypes, LogProbabilitiesCorrelateWithF32) {
  const Case& c = GetParam();
  auto file = model::gguf::Reader::open(testing::synthetic_model(c.arch, "tiny", c.type));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  const auto tokens = random_tokens(320, config.vocab_size, 3);
  const auto f32 = log_probs(weights, KvType::F32, tokens, 256, pool);
  for (KvType type : {KvType::F16, KvType::Q8_0}) {
    const auto other = log_probs(weights, type, tokens, 256, pool);
    const auto vocab = static_cast<size_t>(config.vocab_size);
    std::vector<double> a, b;
    size_t rerouted = 0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      if (other.routes[t] != f32.routes[t]) {
        ++rerouted;
        continue;
      }
      a.insert(a.end(), f32.log_probs.begin() + t * vocab, f32.log_probs.begin() + (t + 1) * vocab);
      b.insert(b.end(), other.log_probs.begin() + t * vocab, other.log_probs.begin() + (t + 1) * vocab);
    }
    const double r = correlation(a, b), r_all = correlation(f32.log_probs, other.log_probs);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    std::printf("%s: r = %.7f over %zu positions routed alike (%zu rerouted; r over all %.7f), largest log-probability "
                "difference %.4f\n",
                std::string(kv_type_name(type)).c_str(), r, tokens.size() - rerouted, rerouted, r_all, worst);
    EXPECT_GE(r, 0.999) << kv_type_name(type);
    EXPECT_LE(rerouted, tokens.size() / 10) << kv_type_name(type);
    if (config.n_expert == 0) EXPECT_GE(r_all, 0.999) << kv_type_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, KvCacheTypes,
                         ::testing::Values(Case{"llama", "f32"}, Case{"llama", "q4_0"}, Case{"deepseek2", "f32"},
                                           Case{"gpt-oss", "f32"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string n = info.param.arch + "_" + info.param.type;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// 1280 positions of a tiny llama (its trained context is 512: RoPE has no limit), prompt in
// chunks of 256 and the last 8 decoded one at a time: logits at the deepest positions against
// the float64 reference. F32 keeps the engine's float32 error (tests/model/test_forward's 2e-6
// over 12 positions; measured 3.2e-7 at position 1279).
TEST(KvCacheDepth, LogitsDeepInTheContextMatchFloat64) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("llama", "tiny", "f32"));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  const auto tokens = random_tokens(1280, config.vocab_size, 4);
  const size_t prompt = tokens.size() - 8;
  const auto expected = testing::reference_logits(file, tokens);
  for (KvType type : {KvType::F32, KvType::F16}) {
    model::Forward forward(weights, static_cast<int32_t>(tokens.size()), 256, pool, nullptr, 1, type);
    std::vector<std::vector<float>> got;
    const auto vocab = static_cast<size_t>(config.vocab_size);
    for (size_t done = 0; done < prompt; done += 256) {
      const auto n = static_cast<int32_t>(std::min<size_t>(256, prompt - done));
      forward.run(std::span(tokens).subspan(done, static_cast<size_t>(n)), nullptr, n, static_cast<int32_t>(done));
    }
    got.emplace_back(forward.logits(), forward.logits() + vocab);
    for (size_t t = prompt; t < tokens.size(); ++t) {
      forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
      got.emplace_back(forward.logits(), forward.logits() + vocab);
    }
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& want = expected[prompt - 1 + i];
      double sum_want = 0, sum_err = 0;
      for (size_t v = 0; v < vocab; ++v) {
        sum_want += want[v] * want[v];
        sum_err += (want[v] - got[i][v]) * (want[v] - got[i][v]);
      }
      const double relative = std::sqrt(sum_err / sum_want);
      // F16 rounds keys and values by up to 2^-11 relative: measured 5.1e-5 of the logits.
      EXPECT_LT(relative, type == KvType::F32 ? 2e-6 : 5e-4) << kv_type_name(type) << " position " << prompt - 1 + i;
      if (i + 1 == got.size())
        std::printf("%s: position %zu relative RMS error %.3g\n", std::string(kv_type_name(type)).c_str(), prompt - 1 + i,
                    relative);
    }
  }
}

// Sequence 1 takes sequence 0's first 80 positions by copy and goes on with other tokens: its
// logits are those of a Forward that computed all of them.
TEST(KvCacheCopy, CopiedPrefixContinuesAsComputed) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("llama", "tiny", "q8_0"));
  auto config = model::ModelConfig::from_gguf(file);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  core::ThreadPool pool(2);
  const auto first = random_tokens(100, config.vocab_size, 5);
  auto second = random_tokens(120, config.vocab_size, 6);
  std::copy_n(first.begin(), 80, second.begin());
  for (KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) {
    model::Forward shared(weights, 128, 128, pool, nullptr, 2, type);
    shared.run(first, nullptr, 100, 0);
    shared.cache(1).copy_prefix(shared.cache(0), 80);
    const std::vector<model::SequenceStep> step = {{1, std::span(second).subspan(80), 80}};
    shared.run_batch(step);
    model::Forward alone(weights, 128, 128, pool, nullptr, 1, type);
    alone.run(std::span(second).first(80), nullptr, 80, 0);
    alone.run(std::span(second).subspan(80), nullptr, 40, 80);
    const auto vocab = static_cast<size_t>(config.vocab_size);
    // Quantized weights: each row's products are the same alone or in any batch (test_batch).
    for (size_t v = 0; v < vocab; ++v)
      ASSERT_EQ(shared.logits(0)[v], alone.logits()[v]) << kv_type_name(type) << " logit " << v;
  }
}

}  // namespace
}  // namespace orchard
