#pragma once
// The e^x of the model's vector code (softmax, SiLU, attention), shared so that every attention
// path exponentiates alike.
#include <bit>
#include <cstdint>

namespace orchard::model::ops {

// e^x within a few float ulps, written so that a loop of it vectorizes at any width (std::exp
// is a libm call per element, which kept softmax and SiLU scalar: a tenth of a prompt's time).
// Inputs are clamped to [-87.3, 88.3], where e^x and the 2^n below stay normal floats; the
// clamp passes NaN through. x = n·ln2 + r with |r| ≤ ln2/2, and e^r is its Taylor series to
// r^7 (the next term is below 6e-9 relative). The clamp's compares are if-converted into vector
// selects only under -fno-trapping-math (set for the files that use it) or with AVX-512's masks: the AVX2 and
// baseline clones of the loops around this were scalar before.
[[gnu::always_inline]] inline float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  // Adding 1.5·2^23 rounds to an integer n and leaves it in the low bits of the mantissa.
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  // ln 2 split in two so that n·ln2_hi is exact.
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n: n + 127 moved into the exponent field (the shift drops t's other bits).
  const float scale = std::bit_cast<float>((std::bit_cast<uint32_t>(t) + 127u) << 23);
  return p * scale;
}

}  // namespace orchard::model::ops
