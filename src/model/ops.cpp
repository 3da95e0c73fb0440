#include "model/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace orchard::model::ops {
namespace {

// Attention and SiLU are hot enough during prompt processing to want the widest vectors the
// CPU has; everything else auto-vectorizes fine at the baseline ISA.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_X86_DISPATCH 1
const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
const bool kHasAvx512 = __builtin_cpu_supports("avx512f");
#endif

// e^x within a few float ulps, written so that a loop of it vectorizes at any width (std::exp
// is a libm call per element, which kept softmax and SiLU scalar: a tenth of a prompt's time).
// Inputs are clamped to [-87.3, 88.3], where e^x and the 2^n below stay normal floats; the
// clamp passes NaN through. x = n·ln2 + r with |r| ≤ ln2/2, and e^r is its Taylor series to
// r^7 (the next term is below 6e-9 relative).
[[gnu::always_inline]] inline float exp_approx(float x) {
  x = std::clamp(x, -87.3f, 88.3f);
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

// gate[i] = silu(gate[i]) * up[i], inlined into each ISA's clone like the attention loops.
// Below -87, where e^-x is clamped, silu(x) = x·e^x is under 1e-35: it is taken as 0 there.
[[gnu::always_inline]] inline void silu_mul_loop(float* __restrict gate, const float* __restrict up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float silu = x / (1.0f + exp_approx(-x));
    gate[i] = (x < -87.0f ? 0.0f : silu) * up[i];
  }
}

// Written as position-contiguous multiply-adds so that the compiler vectorizes each loop at
// whatever width the clone below is compiled for (hence always inlined into each clone).
[[gnu::always_inline]] inline void attend_group_loops(const float* __restrict q, int32_t group, int32_t head_dim,
                               const float* __restrict keys, int64_t key_stride, const float* __restrict values,
                               int64_t value_stride, int32_t n_keys, float* __restrict scores,
                               float* __restrict out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int32_t g = 0; g < group; ++g) {
    const float* qg = q + static_cast<size_t>(g) * head_dim;
    for (int32_t j = 0; j < n_keys; ++j) scores[j] = 0.0f;
    for (int32_t d = 0; d < head_dim; ++d) {
      const float qd = qg[d] * scale;
      const float* k = keys + d * key_stride;
      for (int32_t j = 0; j < n_keys; ++j) scores[j] += qd * k[j];
    }
    float max = scores[0];
    for (int32_t j = 1; j < n_keys; ++j) max = std::max(max, scores[j]);
    float sum = 0.0f;
    for (int32_t j = 0; j < n_keys; ++j) {
      scores[j] = exp_approx(scores[j] - max);
      sum += scores[j];
    }
    float* o = out + static_cast<size_t>(g) * head_dim;
    for (int32_t d = 0; d < head_dim; ++d) o[d] = 0.0f;
    const float inv = 1.0f / sum;
    for (int32_t j = 0; j < n_keys; ++j) {
      const float p = scores[j] * inv;
      const float* v = values + j * value_stride;
      for (int32_t d = 0; d < head_dim; ++d) o[d] += p * v[d];
    }
  }
}

#ifdef ORCHARD_X86_DISPATCH
__attribute__((target("avx512f"))) void attend_group_avx512(const float* q, int32_t group, int32_t head_dim,
                                                            const float* keys, int64_t key_stride, const float* values,
                                                            int64_t value_stride, int32_t n_keys, float* scores,
                                                            float* out) {
  attend_group_loops(q, group, head_dim, keys, key_stride, values, value_stride, n_keys, scores, out);
}
__attribute__((target("avx2,fma"))) void attend_group_avx2(const float* q, int32_t group, int32_t head_dim,
                                                           const float* keys, int64_t key_stride, const float* values,
                                                           int64_t value_stride, int32_t n_keys, float* scores,
                                                           float* out) {
  attend_group_loops(q, group, head_dim, keys, key_stride, values, value_stride, n_keys, scores, out);
}
__attribute__((target("avx512f"))) void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  silu_mul_loop(gate, up, n);
}
__attribute__((target("avx2,fma"))) void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  silu_mul_loop(gate, up, n);
}
#endif

}  // namespace

void attend_group(const float* q, int32_t group, int32_t head_dim, const float* keys, int64_t key_stride,
                  const float* values, int64_t value_stride, int32_t n_keys, float* scores, float* out) {
#ifdef ORCHARD_X86_DISPATCH
  if (kHasAvx512)
    return attend_group_avx512(q, group, head_dim, keys, key_stride, values, value_stride, n_keys, scores, out);
  if (kHasAvx2) return attend_group_avx2(q, group, head_dim, keys, key_stride, values, value_stride, n_keys, scores, out);
#endif
  attend_group_loops(q, group, head_dim, keys, key_stride, values, value_stride, n_keys, scores, out);
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope_angles(int32_t pos, const ModelConfig& config, const float* freq_factors, float* cos, float* sin) {
  const int32_t dims = config.rope_dims;
  const double position = static_cast<double>(pos) * config.rope_freq_scale;
  for (int32_t i = 0; i < dims / 2; ++i) {
    double freq = std::pow(static_cast<double>(config.rope_theta), -2.0 * i / dims);
    if (freq_factors) freq /= freq_factors[i];
    cos[i] = static_cast<float>(std::cos(position * freq));
    sin[i] = static_cast<float>(std::sin(position * freq));
  }
}

void rope(float* head, const float* cos, const float* sin, int32_t rope_dims, RopeOrdering ordering) {
  const int32_t half = rope_dims / 2;
  for (int32_t i = 0; i < half; ++i) {
    // Normal ordering rotates neighbours; NeoX rotates the two halves of the rotated part.
    const int32_t a = ordering == RopeOrdering::Normal ? 2 * i : i;
    const int32_t b = ordering == RopeOrdering::Normal ? 2 * i + 1 : i + half;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cos[i] - x1 * sin[i];
    head[b] = x0 * sin[i] + x1 * cos[i];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
#ifdef ORCHARD_X86_DISPATCH
  if (kHasAvx512) return silu_mul_avx512(gate, up, n);
  if (kHasAvx2) return silu_mul_avx2(gate, up, n);
#endif
  silu_mul_loop(gate, up, n);
}

}  // namespace orchard::model::ops
