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
// Every 32-element type (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4) lays out its 4-bit codes the
// same way: byte j holds element j (low nibble) and element j + 16 (high nibble).
constexpr int64_t kQK32 = 32;

// The 16 values of IQ4_NL and IQ4_XS codes (times the block scale): denser near zero, where
// most weights are.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The 16 E2M1 (FP4) values of MXFP4 codes, doubled so they are integers: code bit 3 is the
// sign, bits 0-2 give 0, 0.5, 1, 1.5, 2, 3, 4, 6. The block's E8M0 byte e scales them by
// 2^(e - 128), i.e. the OCP 2^(e - 127) times the half that undoes the doubling.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// x[i] = (q[i] - 8) * d; byte j holds element j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  Half d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// x[i] = q[i] * d + m; nibbles as Q4_0.
struct BlockQ4_1 {
  Half d;
  Half m;
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// x[i] = (q[i] - 16) * d with q 5 bits: the low 4 as Q4_0's nibbles, bit 4 of element i in bit
// i of the little-endian word qh.
struct BlockQ5_0 {
  Half d;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// x[i] = q[i] * d + m; q as in Q5_0.
struct BlockQ5_1 {
  Half d;
  Half m;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// x[i] = d * kIq4Values[q[i]]; nibbles as Q4_0.
struct BlockIQ4_NL {
  Half d;
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// x[i] = kMxfp4Values[q[i]] * 2^(e - 128); nibbles as Q4_0.
struct BlockMXFP4 {
  uint8_t e;  // E8M0: a power of two, no sign or mantissa
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);

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

// 16 sub-blocks of 16; x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4) with q 2 bits.
// Element i = 128h + 32s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  Half d;
  Half dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 sub-blocks of 16; x = d * (scale[j] - 32) * (q - 4) with q 3 bits: the low 2 placed as
// Q2_K's, the top one of element i = 128h + 32s + l in bit 4h + s of hmask[l]. The 16 six-bit
// scales are packed in `scales` (see q3_k_scale).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  Half d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// As Q4_K with a fifth bit per quant: bit j of qh[l] is the top bit of element 32j + l.
struct BlockQ5_K {
  Half d;
  Half dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 8 sub-blocks of 32; x = d * (ls[j] - 32) * kIq4Values[q] with 6-bit ls: low 4 bits in nibble
// j % 2 of scales_l[j / 2], top 2 in bits 2j..2j+1 of scales_h. Sub-block j's codes are
// qs[16j..16j+15], nibbles as Q4_0.
struct BlockIQ4_XS {
  Half d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

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
// Q5_0 / Q5_1: the 5-bit quant (0..31) of element i in [0, 32).
int q5_quant(const uint8_t* qh, const uint8_t* qs, int i);
// Q2_K: the 2-bit quant (0..3) of element i in [0, 256).
int q2_k_quant(const BlockQ2_K& block, int i);
// Q3_K: the quant (-4..3) of element i in [0, 256), and the scale (-32..31) of sub-block j.
int q3_k_quant(const BlockQ3_K& block, int i);
int q3_k_scale(const BlockQ3_K& block, int j);
// Stores sub-block j's scale (-32..31) into `block.scales`, whose bits for it must be clear.
void set_q3_k_scale(BlockQ3_K& block, int j, int scale);
// Q5_K: the 5-bit quant (0..31) of element i in [0, 256).
int q5_k_quant(const BlockQ5_K& block, int i);
// IQ4_XS: the scale (-32..31) of sub-block j.
int iq4_xs_scale(const BlockIQ4_XS& block, int j);
// Stores sub-block j's scale (-32..31) into `block.scales_l` and `scales_h`, whose bits for it
// must be clear.
void set_iq4_xs_scale(BlockIQ4_XS& block, int j, int scale);
// MXFP4: the block's scale 2^(e - 128), built from its bits (inline: kernels call it per
// block). e ≥ 2 is a normal float of biased exponent e - 1; 2^-128 and 2^-127 are subnormal.
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : uint32_t{1} << (21 + e);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Reference dequantizer: `n` elements of `type` at `src` into floats. n must be a whole number
// of blocks.
void dequantize_row_reference(TensorType type, const void* src, float* dst, int64_t n);
// Reference quantizer (used by make-model and to build test data): `n` floats into `type`.
void quantize_row_reference(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace orchard::core
