// KV caches of F16 and Q8_0 elements against F32 over a few hundred positions (prompt chunks
// and decode steps) on tiny models of each attention kind: standard with grouped heads (llama),
// latent (deepseek2), sliding windows and sinks (gpt-oss); F32 logits a thousand and more
// positions deep against the float64 reference; a prefix copied between sequences continues as
// if computed there; an F16 cache's conversion against the scalar one; heads stored in parts as
// stored whole, and a decode step's logits the same on any number of threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/quant.h"
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
    if (config.n_expert == 0) {
      EXPECT_GE(r_all, 0.999) << kv_type_name(type);
    }
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

// Everything a cache holds for one layer and position, KV head by KV head, as bytes: keys down
// their block's rows, values, and Q8_0's scales.
std::vector<uint8_t> stored_bytes(const model::KvCache& cache, int32_t layer, int32_t pos, int32_t n_kv_heads,
                                  int32_t key_dim, int32_t value_dim) {
  const size_t e = cache.type() == KvType::F32 ? 4 : cache.type() == KvType::F16 ? 2 : 1;
  const int32_t slot = cache.slot(layer, pos);
  std::vector<uint8_t> out;
  auto append = [&](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + bytes);
  };
  for (int32_t h = 0; h < n_kv_heads; ++h) {
    const auto* keys = static_cast<const uint8_t*>(cache.keys(layer, h));
    for (int32_t d = 0; d < key_dim; ++d) append(keys + model::key_element(key_dim, d, slot) * e, e);
    append(static_cast<const uint8_t*>(cache.values(layer, h)) + slot * cache.value_stride() * e, value_dim * e);
    if (cache.type() == KvType::Q8_0) {
      const int32_t blocks = key_dim / model::kKvQ8Block;
      for (int32_t b = 0; b < blocks; ++b) append(cache.key_scales(layer, h) + model::key_element(blocks, b, slot), 2);
      append(cache.value_scales(layer, h) + slot * cache.value_scale_stride(), 2 * value_dim / model::kKvQ8Block);
    }
  }
  return out;
}

// Floats whose conversion to F16 has every kind of rounding: ties to even up and down, the
// subnormal halves (and their ties), float subnormals, the edge of overflow, ±0, ±inf and NaNs.
std::vector<float> conversion_cases(size_t n) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e9f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0xFF812345u),
                          std::bit_cast<float>(0x7FBFE000u), 0x1p-24f, 0x1.8p-24f, 0x1p-25f, 0x1.000002p-25f,
                          0x1.5p-20f, 0x1p-14f, 0x1.ffcp-15f, 0x1p-130f, -0x1p-149f,
                          // 1 + 2^-11 and 1 + 3·2^-11 are ties (to 1 and to 1 + 2^-9); just above one.
                          1.0f + 0x1p-11f, 1.0f + 0x1.8p-10f, 1.0f + 0x1.0002p-11f};
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> bits;
  while (x.size() < n) {
    // Random bit patterns: every exponent, and mantissas that hit the ties' neighbours.
    const uint32_t b = bits(rng);
    x.push_back(std::bit_cast<float>(x.size() % 3 ? (b & 0x8FFFFFFFu) | 0x30000000u : b));
  }
  return x;
}

// The cache's F16 conversion (vectors where the CPU has them) is the scalar round-to-nearest-even
// one, element for element, NaNs included; hand-checked values pin that one down.
TEST(KvCacheStore, F16ConversionIsTheScalarOne) {
  EXPECT_EQ(core::float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(core::float_to_half(65520.0f), 0x7C00);
  EXPECT_EQ(core::float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(core::float_to_half(1.0f + 0x1p-11f), 0x3C00);     // tie, to even
  EXPECT_EQ(core::float_to_half(1.0f + 0x1.8p-10f), 0x3C02);   // tie, to even (up)
  EXPECT_EQ(core::float_to_half(0x1.8p-24f), 0x0002);          // subnormal tie, to even (up)
  EXPECT_EQ(core::float_to_half(0x1p-25f), 0x0000);            // subnormal tie, to even (down)
  // Widths of 40 (not a multiple of 8 or 16: the vector loops' tails) and 136.
  for (int32_t dim : {40, 136}) {
    const int32_t heads = 3, positions = 5;
    model::KvCache cache(1, positions, heads, dim, dim, KvType::F16);
    const auto x = conversion_cases(static_cast<size_t>(2 * heads * dim * positions));
    for (int32_t pos = 0; pos < positions; ++pos) {
      const float* k = &x[static_cast<size_t>(2 * pos * heads * dim)];
      const float* v = k + heads * dim;
      cache.store(0, pos, k, v);
      for (int32_t h = 0; h < heads; ++h) {
        const auto* keys = static_cast<const core::Half*>(cache.keys(0, h));
        const auto* values = static_cast<const core::Half*>(cache.values(0, h)) + pos * cache.value_stride();
        for (int32_t d = 0; d < dim; ++d) {
          ASSERT_EQ(keys[model::key_element(dim, d, pos)], core::float_to_half(k[h * dim + d]))
              << "key " << k[h * dim + d] << " bits " << std::bit_cast<uint32_t>(k[h * dim + d]);
          ASSERT_EQ(values[d], core::float_to_half(v[h * dim + d]))
              << "value " << v[h * dim + d] << " bits " << std::bit_cast<uint32_t>(v[h * dim + d]);
        }
      }
    }
  }
}

// Storing a position's KV heads in runs (as a decode step spreads them over threads) leaves the
// cache as one store does, for every type, in a full layer and a ring; a bad run is refused.
TEST(KvCacheStore, HeadsStoredInPartsAsWhole) {
  const int32_t heads = 4, dim = 64, n_ctx = 16;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) {
    model::KvCache whole(2, n_ctx, heads, dim, dim, type, {0, 4});
    model::KvCache parts(2, n_ctx, heads, dim, dim, type, {0, 4});
    for (int32_t pos = 0; pos < 6; ++pos)
      for (int32_t layer = 0; layer < 2; ++layer) {
        std::vector<float> k(heads * dim), v(heads * dim);
        for (float& f : k) f = normal(rng);
        for (float& f : v) f = normal(rng);
        whole.store(layer, pos, k.data(), v.data());
        parts.store_heads(layer, pos, 2, 4, k.data(), v.data());
        parts.store_heads(layer, pos, 0, 1, k.data(), v.data());
        parts.store_heads(layer, pos, 1, 2, k.data(), v.data());
        parts.store_heads(layer, pos, 1, 1, k.data(), v.data());
        ASSERT_EQ(stored_bytes(parts, layer, pos, heads, dim, dim), stored_bytes(whole, layer, pos, heads, dim, dim))
            << kv_type_name(type) << " layer " << layer << " position " << pos;
      }
    std::vector<float> row(heads * dim);
    EXPECT_THROW(parts.store_heads(0, 0, 3, 5, row.data(), row.data()), Error);
    EXPECT_THROW(parts.store_heads(0, 0, 2, 1, row.data(), row.data()), Error);
  }
}

// A decode step spreads its heads' norms, rotations and stores over the pool: its logits are the
// same bits on 1, 2 or 3 threads (qwen3: per-head q/k norms; qwen2: q/k/v biases).
TEST(KvCacheStore, DecodeLogitsDoNotDependOnThreads) {
  for (std::string arch : {"qwen3", "qwen2"}) {
    auto file = model::gguf::Reader::open(testing::synthetic_model(arch, "tiny", "f32"));
    auto config = model::ModelConfig::from_gguf(file);
    model::ModelWeights weights(file, config, model::Shard::whole(config), {});
    const auto tokens = random_tokens(24, config.vocab_size, 12);
    const auto vocab = static_cast<size_t>(config.vocab_size);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      core::ThreadPool pool(threads);
      model::Forward forward(weights, 32, 16, pool, nullptr, 1, KvType::F16);
      forward.run(std::span(tokens).first(16), nullptr, 16, 0);
      std::vector<float> got;
      for (size_t t = 16; t < tokens.size(); ++t) {
        forward.run(std::span(tokens).subspan(t, 1), nullptr, 1, static_cast<int32_t>(t));
        got.insert(got.end(), forward.logits(), forward.logits() + vocab);
      }
      if (first.empty()) first = got;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(first[i]))
            << arch << " on " << threads << " threads, logit " << i % vocab << " of step " << i / vocab;
    }
  }
}

}  // namespace
}  // namespace orchard
