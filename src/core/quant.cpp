#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace orchard::core {
namespace {

uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float bits_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

void check_whole_blocks(TensorType type, int64_t n) {
  const TypeTraits& traits = type_traits(type);
  if (n < 0 || n % traits.block_elements != 0)
    throw FormatError(error_message("kernels", "a {} row needs a multiple of {} elements, got {}", traits.name,
                                    traits.block_elements, n));
}

// The 4-bit code (0..15) of element i of a 32-element block (byte i % 16, low nibble first).
int nibble32(const uint8_t* qs, int i) { return qs[i % 16] >> (4 * (i / 16)) & 0x0F; }

void pack_nibbles32(const uint8_t* codes, uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((codes[i] & 0x0F) | (codes[i + 16] & 0x0F) << 4);
}

// Q5_0 / Q5_1: the low nibbles as Q4_0's, bit 4 of element i in bit i of qh.
void pack_q5(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
  pack_nibbles32(q, qs);
  std::memset(qh, 0, 4);
  for (int i = 0; i < 32; ++i) qh[i / 8] = static_cast<uint8_t>(qh[i / 8] | (q[i] >> 4 & 1) << (i % 8));
}

// Symmetric integer quants in [low, high] (low = -high - 1): the value of largest magnitude maps
// to `low` exactly, so its sign sets the scale's sign and every level is usable. Returns the
// scale; q gets the quants.
float symmetric_quants(const float* x, int n, int low, int high, int* q) {
  float extreme = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  float d = extreme / static_cast<float>(low);
  float inv = d != 0 ? 1 / d : 0;
  for (int i = 0; i < n; ++i) q[i] = std::clamp(nearest_int(x[i] * inv), low, high);
  return d;
}

void quantize_q4_0(const float* x, BlockQ4_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK4_0) {
    int q[kQK4_0];
    out[b].d = float_to_half(symmetric_quants(x, kQK4_0, -8, 7, q));
    uint8_t codes[kQK4_0];
    for (int i = 0; i < kQK4_0; ++i) codes[i] = static_cast<uint8_t>(q[i] + 8);
    pack_nibbles32(codes, out[b].qs);
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK32) {
    int q[kQK32];
    out[b].d = float_to_half(symmetric_quants(x, kQK32, -16, 15, q));
    uint8_t codes[kQK32];
    for (int i = 0; i < kQK32; ++i) codes[i] = static_cast<uint8_t>(q[i] + 16);
    pack_q5(codes, out[b].qh, out[b].qs);
  }
}

// Q4_1 / Q5_1: x ≈ d · q + m over the block's range [min, max], q in 0..levels, computed
// against the halves actually stored so the quants compensate for their rounding.
void affine_quants(const float* x, int levels, Half& d_out, Half& m_out, uint8_t* q) {
  const auto [lo, hi] = std::minmax_element(x, x + kQK32);
  d_out = float_to_half((*hi - *lo) / static_cast<float>(levels));
  m_out = float_to_half(*lo);
  const float d = half_to_float(d_out), m = half_to_float(m_out);
  for (int i = 0; i < kQK32; ++i)
    q[i] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest_int((x[i] - m) / d), 0, levels) : 0);
}

void quantize_q4_1(const float* x, BlockQ4_1* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK32) {
    uint8_t q[kQK32];
    affine_quants(x, 15, out[b].d, out[b].m, q);
    pack_nibbles32(q, out[b].qs);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK32) {
    uint8_t q[kQK32];
    affine_quants(x, 31, out[b].d, out[b].m, q);
    pack_q5(q, out[b].qh, out[b].qs);
  }
}

// Index of the entry of `values` (16 of them, times `scale`) nearest to v.
int nearest_code(const int8_t* values, float scale, float v) {
  int best = 0;
  float best_error = INFINITY;
  for (int c = 0; c < 16; ++c) {
    float error = std::fabs(v - scale * static_cast<float>(values[c]));
    if (error < best_error) {
      best = c;
      best_error = error;
    }
  }
  return best;
}

// IQ4_NL: the value of largest magnitude maps to the table's -127 exactly (so its sign sets
// the scale's); every element takes the nearest of the 16 scaled values.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK32) {
    float extreme = 0;
    for (int i = 0; i < kQK32; ++i)
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    out[b].d = float_to_half(extreme / -127);
    const float d = half_to_float(out[b].d);
    uint8_t codes[kQK32];
    for (int i = 0; i < kQK32; ++i) codes[i] = static_cast<uint8_t>(nearest_code(kIq4Values, d, x[i]));
    pack_nibbles32(codes, out[b].qs);
  }
}

// MXFP4: the smallest shared exponent at which the block's largest magnitude is not clamped
// (6 · 2^(e - 127) ≥ amax), then the nearest E2M1 value for each element.
void quantize_mxfp4(const float* x, BlockMXFP4* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK32) {
    float amax = 0;
    for (int i = 0; i < kQK32; ++i) amax = std::max(amax, std::fabs(x[i]));
    int e = 0;
    while (e < 254 && 12 * mxfp4_scale(static_cast<uint8_t>(e)) < amax) ++e;
    out[b].e = static_cast<uint8_t>(e);
    const float d = mxfp4_scale(out[b].e);
    uint8_t codes[kQK32];
    for (int i = 0; i < kQK32; ++i) codes[i] = static_cast<uint8_t>(nearest_code(kMxfp4Values, d, x[i]));
    pack_nibbles32(codes, out[b].qs);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK8_0) {
    float amax = 0;
    for (int i = 0; i < kQK8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d = amax / 127;
    float inv = d != 0 ? 1 / d : 0;
    out[b].d = float_to_half(d);
    for (int i = 0; i < kQK8_0; ++i) out[b].qs[i] = static_cast<int8_t>(std::clamp(nearest_int(x[i] * inv), -127, 127));
  }
}

// The K-quants with mins (Q2_K, Q4_K, Q5_K): per sub-block, x ≈ scale · q - min with q in
// 0..levels and min ≥ 0 (the range is widened to include 0 so the min is never negative);
// scales and mins are themselves quantized to 0..scale_max against the super-block's d and
// dmin. The quants are computed against the stored scales, so they compensate for the scales'
// own rounding.
void k_affine_quants(const float* x, int n_sub, int sub_len, int levels, int scale_max, Half& d_out, Half& dmin_out,
                     uint8_t* sc, uint8_t* mn, uint8_t* q) {
  float scale[16], min[16], max_scale = 0, max_min = 0;
  for (int j = 0; j < n_sub; ++j) {
    const float* s = x + sub_len * j;
    float lo = 0, hi = s[0];
    for (int i = 0; i < sub_len; ++i) {
      lo = std::min(lo, s[i]);
      hi = std::max(hi, s[i]);
    }
    scale[j] = (hi - lo) / static_cast<float>(levels);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  d_out = float_to_half(max_scale / static_cast<float>(scale_max));
  dmin_out = float_to_half(max_min / static_cast<float>(scale_max));
  const float dq = half_to_float(d_out), dminq = half_to_float(dmin_out);
  for (int j = 0; j < n_sub; ++j) {
    sc[j] = static_cast<uint8_t>(dq > 0 ? std::clamp(nearest_int(scale[j] / dq), 0, scale_max) : 0);
    mn[j] = static_cast<uint8_t>(dminq > 0 ? std::clamp(nearest_int(min[j] / dminq), 0, scale_max) : 0);
    const float step = dq * sc[j], offset = dminq * mn[j];
    for (int i = sub_len * j; i < sub_len * (j + 1); ++i)
      q[i] = static_cast<uint8_t>(step > 0 ? std::clamp(nearest_int((x[i] + offset) / step), 0, levels) : 0);
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    uint8_t sc[8], mn[8], q[kQK_K];
    k_affine_quants(x, 8, 32, 15, 63, out[b].d, out[b].dmin, sc, mn, q);
    pack_q4_k_scales(sc, mn, out[b].scales);
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i) out[b].qs[32 * c + i] = static_cast<uint8_t>(q[64 * c + i] | q[64 * c + 32 + i] << 4);
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    uint8_t sc[8], mn[8], q[kQK_K];
    k_affine_quants(x, 8, 32, 31, 63, out[b].d, out[b].dmin, sc, mn, q);
    pack_q4_k_scales(sc, mn, out[b].scales);
    std::memset(out[b].qh, 0, sizeof out[b].qh);
    for (int i = 0; i < kQK_K; ++i) {
      const int j = i / 32, l = i % 32;
      uint8_t& low = out[b].qs[32 * (j / 2) + l];
      low = static_cast<uint8_t>(j % 2 ? low | (q[i] & 0x0F) << 4 : q[i] & 0x0F);
      out[b].qh[l] = static_cast<uint8_t>(out[b].qh[l] | (q[i] >> 4) << j);
    }
  }
}

void quantize_q2_k(const float* x, BlockQ2_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    uint8_t sc[16], mn[16], q[kQK_K];
    k_affine_quants(x, 16, 16, 3, 15, out[b].d, out[b].dmin, sc, mn, q);
    for (int j = 0; j < 16; ++j) out[b].scales[j] = static_cast<uint8_t>(sc[j] | mn[j] << 4);
    std::memset(out[b].qs, 0, sizeof out[b].qs);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = i % 128 / 32, l = i % 32;
      out[b].qs[32 * h + l] = static_cast<uint8_t>(out[b].qs[32 * h + l] | q[i] << (2 * s));
    }
  }
}

// The symmetric K-quants (Q3_K, Q6_K): 16 sub-blocks of 16, each as symmetric_quants gives
// (its extreme maps to q_low), with the sub-block scales quantized to [sc_low, sc_high]
// against d = max |scale| / sc_high, and the quants recomputed against the stored scales.
void k_symmetric_quants(const float* x, int q_low, int q_high, int sc_low, int sc_high, Half& d_out, int* sc, int* q) {
  float scale[16], max_scale = 0;
  for (int j = 0; j < 16; ++j) {
    float extreme = 0;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(x[16 * j + i]) > std::fabs(extreme)) extreme = x[16 * j + i];
    scale[j] = extreme / static_cast<float>(q_low);
    max_scale = std::max(max_scale, std::fabs(scale[j]));
  }
  d_out = float_to_half(max_scale / static_cast<float>(sc_high));
  const float dq = half_to_float(d_out);
  for (int j = 0; j < 16; ++j) {
    sc[j] = dq > 0 ? std::clamp(nearest_int(scale[j] / dq), sc_low, sc_high) : 0;
    const float step = dq * static_cast<float>(sc[j]);
    for (int i = 16 * j; i < 16 * j + 16; ++i) q[i] = step != 0 ? std::clamp(nearest_int(x[i] / step), q_low, q_high) : 0;
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    int sc[16], q[kQK_K];
    k_symmetric_quants(x, -32, 31, -127, 127, out[b].d, sc, q);
    for (int j = 0; j < 16; ++j) out[b].scales[j] = static_cast<int8_t>(sc[j]);
    std::memset(out[b].qh, 0, sizeof out[b].qh);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, e = i % 128, u = q[i] + 32;
      uint8_t& low = out[b].ql[64 * h + e % 64];
      if (e < 64) low = static_cast<uint8_t>(u & 0x0F);
      else low = static_cast<uint8_t>(low | (u & 0x0F) << 4);
      out[b].qh[32 * h + e % 32] = static_cast<uint8_t>(out[b].qh[32 * h + e % 32] | (u >> 4) << (2 * (e / 32)));
    }
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    int sc[16], q[kQK_K];
    k_symmetric_quants(x, -4, 3, -32, 31, out[b].d, sc, q);
    std::memset(out[b].scales, 0, sizeof out[b].scales);
    for (int j = 0; j < 16; ++j) set_q3_k_scale(out[b], j, sc[j]);
    std::memset(out[b].qs, 0, sizeof out[b].qs);
    std::memset(out[b].hmask, 0, sizeof out[b].hmask);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, s = i % 128 / 32, l = i % 32, u = q[i] + 4;
      out[b].qs[32 * h + l] = static_cast<uint8_t>(out[b].qs[32 * h + l] | (u & 3) << (2 * s));
      out[b].hmask[l] = static_cast<uint8_t>(out[b].hmask[l] | (u >> 2) << (4 * h + s));
    }
  }
}

// IQ4_XS: per sub-block of 32 a signed scale as IQ4_NL's, quantized to -32..31 against
// d = -(the scale of largest magnitude) / 32 (so that one is exact); then each element takes
// the nearest of the 16 values times its stored sub-block scale.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    float scale[8], extreme_scale = 0;
    for (int j = 0; j < 8; ++j) {
      float extreme = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i)
        if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
      scale[j] = extreme / -127;
      if (std::fabs(scale[j]) > std::fabs(extreme_scale)) extreme_scale = scale[j];
    }
    out[b].d = float_to_half(extreme_scale / -32);
    const float d = half_to_float(out[b].d);
    out[b].scales_h = 0;
    std::memset(out[b].scales_l, 0, sizeof out[b].scales_l);
    for (int j = 0; j < 8; ++j) {
      const int ls = d != 0 ? std::clamp(nearest_int(scale[j] / d), -32, 31) : 0;
      set_iq4_xs_scale(out[b], j, ls);
      uint8_t codes[32];
      for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(nearest_code(kIq4Values, d * static_cast<float>(ls), x[32 * j + i]));
      pack_nibbles32(codes, out[b].qs + 16 * j);
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    float amax = 0;
    for (int i = 0; i < kQK_K; ++i) amax = std::max(amax, std::fabs(x[i]));
    out[b].d = amax / 127;
    float inv = amax > 0 ? 127 / amax : 0;
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        out[b].qs[i] = static_cast<int8_t>(std::clamp(nearest_int(x[i] * inv), -127, 127));
        sum += out[b].qs[i];
      }
      out[b].bsums[j] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace

// Q4_K keeps 8 scales and 8 mins of 6 bits in 12 bytes: bytes 0-3 hold scales 0-3, bytes 4-7
// mins 0-3, bytes 8-11 the low nibbles of scales 4-7 (low) and mins 4-7 (high); the top two
// bits of scales 4-7 and mins 4-7 ride in the top bits of bytes 0-3 and 4-7.
void pack_q4_k_scales(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((scales[j] & 63) | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((mins[j] & 63) | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((mins[j + 4] & 0x0F) << 4));
  }
}

void unpack_q4_k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
    scales[j + 4] = static_cast<uint8_t>((packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4));
    mins[j + 4] = static_cast<uint8_t>((packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4));
  }
}

// Q6_K stores element e of each 128-element half h as: low nibble in ql[64h + (e % 64)]
// (low half of the byte for e < 64, high half otherwise), top two bits in qh[32h + e % 32] at
// bit 2 * (e / 32).
int q6_k_quant(const BlockQ6_K& block, int i) {
  int h = i / 128, e = i % 128;
  int low = block.ql[64 * h + e % 64] >> (e < 64 ? 0 : 4) & 0x0F;
  int high = block.qh[32 * h + e % 32] >> (2 * (e / 32)) & 3;
  return low | high << 4;
}

int q5_quant(const uint8_t* qh, const uint8_t* qs, int i) {
  const int low = qs[i % 16] >> (4 * (i / 16)) & 0x0F;
  const int high = qh[i / 8] >> (i % 8) & 1;  // bit i of the little-endian word
  return low | high << 4;
}

int q2_k_quant(const BlockQ2_K& block, int i) {
  const int h = i / 128, s = i % 128 / 32, l = i % 32;
  return block.qs[32 * h + l] >> (2 * s) & 3;
}

int q3_k_quant(const BlockQ3_K& block, int i) {
  const int h = i / 128, s = i % 128 / 32, l = i % 32;
  const int low = block.qs[32 * h + l] >> (2 * s) & 3;
  const int high = block.hmask[l] >> (4 * h + s) & 1;
  return (low | high << 2) - 4;
}

// Q3_K's 12 scale bytes: scale j's low 4 bits are the low (j < 8) or high nibble of byte j % 8,
// its top 2 bits are bits 2 (j / 4)..2 (j / 4) + 1 of byte 8 + j % 4; stored plus 32.
int q3_k_scale(const BlockQ3_K& block, int j) {
  const int low = block.scales[j % 8] >> (4 * (j / 8)) & 0x0F;
  const int high = block.scales[8 + j % 4] >> (2 * (j / 4)) & 3;
  return (low | high << 4) - 32;
}

void set_q3_k_scale(BlockQ3_K& block, int j, int scale) {
  const int u = scale + 32;
  block.scales[j % 8] = static_cast<uint8_t>(block.scales[j % 8] | (u & 0x0F) << (4 * (j / 8)));
  block.scales[8 + j % 4] = static_cast<uint8_t>(block.scales[8 + j % 4] | (u >> 4) << (2 * (j / 4)));
}

int q5_k_quant(const BlockQ5_K& block, int i) {
  const int j = i / 32, l = i % 32;
  const int low = block.qs[32 * (j / 2) + l] >> (4 * (j % 2)) & 0x0F;
  const int high = block.qh[l] >> j & 1;
  return low | high << 4;
}

int iq4_xs_scale(const BlockIQ4_XS& block, int j) {
  const int low = block.scales_l[j / 2] >> (4 * (j % 2)) & 0x0F;
  const int high = block.scales_h >> (2 * j) & 3;
  return (low | high << 4) - 32;
}

void set_iq4_xs_scale(BlockIQ4_XS& block, int j, int scale) {
  const int u = scale + 32;
  block.scales_l[j / 2] = static_cast<uint8_t>(block.scales_l[j / 2] | (u & 0x0F) << (4 * (j % 2)));
  block.scales_h = static_cast<uint16_t>(block.scales_h | (u >> 4) << (2 * j));
}

float half_to_float(Half h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24 is exact in float.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_float(sign | 0x7F800000 | mantissa << 13);  // inf, NaN keeps payload
  return bits_float(sign | (exponent + 112) << 23 | mantissa << 13);
}

Half float_to_half(float f) {
  uint32_t bits = float_bits(f);
  auto sign = static_cast<Half>((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return static_cast<Half>(sign | 0x7E00 | ((magnitude >> 13) & 0x3FF));  // quiet NaN
  // 65520 is halfway between the largest half (65504) and 65536; ties go to even, i.e. up.
  if (magnitude >= 0x477FF000) return static_cast<Half>(sign | 0x7C00);
  if (magnitude < 0x38800000) {
    // Below the smallest normal half: the result is a multiple of 2^-24, rounded to even by
    // the default floating-point environment.
    float scaled = std::fabs(f) * 0x1p24f;
    return static_cast<Half>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t h = ((magnitude >> 23) - 112) << 10 | ((magnitude >> 13) & 0x3FF);
  uint32_t rest = magnitude & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return static_cast<Half>(sign | h);
}

void dequantize_row_reference(TensorType type, const void* src, float* dst, int64_t n) {
  check_whole_blocks(type, n);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::F16: {
      auto* h = static_cast<const Half*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(h[i]);
      return;
    }
    case TensorType::BF16: {
      auto* h = static_cast<const BHalf*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
      return;
    }
    case TensorType::Q4_0: {
      auto* blocks = static_cast<const BlockQ4_0*>(src);
      for (int64_t b = 0; b < n / kQK4_0; ++b, dst += kQK4_0) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < 16; ++i) {
          dst[i] = static_cast<float>((blocks[b].qs[i] & 0x0F) - 8) * d;
          dst[i + 16] = static_cast<float>((blocks[b].qs[i] >> 4) - 8) * d;
        }
      }
      return;
    }
    case TensorType::Q8_0: {
      auto* blocks = static_cast<const BlockQ8_0*>(src);
      for (int64_t b = 0; b < n / kQK8_0; ++b, dst += kQK8_0) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK8_0; ++i) dst[i] = static_cast<float>(blocks[b].qs[i]) * d;
      }
      return;
    }
    case TensorType::Q4_K: {
      auto* blocks = static_cast<const BlockQ4_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d), dmin = half_to_float(blocks[b].dmin);
        uint8_t sc[8], mn[8];
        unpack_q4_k_scales(blocks[b].scales, sc, mn);
        // Each 32 bytes of qs hold two sub-blocks: the low nibbles, then the high ones.
        for (int j = 0; j < 8; ++j) {
          const uint8_t* q = blocks[b].qs + 32 * (j / 2);
          int shift = 4 * (j % 2);
          for (int i = 0; i < 32; ++i)
            dst[32 * j + i] = d * sc[j] * static_cast<float>((q[i] >> shift) & 0x0F) - dmin * mn[j];
        }
      }
      return;
    }
    case TensorType::Q6_K: {
      auto* blocks = static_cast<const BlockQ6_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK_K; ++i)
          dst[i] = d * blocks[b].scales[i / 16] * static_cast<float>(q6_k_quant(blocks[b], i) - 32);
      }
      return;
    }
    case TensorType::Q4_1: {
      auto* blocks = static_cast<const BlockQ4_1*>(src);
      for (int64_t b = 0; b < n / kQK32; ++b, dst += kQK32) {
        float d = half_to_float(blocks[b].d), m = half_to_float(blocks[b].m);
        for (int i = 0; i < kQK32; ++i) dst[i] = d * static_cast<float>(nibble32(blocks[b].qs, i)) + m;
      }
      return;
    }
    case TensorType::Q5_0: {
      auto* blocks = static_cast<const BlockQ5_0*>(src);
      for (int64_t b = 0; b < n / kQK32; ++b, dst += kQK32) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK32; ++i) dst[i] = static_cast<float>(q5_quant(blocks[b].qh, blocks[b].qs, i) - 16) * d;
      }
      return;
    }
    case TensorType::Q5_1: {
      auto* blocks = static_cast<const BlockQ5_1*>(src);
      for (int64_t b = 0; b < n / kQK32; ++b, dst += kQK32) {
        float d = half_to_float(blocks[b].d), m = half_to_float(blocks[b].m);
        for (int i = 0; i < kQK32; ++i) dst[i] = d * static_cast<float>(q5_quant(blocks[b].qh, blocks[b].qs, i)) + m;
      }
      return;
    }
    case TensorType::IQ4_NL: {
      auto* blocks = static_cast<const BlockIQ4_NL*>(src);
      for (int64_t b = 0; b < n / kQK32; ++b, dst += kQK32) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK32; ++i) dst[i] = d * kIq4Values[nibble32(blocks[b].qs, i)];
      }
      return;
    }
    case TensorType::MXFP4: {
      auto* blocks = static_cast<const BlockMXFP4*>(src);
      for (int64_t b = 0; b < n / kQK32; ++b, dst += kQK32) {
        float d = mxfp4_scale(blocks[b].e);
        for (int i = 0; i < kQK32; ++i) dst[i] = static_cast<float>(kMxfp4Values[nibble32(blocks[b].qs, i)]) * d;
      }
      return;
    }
    case TensorType::Q2_K: {
      auto* blocks = static_cast<const BlockQ2_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d), dmin = half_to_float(blocks[b].dmin);
        for (int i = 0; i < kQK_K; ++i) {
          const uint8_t sc = blocks[b].scales[i / 16];
          dst[i] = d * (sc & 0x0F) * static_cast<float>(q2_k_quant(blocks[b], i)) - dmin * (sc >> 4);
        }
      }
      return;
    }
    case TensorType::Q3_K: {
      auto* blocks = static_cast<const BlockQ3_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK_K; ++i)
          dst[i] = d * static_cast<float>(q3_k_scale(blocks[b], i / 16)) * static_cast<float>(q3_k_quant(blocks[b], i));
      }
      return;
    }
    case TensorType::Q5_K: {
      auto* blocks = static_cast<const BlockQ5_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d), dmin = half_to_float(blocks[b].dmin);
        uint8_t sc[8], mn[8];
        unpack_q4_k_scales(blocks[b].scales, sc, mn);
        for (int i = 0; i < kQK_K; ++i)
          dst[i] = d * sc[i / 32] * static_cast<float>(q5_k_quant(blocks[b], i)) - dmin * mn[i / 32];
      }
      return;
    }
    case TensorType::IQ4_XS: {
      auto* blocks = static_cast<const BlockIQ4_XS*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K) {
        float d = half_to_float(blocks[b].d);
        for (int i = 0; i < kQK_K; ++i) {
          const int j = i / 32;
          dst[i] = d * static_cast<float>(iq4_xs_scale(blocks[b], j)) * kIq4Values[nibble32(blocks[b].qs + 16 * j, i % 32)];
        }
      }
      return;
    }
    case TensorType::Q8_K: {
      auto* blocks = static_cast<const BlockQ8_K*>(src);
      for (int64_t b = 0; b < n / kQK_K; ++b, dst += kQK_K)
        for (int i = 0; i < kQK_K; ++i) dst[i] = static_cast<float>(blocks[b].qs[i]) * blocks[b].d;
      return;
    }
  }
  throw FormatError(error_message("kernels", "no dequantizer for type code {}", static_cast<uint32_t>(type)));
}

void quantize_row_reference(TensorType type, const float* src, void* dst, int64_t n) {
  check_whole_blocks(type, n);
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<Half*>(dst)[i] = float_to_half(src[i]);
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<BHalf*>(dst)[i] = float_to_bf16(src[i]);
      return;
    case TensorType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQK4_0); return;
    case TensorType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQK8_0); return;
    case TensorType::Q4_K: quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n / kQK_K); return;
    case TensorType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQK_K); return;
    case TensorType::Q8_K: quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), n / kQK_K); return;
    case TensorType::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n / kQK32); return;
    case TensorType::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n / kQK32); return;
    case TensorType::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n / kQK32); return;
    case TensorType::IQ4_NL: quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / kQK32); return;
    case TensorType::MXFP4: quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), n / kQK32); return;
    case TensorType::Q2_K: quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n / kQK_K); return;
    case TensorType::Q3_K: quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n / kQK_K); return;
    case TensorType::Q5_K: quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n / kQK_K); return;
    case TensorType::IQ4_XS: quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), n / kQK_K); return;
  }
  throw FormatError(error_message("kernels", "no quantizer for type code {}", static_cast<uint32_t>(type)));
}

}  // namespace orchard::core
