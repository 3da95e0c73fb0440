// gpt-oss's sliding layers keep a ring of their window (KvCache) instead of every position:
// logits of sequences longer than the rings match the float64 reference, the cache reserves
// less, and a rewind older than the rings reach is refused and computes right once redone
// from position 0.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model_files.h"
#include "model/reference_forward.h"

namespace orchard {
namespace {

// Relative RMS error of the engine's logits against the reference's, worst position.
double worst_error(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want) {
  double worst = 0;
  for (size_t p = 0; p < want.size(); ++p) {
    double sum_want = 0, sum_err = 0;
    for (size_t i = 0; i < want[p].size(); ++i) {
      sum_want += want[p][i] * want[p][i];
      sum_err += (want[p][i] - got[p][i]) * (want[p][i] - got[p][i]);
    }
    worst = std::max(worst, std::sqrt(sum_err / sum_want));
  }
  return worst;
}

TEST(SlidingWindowRing, SequencesLongerThanTheRingsMatchTheReference) {
  const std::string path = testing::synthetic_model("gpt-oss", "tiny", "f32");
  auto file = model::gguf::Reader::open(path);
  auto config = model::ModelConfig::from_gguf(file);
  ASSERT_EQ(config.sliding_window, 5);
  core::ThreadPool pool(2);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  constexpr int32_t kContext = 128, kBatch = 4;
  model::Forward forward(weights, kContext, kBatch, pool);

  // The even layers slide: rings of the window and a batch, 5 + 4 - 1 = 8 positions (16 slots,
  // which take one whole block of 64 keys); the others keep all 128.
  const model::KvCache& cache = forward.cache(0);
  for (int32_t l = 0; l < config.n_layers; ++l) EXPECT_EQ(cache.ring(l), config.sliding_layer(l) ? 8 : 0) << l;
  const model::KvCache full(config.n_layers, kContext, config.n_kv_heads, config.head_dim, config.head_dim);
  EXPECT_EQ(cache.bytes() * 4 * kContext, full.bytes() * (2 * kContext + 2 * model::kKeyBlock));
  EXPECT_EQ(cache.bytes_per_position() * 2, full.bytes_per_position());

  // 12 prompt positions in passes of 4, then one at a time to 24: the rings wrap twice.
  auto run = [&](const std::vector<int32_t>& tokens, testing::ForcedRouting& routing) {
    forward.observe_routing([&](int32_t layer, int32_t, int32_t position, std::span<const int32_t> experts) {
      routing.experts[{layer, position}].assign(experts.begin(), experts.end());
    });
    std::vector<std::vector<float>> got;
    const auto vocab = static_cast<size_t>(config.vocab_size);
    for (int32_t pos = 0; pos < 12; pos += kBatch) {
      forward.run(std::span(tokens).subspan(static_cast<size_t>(pos), kBatch), nullptr, kBatch, pos, true);
      for (int32_t t = 0; t < kBatch; ++t) got.emplace_back(forward.logits(t), forward.logits(t) + vocab);
    }
    for (int32_t pos = 12; pos < static_cast<int32_t>(tokens.size()); ++pos) {
      forward.run(std::span(tokens).subspan(static_cast<size_t>(pos), 1), nullptr, 1, pos);
      got.emplace_back(forward.logits(), forward.logits() + vocab);
    }
    return got;
  };
  std::vector<int32_t> tokens(24);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 1000);
  testing::ForcedRouting routing;
  const auto got = run(tokens, routing);
  // f32 weights: products in float32 only, as test_forward's tolerance says.
  EXPECT_LT(worst_error(got, testing::reference_logits(file, tokens, &routing)), 2e-6);

  // At 24 the rings hold positions 16..23: going on from 20 needs 16..19, from 10 needs 6..9.
  EXPECT_EQ(forward.resumable(0, 24), 24);
  EXPECT_EQ(forward.resumable(0, 20), 20);
  EXPECT_EQ(forward.resumable(0, 10), 0);
  EXPECT_EQ(forward.resumable(0, 25), 0);  // a gap
  EXPECT_THROW(forward.run(std::span(tokens).subspan(10, 1), nullptr, 1, 10), Error);
  EXPECT_EQ(forward.resumable(0, 20), 20);  // the refused pass changed nothing

  // A sequence that parts from the first at position 10 is computed again from 0, and right.
  std::vector<int32_t> other(tokens.begin(), tokens.begin() + 10);
  for (int32_t i = 0; i < 10; ++i) other.push_back(500 + i);
  testing::ForcedRouting other_routing;
  const auto got_other = run(other, other_routing);
  EXPECT_LT(worst_error(got_other, testing::reference_logits(file, other, &other_routing)), 2e-6);
}

TEST(SlidingWindowRing, AContextTooShortKeepsEveryPosition) {
  // A ring takes twice its positions: below half the context it pays, here it would not.
  const std::string path = testing::synthetic_model("gpt-oss", "tiny", "f32");
  auto file = model::gguf::Reader::open(path);
  auto config = model::ModelConfig::from_gguf(file);
  core::ThreadPool pool(1);
  model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  model::Forward forward(weights, 16, 8, pool);
  for (int32_t l = 0; l < config.n_layers; ++l) EXPECT_EQ(forward.cache(0).ring(l), 0);
  EXPECT_EQ(forward.resumable(0, 10), 10);
}

}  // namespace
}  // namespace orchard
