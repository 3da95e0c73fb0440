// Reference quantizers: round-trip error bounds, layouts, and bad sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace orchard::core {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  // An outlier, a constant stretch and a zero stretch, as real tensors have (n ≥ 544).
  v[5] = 9.0f;
  std::fill(v.begin() + 256, v.begin() + 288, 0.25f);
  std::fill(v.begin() + 512, v.begin() + 544, 0.0f);
  return v;
}

struct Case {
  TensorType type;
  int64_t group;  // elements sharing one scale
  // Largest error allowed: `fraction` of the group's largest magnitude (half a step for plain
  // rounding, a whole step where clamping can cost one) plus `super_fraction` of the
  // 256-element super-block's, for the K-quants whose scales are themselves rounded.
  double fraction;
  double super_fraction;
};

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, ErrorIsBounded) {
  const Case c = GetParam();
  const int64_t n = 4096;
  std::vector<float> x = random_values(n, 7), back(static_cast<size_t>(n));
  std::vector<uint8_t> packed(row_bytes(c.type, n));
  quantize_row_reference(c.type, x.data(), packed.data(), n);
  dequantize_row_reference(c.type, packed.data(), back.data(), n);
  auto amax = [&](int64_t i, int64_t group) {
    float m = 0;
    for (int64_t j = i / group * group; j < (i / group + 1) * group; ++j) m = std::max(m, std::fabs(x[j]));
    return static_cast<double>(m);
  };
  double total_error = 0, total_bound = 0;
  for (int64_t i = 0; i < n; ++i) {
    double err = std::fabs(static_cast<double>(back[i]) - x[i]);
    double bound = c.fraction * amax(i, c.group) + c.super_fraction * amax(i, 256);
    ASSERT_LE(err, bound) << type_name(c.type) << " element " << i << " x=" << x[i] << " got " << back[i];
    total_error += err;
    total_bound += bound;
  }
  // Rounding errors spread over the step: on average well inside the worst case.
  EXPECT_LE(total_error, 0.6 * total_bound) << type_name(c.type);
}

INSTANTIATE_TEST_SUITE_P(Types, RoundTrip,
                         ::testing::Values(Case{TensorType::F32, 1, 0, 0}, Case{TensorType::F16, 1, 1.0 / 2048, 0},
                                           Case{TensorType::BF16, 1, 1.0 / 256, 0}, Case{TensorType::Q4_0, 32, 1.0 / 8, 0},
                                           Case{TensorType::Q8_0, 32, 1.0 / 254 + 1.0 / 2048, 0},
                                           Case{TensorType::Q4_K, 32, 1.0 / 15, 1.0 / 63},
                                           Case{TensorType::Q6_K, 16, 1.0 / 32, 1.0 / 254},
                                           Case{TensorType::Q8_K, 256, 1.0 / 254 + 1e-6, 0}),
                         [](const auto& info) { return std::string(type_name(info.param.type)); });

TEST(Quant, Q4_KScalesSurviveTheirPacking) {
  // A block whose sub-blocks have very different ranges exercises all 6 bits of scales and mins.
  std::vector<float> x(256);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i) x[32 * j + i] = static_cast<float>((j + 1) * (i - 8 * (j % 3))) / 8;
  BlockQ4_K block;
  quantize_row_reference(TensorType::Q4_K, x.data(), &block, 256);
  std::vector<float> back(256);
  dequantize_row_reference(TensorType::Q4_K, &block, back.data(), 256);
  // Within one 4-bit step of its sub-block's range.
  for (int j = 0; j < 8; ++j) {
    auto [lo, hi] = std::minmax_element(x.begin() + 32 * j, x.begin() + 32 * j + 32);
    float step = (std::max(*hi, 0.0f) - std::min(*lo, 0.0f)) / 15;
    for (int i = 32 * j; i < 32 * j + 32; ++i) EXPECT_NEAR(back[i], x[i], step) << i;
  }
}

TEST(Quant, Q8_KKeepsPerSixteenSums) {
  std::vector<float> x = random_values(4096, 3);
  BlockQ8_K blocks[2];
  quantize_row_reference(TensorType::Q8_K, x.data(), blocks, 512);
  for (const auto& b : blocks)
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
      EXPECT_EQ(b.bsums[j], sum);
    }
}

TEST(Quant, Q4_0MatchesTheGgufNibbleOrder) {
  // Byte j holds element j in its low nibble and element j + 16 in its high one.
  BlockQ4_0 block{};
  block.d = float_to_half(1.0f);
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  float out[32];
  dequantize_row_reference(TensorType::Q4_0, &block, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], static_cast<float>(j - 8));
    EXPECT_EQ(out[j + 16], static_cast<float>(7 - j));
  }
}

TEST(Quant, PartialBlocksAreFormatErrors) {
  float x[48] = {};
  uint8_t out[256];
  EXPECT_THROW(quantize_row_reference(TensorType::Q4_0, x, out, 48), FormatError);
  EXPECT_THROW(dequantize_row_reference(TensorType::Q6_K, out, x, 48), FormatError);
}

}  // namespace
}  // namespace orchard::core
