#include <bit>
#include <cstring>

#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

void quantize_act_q8_0(const float* x, ActQ8_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 32) {
    // Written so the compiler vectorizes it: the magnitude's bits compare like the magnitude,
    // and adding 1.5 · 2^23 rounds to the nearest integer (ties to even) in the low mantissa bits.
    uint32_t max_bits = 0;
    for (int i = 0; i < 32; ++i) {
      uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFF;
      max_bits = bits > max_bits ? bits : max_bits;
    }
    float amax = std::bit_cast<float>(max_bits);
    float inv = amax > 0 ? 127 / amax : 0;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      float shifted = x[i] * inv + 12582912.0f;
      auto q = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
      out[b].qs[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = amax / 127;
    out[b].sum = sum;
  }
}

void quantize_act_q8_k(const float* x, BlockQ8_K* out, int64_t n_blocks) {
  // The reference quantizer's arithmetic (same amax, scale, and ties-to-even rounding, so the
  // same bytes), written like quantize_act_q8_0 so the compiler vectorizes it: a decode step
  // would otherwise spend longer here than in a small matrix's kernel.
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    uint32_t max_bits = 0;
    for (int i = 0; i < kQK_K; ++i) {
      uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFF;
      max_bits = bits > max_bits ? bits : max_bits;
    }
    float amax = std::bit_cast<float>(max_bits);
    float inv = amax > 0 ? 127 / amax : 0;
    int32_t q[kQK_K];
    for (int i = 0; i < kQK_K; ++i) {
      float shifted = x[i] * inv + 12582912.0f;
      q[i] = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
    }
    for (int i = 0; i < kQK_K; ++i) out[b].qs[i] = static_cast<int8_t>(q[i]);
    for (int j = 0; j < kQK_K / 16; ++j) {
      int32_t sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) sum += q[i];
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
    out[b].d = amax / 127;
  }
}

}  // namespace orchard::core::kernels
