#pragma once
// On-disk block layouts of the quantized GGUF types (bit-compatible with GGML) and the plain
// reference (de)quantizers. The reference code is written for obviousness, not speed: the fast
// kernels in kernels.h are tested against it.
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace orchard::core {

using Half = uint16_t;  // IEEE binary16 bits
using BHalf = uint16_t; // bfloat16 bits

float half_to_float(Half h);
Half float_to_half(float f);  // round to nearest even
inline float bf16_to_float(BHalf h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// Round to nearest even; NaN stays a (quiet) NaN. Inline: reductions call it per element.
inline BHalf float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<BHalf>((bits >> 16) | 0x40);
  return static_cast<BHalf>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

constexpr int64_t kQK4_0 = 32;
constexpr int64_t kQK8_0 = 32;
constexpr int64_t kQK_K = 256;
constexpr int kKScaleBytes = 12;

// x[i] = (q[i] - 8) * d; byte j holds element j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  Half d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x[i] = q[i] * d.
struct BlockQ8_0 {
  Half d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

// 8 sub-blocks of 32; x = d * scale[j] * q - dmin * min[j], with 6-bit scales/mins packed in
// `scales`.
struct BlockQ4_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// 16 sub-blocks of 16; x = d * scales[j] * (q - 32) with q 6 bits: 4 in ql, 2 in qh.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  Half d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation partner of the K-quants: x = q * d, with per-16 sums of q kept for the mins.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// Layout helpers shared by the reference code and the portable kernels.
// Q4_K: the 8 six-bit scales and mins packed in BlockQ4_K::scales.
void unpack_q4_k_scales(const uint8_t* packed, uint8_t* scales, uint8_t* mins);
// The inverse: 8 scales and 8 mins (each < 64) into the 12 packed bytes.
void pack_q4_k_scales(const uint8_t* scales, const uint8_t* mins, uint8_t* packed);
// Q6_K: the 6-bit quant (0..63) of element i in [0, 256).
int q6_k_quant(const BlockQ6_K& block, int i);

// Reference dequantizer: `n` elements of `type` at `src` into floats. n must be a whole number
// of blocks.
void dequantize_row_reference(TensorType type, const void* src, float* dst, int64_t n);
// Reference quantizer (used by make-model and to build test data): `n` floats into `type`.
void quantize_row_reference(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace orchard::core
