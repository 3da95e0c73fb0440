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
[[gnu::always_inline]] inline float absmax(const float* x) {
  uint32_t max_bits = 0;
  for (int i = 0; i < N; ++i) {
    uint32_t bits = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFF;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return std::bit_cast<float>(max_bits);
}

// q[i] = round(x[i] · 127 / amax), and the scale amax / 127.
template <int N>
[[gnu::always_inline]] inline float quantize_block(const float* x, int32_t (&q)[N]) {
  const float amax = absmax<N>(x);
  const float inv = amax > 0 ? 127 / amax : 0;
  for (int i = 0; i < N; ++i) {
    float shifted = x[i] * inv + 12582912.0f;
    q[i] = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
  }
  return amax / 127;
}

[[gnu::always_inline]] inline void q8_0_blocks(const float* x, ActQ8_0* out, int64_t n_blocks) {
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
[[gnu::always_inline]] inline void q8_k_blocks(const float* x, BlockQ8_K* out, int64_t n_blocks) {
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

// A decode step quantizes each matrix's input row on the main thread while the other threads
// wait (on moe-3b 13k values a token): at the baseline ISA that took 0.73 ns a value, the AVX2
// clone 0.3. Without FMA in the clone's target, `x · inv + 1.5 · 2^23` cannot be contracted
// into one rounding, so both clones give the same bytes.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_X86_DISPATCH 1
const bool kHasAvx2 = __builtin_cpu_supports("avx2");
__attribute__((target("avx2"))) void q8_0_blocks_avx2(const float* x, ActQ8_0* out, int64_t n_blocks) {
  q8_0_blocks(x, out, n_blocks);
}
__attribute__((target("avx2"))) void q8_k_blocks_avx2(const float* x, BlockQ8_K* out, int64_t n_blocks) {
  q8_k_blocks(x, out, n_blocks);
}
#endif

}  // namespace

void quantize_act_q8_0(const float* x, ActQ8_0* out, int64_t n_blocks) {
#ifdef ORCHARD_X86_DISPATCH
  if (kHasAvx2) return q8_0_blocks_avx2(x, out, n_blocks);
#endif
  q8_0_blocks(x, out, n_blocks);
}

void quantize_act_q8_k(const float* x, BlockQ8_K* out, int64_t n_blocks) {
#ifdef ORCHARD_X86_DISPATCH
  if (kHasAvx2) return q8_k_blocks_avx2(x, out, n_blocks);
#endif
  q8_k_blocks(x, out, n_blocks);
}

}  // namespace orchard::core::kernels
