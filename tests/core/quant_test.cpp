// Reference quantizers: round-trip error bounds, layouts, and bad sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
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
                                           Case{TensorType::Q8_K, 256, 1.0 / 254 + 1e-6, 0},
                                           // Half a step of the block's range (≤ 2 amax), plus the
                                           // rounding of the stored half min and scale.
                                           Case{TensorType::Q4_1, 32, 1.0 / 15 + 1.0 / 256, 0},
                                           Case{TensorType::Q5_1, 32, 1.0 / 31 + 1.0 / 256, 0},
                                           // The extreme maps to -16 d; +16 d clamps to 15 d.
                                           Case{TensorType::Q5_0, 32, 1.0 / 16 + 1.0 / 2048, 0},
                                           // Half a step of the sub-block's range, plus the
                                           // scales' rounding: up to 3 (31) quant steps of d / 2
                                           // and dmin / 2, with d ≤ 2 amax / (3 · 15) (Q5_K:
                                           // 2 amax / (31 · 63)) and dmin ≤ amax / 15 (63).
                                           Case{TensorType::Q2_K, 16, 1.0 / 3, 1.0 / 10},
                                           Case{TensorType::Q5_K, 32, 1.0 / 31, 1.5 / 63},
                                           // The extreme maps to -4 s, so +4 s clamps to 3 s; the
                                           // scale's rounding moves 4 steps by d / 2 ≤ amax / 248.
                                           Case{TensorType::Q3_K, 16, 1.0 / 4, 2.0 / 124 + 1.0 / 2048},
                                           // The extreme maps to -127 d; elsewhere the widest gap
                                           // of the table is 24 (89..113) and +127 d clamps to 113 d.
                                           Case{TensorType::IQ4_NL, 32, 14.0 / 127 + 1.0 / 1024, 0},
                                           // As IQ4_NL with the sub-block scale rounded (or, at
                                           // +32, clamped) to a multiple of d = amax / (127 · 32):
                                           // up to 127 · d.
                                           Case{TensorType::IQ4_XS, 32, 14.0 / 127 + 1.0 / 1024, 1.0 / 32 + 1.0 / 1024},
                                           // amax ≤ 6 · 2^k (the scale's unit): the widest gap
                                           // below it, between 4 and 6 units, is 2, and amax > 3
                                           // units (the smaller exponent clamped it).
                                           Case{TensorType::MXFP4, 32, 1.0 / 3, 0}),
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

// Hand-made blocks of the added GGUF types: random bytes with chosen scales, dequantized by the
// reference and, here, straight from the byte offsets and bit fields of the format
// (ggml-common.h) with float64 arithmetic.
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void put_half(std::vector<uint8_t>& block, size_t at, float value) {
  Half h = float_to_half(value);
  std::memcpy(block.data() + at, &h, sizeof h);
}

double half_at(const std::vector<uint8_t>& block, size_t at) {
  Half h;
  std::memcpy(&h, block.data() + at, sizeof h);
  return half_to_float(h);
}

// Element i of a 32-element block's 4-bit codes starting at byte `at`.
int code_at(const std::vector<uint8_t>& block, size_t at, int i) {
  return i < 16 ? block[at + i] & 15 : block[at + i - 16] >> 4;
}

// Element i's fifth bit of Q5_0/Q5_1: bit i of the little-endian 32-bit word at `at`.
int fifth_bit(const std::vector<uint8_t>& block, size_t at, int i) {
  uint32_t word = block[at] | block[at + 1] << 8 | block[at + 2] << 16 | static_cast<uint32_t>(block[at + 3]) << 24;
  return (word >> i) & 1;
}

// K-quant 6-bit scale and min j of the 12 bytes at `at` (Q4_K/Q5_K packing).
std::pair<int, int> scale_min_k4(const std::vector<uint8_t>& block, size_t at, int j) {
  const uint8_t* q = block.data() + at;
  if (j < 4) return {q[j] & 63, q[j + 4] & 63};
  return {(q[j + 4] & 0x0F) | (q[j - 4] >> 6) << 4, (q[j + 4] >> 4) | (q[j] >> 6) << 4};
}

constexpr double kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// OCP E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal (m · 0.5).
double e2m1(int code) {
  int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
  double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return sign ? -v : v;
}

struct HandMade {
  TensorType type;
  std::vector<uint8_t> block;
  std::vector<double> expected;
};

HandMade hand_made(TensorType type, uint32_t seed) {
  HandMade h{type, random_bytes(type_traits(type).block_bytes, seed), {}};
  auto& b = h.block;
  const int n = static_cast<int>(type_traits(type).block_elements);
  h.expected.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    double& x = h.expected[static_cast<size_t>(i)];
    const int sub16 = i / 16, l = i % 32, s = i % 128 / 32, half = i / 128;
    switch (type) {
      case TensorType::Q4_1:  // d, m, qs[16]
        if (i == 0) put_half(b, 0, 0.75f), put_half(b, 2, -3.5f);
        x = half_at(b, 0) * code_at(b, 4, i) + half_at(b, 2);
        break;
      case TensorType::Q5_0:  // d, qh[4], qs[16]
        if (i == 0) put_half(b, 0, -0.375f);
        x = half_at(b, 0) * ((code_at(b, 6, i) | fifth_bit(b, 2, i) << 4) - 16);
        break;
      case TensorType::Q5_1:  // d, m, qh[4], qs[16]
        if (i == 0) put_half(b, 0, 0.125f), put_half(b, 2, 1.5f);
        x = half_at(b, 0) * (code_at(b, 8, i) | fifth_bit(b, 4, i) << 4) + half_at(b, 2);
        break;
      case TensorType::IQ4_NL:  // d, qs[16]
        if (i == 0) put_half(b, 0, 0.01f);
        x = half_at(b, 0) * kIq4[code_at(b, 2, i)];
        break;
      case TensorType::MXFP4:  // e, qs[16]; the OCP value 2^(e-127) · E2M1
        if (i == 0) b[0] = static_cast<uint8_t>(120 + seed % 16);
        x = std::ldexp(1.0, b[0] - 127) * e2m1(code_at(b, 1, i));
        break;
      case TensorType::Q2_K: {  // scales[16], qs[64], d, dmin
        if (i == 0) put_half(b, 80, 0.0625f), put_half(b, 82, 0.03125f);
        const int q = b[16 + 32 * half + l] >> (2 * s) & 3;
        x = half_at(b, 80) * (b[sub16] & 15) * q - half_at(b, 82) * (b[sub16] >> 4);
        break;
      }
      case TensorType::Q3_K: {  // hmask[32], qs[64], scales[12], d
        if (i == 0) put_half(b, 108, 0.02f);
        const int low = b[32 + 32 * half + l] >> (2 * s) & 3, high = b[l] >> (4 * half + s) & 1;
        const int j = sub16;
        const int sc = ((j < 8 ? b[96 + j] & 15 : b[96 + j - 8] >> 4) | ((b[96 + 8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        x = half_at(b, 108) * sc * (low + 4 * high - 4);
        break;
      }
      case TensorType::Q5_K: {  // d, dmin, scales[12], qh[32], qs[128]
        if (i == 0) put_half(b, 0, 0.015f), put_half(b, 2, 0.04f);
        const int j = i / 32;
        const int q = (b[48 + 32 * (j / 2) + l] >> (4 * (j % 2)) & 15) | (b[16 + l] >> j & 1) << 4;
        auto [sc, mn] = scale_min_k4(b, 4, j);
        x = half_at(b, 0) * sc * q - half_at(b, 2) * mn;
        break;
      }
      case TensorType::IQ4_XS: {  // d, scales_h (u16), scales_l[4], qs[128]
        if (i == 0) put_half(b, 0, -0.003f);
        const int j = i / 32;
        const int scales_h = b[2] | b[3] << 8;
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((scales_h >> (2 * j)) & 3) << 4;
        x = half_at(b, 0) * (ls - 32) * kIq4[code_at(b, 8 + 16 * j, l)];
        break;
      }
      default: ADD_FAILURE() << "no hand-made block for " << type_name(type);
    }
  }
  return h;
}

class HandMadeBlocks : public ::testing::TestWithParam<TensorType> {};

TEST_P(HandMadeBlocks, DequantizeAsTheFormatDefines) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    HandMade h = hand_made(GetParam(), seed);
    std::vector<float> out(h.expected.size());
    dequantize_row_reference(h.type, h.block.data(), out.data(), static_cast<int64_t>(out.size()));
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], h.expected[i], 1e-6 * std::fabs(h.expected[i]) + 1e-30)
          << type_name(h.type) << " seed " << seed << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HandMadeBlocks,
                         ::testing::Values(TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K,
                                           TensorType::Q3_K, TensorType::Q5_K, TensorType::IQ4_NL, TensorType::IQ4_XS,
                                           TensorType::MXFP4),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(Quant, Mxfp4ScalesCoverEveryExponent) {
  // e = 0 and 1 give float subnormals (2^-128, 2^-127); e = 255 is 2^127 (ggml reads no NaN).
  for (int e = 0; e < 256; ++e) EXPECT_EQ(mxfp4_scale(static_cast<uint8_t>(e)), std::ldexp(1.0, e - 128)) << e;
  // The quantizer's exponent never clamps the block's largest magnitude.
  std::vector<float> x(32, 0.0f);
  x[3] = -6.0f;   // exactly the top E2M1 value at e = 127
  x[20] = 1.0f;
  BlockMXFP4 block;
  quantize_row_reference(TensorType::MXFP4, x.data(), &block, 32);
  EXPECT_EQ(block.e, 127);
  float back[32];
  dequantize_row_reference(TensorType::MXFP4, &block, back, 32);
  EXPECT_EQ(back[3], -6.0f);
  EXPECT_EQ(back[20], 1.0f);
}

TEST(DType, TypeCodesNamesAndSizesFollowGgml) {
  struct Expected {
    uint32_t code;
    const char* name;
    int64_t elements;
    size_t bytes;
  };
  for (Expected e : {Expected{3, "q4_1", 32, 20}, Expected{6, "q5_0", 32, 22}, Expected{7, "q5_1", 32, 24},
                     Expected{10, "q2_K", 256, 84}, Expected{11, "q3_K", 256, 110}, Expected{13, "q5_K", 256, 176},
                     Expected{20, "iq4_nl", 32, 18}, Expected{23, "iq4_xs", 256, 136}, Expected{39, "mxfp4", 32, 17}}) {
    std::optional<TensorType> type = tensor_type_from_code(e.code);
    ASSERT_TRUE(type) << e.code;
    EXPECT_EQ(type_name(*type), e.name);
    EXPECT_EQ(type_traits(*type).block_elements, e.elements) << e.name;
    EXPECT_EQ(type_traits(*type).block_bytes, e.bytes) << e.name;
  }
  EXPECT_FALSE(tensor_type_from_code(15));  // q8_K: activations only
  EXPECT_FALSE(tensor_type_from_code(16));  // iq2_xxs
}

TEST(DType, UnsupportedTypeNamesTheCodeAndTheSupportedTypes) {
  try {
    type_traits(static_cast<TensorType>(16));
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[dtype] unsupported tensor type code 16"), std::string::npos) << what;
    for (const char* listed : {"q4_0 (2)", "q4_1 (3)", "q2_K (10)", "q5_K (13)", "iq4_xs (23)", "mxfp4 (39)"})
      EXPECT_NE(what.find(listed), std::string::npos) << listed << " in " << what;
    EXPECT_EQ(what.find("q8_K"), std::string::npos) << what;
  }
}

TEST(Quant, PartialBlocksAreFormatErrors) {
  float x[48] = {};
  uint8_t out[256];
  EXPECT_THROW(quantize_row_reference(TensorType::Q4_0, x, out, 48), FormatError);
  EXPECT_THROW(dequantize_row_reference(TensorType::Q6_K, out, x, 48), FormatError);
  EXPECT_THROW(quantize_row_reference(TensorType::MXFP4, x, out, 40), FormatError);
  EXPECT_THROW(dequantize_row_reference(TensorType::IQ4_XS, out, x, 32), FormatError);
}

}  // namespace
}  // namespace orchard::core
