// half/bfloat16 conversions, exhaustively over all 65536 bit patterns, against plain formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/quant.h"

namespace orchard::core {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The textbook definition: (-1)^s · 2^(e-15) · (1 + m/1024), subnormals 2^-14 · m/1024.
double half_formula(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  if (e == 31) magnitude = m ? NAN : INFINITY;
  return sign ? -magnitude : magnitude;
}

TEST(Half, ToFloatMatchesFormulaForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = half_to_float(static_cast<Half>(h));
    double expected = half_formula(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(bits_of(f) >> 31, h >> 15) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << h;
      ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << h;
    }
  }
}

TEST(Half, RoundTripIsIdentityForAllNonNaN) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (std::isnan(half_formula(static_cast<uint16_t>(h)))) {
      ASSERT_TRUE(std::isnan(half_to_float(float_to_half(half_to_float(static_cast<Half>(h)))))) << h;
      continue;
    }
    ASSERT_EQ(float_to_half(half_to_float(static_cast<Half>(h))), h) << h;
  }
}

// Between two neighbouring finite halves a and a+1 (same sign): values below the midpoint go
// to a, above to a+1, the midpoint itself to whichever has an even mantissa.
TEST(Half, RoundsToNearestEvenAtEveryMidpoint) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7BFF; ++h) {  // 0x7BFF's upper neighbour is inf: below
      double lo = half_formula(static_cast<uint16_t>(h)), hi = half_formula(static_cast<uint16_t>(h + 1));
      auto mid = static_cast<float>((lo + hi) / 2);  // exact: at most 12 significant bits
      Half even = (h & 1) ? static_cast<Half>(h + 1) : static_cast<Half>(h);
      float signed_mid = sign ? -mid : mid;
      ASSERT_EQ(float_to_half(signed_mid), even | sign) << h;
      ASSERT_EQ(float_to_half(std::nextafter(signed_mid, 0.0f)), h | sign) << h;
      ASSERT_EQ(float_to_half(std::nextafter(signed_mid, sign ? -INFINITY : INFINITY)), (h + 1) | sign) << h;
    }
  }
  // Past the largest half (65504) by half a step (65520) is inf, as the next value up would be.
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(float_to_half(1e10f), 0x7C00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_half(1e-10f), 0);
}

TEST(BFloat16, ToFloatIsTheHighHalfForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bits_of(bf16_to_float(static_cast<BHalf>(h))), h << 16) << h;
}

TEST(BFloat16, RoundsToNearestEven) {
  // Every bf16 value, its midpoints with the next, and a step either side of them.
  for (uint32_t h = 0; h < 65536; ++h) {
    float v = bf16_to_float(static_cast<BHalf>(h));
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(bf16_to_float(float_to_bf16(v)))) << h;
      continue;
    }
    ASSERT_EQ(float_to_bf16(v), h) << h;
    if ((h & 0x7FFF) >= 0x7F80) continue;  // inf: no next value
    uint32_t mid_bits = h << 16 | 0x8000;
    float mid;
    std::memcpy(&mid, &mid_bits, sizeof mid);
    ASSERT_EQ(float_to_bf16(mid), (h & 1) ? h + 1 : h) << h;
    uint32_t below = mid_bits - 1, above = mid_bits + 1;
    float fb, fa;
    std::memcpy(&fb, &below, sizeof fb);
    std::memcpy(&fa, &above, sizeof fa);
    ASSERT_EQ(float_to_bf16(fb), h) << h;
    ASSERT_EQ(float_to_bf16(fa), h + 1) << h;
  }
}

}  // namespace
}  // namespace orchard::core
