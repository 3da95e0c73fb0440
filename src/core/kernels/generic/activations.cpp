#include <bit>
#include <cstring>

#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {
namespace {

// Both quantizers are written so the compiler vectorizes them (a decode step would otherwise
// spend longer quantizing than in a small matrix's kernel): the magnitude's bits compare like
// the magnitude, and adding 1.5 · 2^23 rounds to the nearest integer (ties to even, as the
// reference quantizer's nearbyint) in the low mantissa bits.
template <int N>
float absmax(const float* x) {
  uint32_t max_bits = 0;
  for (int i = 0; i < N; ++i) {
    uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFF;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return std::bit_cast<float>(max_bits);
}

// q[i] = round(x[i] · 127 / amax), and the scale amax / 127.
template <int N>
float quantize_block(const float* x, int32_t (&q)[N]) {
  const float amax = absmax<N>(x);
  const float inv = amax > 0 ? 127 / amax : 0;
  for (int i = 0; i < N; ++i) {
    float shifted = x[i] * inv + 12582912.0f;
    q[i] = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
  }
  return amax / 127;
}

}  // namespace

void quantize_act_q8_0(const float* x, ActQ8_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += 32) {
    int32_t q[32];
    out[b].d = quantize_block(x, q);
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].qs[i] = static_cast<int8_t>(q[i]);
      sum += q[i];
    }
    out[b].sum = sum;
  }
}

// The reference quantizer's arithmetic (same amax, scale and rounding, so the same bytes).
void quantize_act_q8_k(const float* x, BlockQ8_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    int32_t q[kQK_K];
    out[b].d = quantize_block(x, q);
    for (int i = 0; i < kQK_K; ++i) out[b].qs[i] = static_cast<int8_t>(q[i]);
    for (int j = 0; j < kQK_K / 16; ++j) {
      int32_t sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) sum += q[i];
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace orchard::core::kernels
