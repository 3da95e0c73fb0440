// The forward pass's small operations against float64 formulas: SiLU and softmax use our own
// vectorizable e^x, so their accuracy is checked here over the whole range a model produces
// and past it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model/ops.h"

namespace orchard::model {
namespace {

TEST(Ops, SiluMulMatchesFloat64AcrossTheRange) {
  std::vector<float> gate, up;
  for (float x = -120.0f; x <= 120.0f; x += 0.0137f) gate.push_back(x);
  for (float x : {-1e30f, -88.5f, -87.4f, -87.3f, -1e-30f, 0.0f, 1e-30f, 88.3f, 88.5f, 1e30f}) gate.push_back(x);
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(i % 3 == 0 ? -1.5f : 0.75f);
  std::vector<float> out = gate;
  ops::silu_mul(out.data(), up.data(), static_cast<int64_t>(out.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double x = gate[i];
    const double exact = x / (1.0 + std::exp(-x)) * up[i];
    // A few float roundings of the result; below 1e-30 (e^x past the clamp) only absolutely.
    ASSERT_NEAR(out[i], exact, 4e-7 * std::fabs(exact) + 1e-30) << "silu(" << gate[i] << ") * " << up[i];
  }
}

TEST(Ops, SiluMulPassesNanThrough) {
  float gate[] = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  const float up[] = {1.0f, 1.0f};
  ops::silu_mul(gate, up, 2);
  EXPECT_TRUE(std::isnan(gate[0]));
  EXPECT_NEAR(gate[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

TEST(Ops, AttentionMatchesFloat64Softmax) {
  // Two query heads on one KV head; scores spread wider than e^x's clamp, so some weights
  // underflow to zero in both.
  constexpr int32_t kGroup = 2, kHeadDim = 64, kKeys = 37, kStride = 40;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(kGroup * kHeadDim), keys(kHeadDim * kStride), values(kKeys * kHeadDim);
  for (auto& v : q) v = normal(rng) * 4.0f;
  for (auto& v : keys) v = normal(rng) * 4.0f;
  for (auto& v : values) v = normal(rng);
  std::vector<float> scores(kKeys), out(kGroup * kHeadDim);
  ops::attend_group(q.data(), kGroup, kHeadDim, keys.data(), kStride, values.data(), kHeadDim, kKeys, scores.data(),
                    out.data());
  for (int32_t g = 0; g < kGroup; ++g) {
    std::vector<double> s(kKeys);
    double max = -INFINITY;
    for (int32_t j = 0; j < kKeys; ++j) {
      double dot = 0;
      for (int32_t d = 0; d < kHeadDim; ++d) dot += static_cast<double>(q[g * kHeadDim + d]) * keys[d * kStride + j];
      s[j] = dot / std::sqrt(static_cast<double>(kHeadDim));
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (double& v : s) sum += v = std::exp(v - max);
    for (int32_t d = 0; d < kHeadDim; ++d) {
      double expected = 0, magnitude = 0;
      for (int32_t j = 0; j < kKeys; ++j) {
        expected += s[j] / sum * values[j * kHeadDim + d];
        magnitude += s[j] / sum * std::fabs(values[j * kHeadDim + d]);
      }
      // float32 scores of |q·k| up to a few hundred: their rounding moves each weight by ~1e-5.
      ASSERT_NEAR(out[g * kHeadDim + d], expected, 1e-4 * magnitude + 1e-6) << "head " << g << " dim " << d;
    }
  }
}

}  // namespace
}  // namespace orchard::model
