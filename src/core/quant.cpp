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

void quantize_q4_0(const float* x, BlockQ4_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK4_0) {
    // The value of largest magnitude maps to q = 0 exactly, so its sign sets the scale's sign
    // and all 16 levels are usable.
    float extreme = 0;
    for (int i = 0; i < kQK4_0; ++i)
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    float d = extreme / -8;
    float inv = d != 0 ? 1 / d : 0;
    out[b].d = float_to_half(d);
    uint8_t q[kQK4_0];
    for (int i = 0; i < kQK4_0; ++i) q[i] = static_cast<uint8_t>(std::clamp(nearest_int(x[i] * inv) + 8, 0, 15));
    for (int i = 0; i < kQK4_0 / 2; ++i) out[b].qs[i] = static_cast<uint8_t>(q[i] | q[i + 16] << 4);
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

void quantize_q4_k(const float* x, BlockQ4_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    // Per sub-block of 32: x ≈ scale * q - min with q in 0..15 and min ≥ 0 (the range is
    // widened to include 0 so the min is never negative).
    float scale[8], min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = x[32 * j];
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, x[32 * j + i]);
        hi = std::max(hi, x[32 * j + i]);
      }
      scale[j] = (hi - lo) / 15;
      min[j] = -lo;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    float d = max_scale / 63, dmin = max_min / 63;
    out[b].d = float_to_half(d);
    out[b].dmin = float_to_half(dmin);
    // Quantize the scales against the halves actually stored, so the 4-bit quants below
    // compensate for the scales' own rounding.
    float dq = half_to_float(out[b].d), dminq = half_to_float(out[b].dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(dq > 0 ? std::clamp(nearest_int(scale[j] / dq), 0, 63) : 0);
      mn[j] = static_cast<uint8_t>(dminq > 0 ? std::clamp(nearest_int(min[j] / dminq), 0, 63) : 0);
    }
    pack_q4_k_scales(sc, mn, out[b].scales);
    uint8_t q[kQK_K];
    for (int j = 0; j < 8; ++j) {
      float step = dq * sc[j], offset = dminq * mn[j];
      for (int i = 0; i < 32; ++i)
        q[32 * j + i] = static_cast<uint8_t>(step > 0 ? std::clamp(nearest_int((x[32 * j + i] + offset) / step), 0, 15) : 0);
    }
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 32; ++i) out[b].qs[32 * c + i] = static_cast<uint8_t>(q[64 * c + i] | q[64 * c + 32 + i] << 4);
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    // Per sub-block of 16, as Q4_0 does per 32: the extreme value maps to q = 0 (x = -32 s).
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      float extreme = 0;
      for (int i = 0; i < 16; ++i)
        if (std::fabs(x[16 * j + i]) > std::fabs(extreme)) extreme = x[16 * j + i];
      scale[j] = extreme / -32;
      max_scale = std::max(max_scale, std::fabs(scale[j]));
    }
    out[b].d = float_to_half(max_scale / 127);
    float dq = half_to_float(out[b].d);
    uint8_t q[kQK_K];
    for (int j = 0; j < 16; ++j) {
      int sc = dq > 0 ? std::clamp(nearest_int(scale[j] / dq), -127, 127) : 0;
      out[b].scales[j] = static_cast<int8_t>(sc);
      float step = dq * static_cast<float>(sc);
      for (int i = 0; i < 16; ++i)
        q[16 * j + i] = static_cast<uint8_t>(step != 0 ? std::clamp(nearest_int(x[16 * j + i] / step) + 32, 0, 63) : 32);
    }
    std::memset(out[b].qh, 0, sizeof out[b].qh);
    for (int i = 0; i < kQK_K; ++i) {
      int h = i / 128, e = i % 128;
      uint8_t& low = out[b].ql[64 * h + e % 64];
      if (e < 64) low = static_cast<uint8_t>(q[i] & 0x0F);
      else low = static_cast<uint8_t>(low | (q[i] & 0x0F) << 4);
      out[b].qh[32 * h + e % 32] = static_cast<uint8_t>(out[b].qh[32 * h + e % 32] | (q[i] >> 4) << (2 * (e / 32)));
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
  }
  throw FormatError(error_message("kernels", "no quantizer for type code {}", static_cast<uint32_t>(type)));
}

}  // namespace orchard::core
