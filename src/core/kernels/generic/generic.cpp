// Portable kernels: plain loops over GGUF blocks, one (row, token) dot product at a time.
// They define what the SIMD kernels must compute (the same integer sums of the same quantized
// activations) and serve CPUs without a SIMD set.
#include <cstring>

#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {
namespace {

float dot_q4_0(const BlockQ4_0& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 16; ++i)
    sum += ((w.qs[i] & 0x0F) - 8) * x.qs[i] + ((w.qs[i] >> 4) - 8) * x.qs[i + 16];
  return static_cast<float>(sum) * (half_to_float(w.d) * x.d);
}

float dot_q8_0(const BlockQ8_0& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += w.qs[i] * x.qs[i];
  return static_cast<float>(sum) * (half_to_float(w.d) * x.d);
}

float dot_q4_k(const BlockQ4_K& w, const BlockQ8_K& x) {
  uint8_t sc[8], mn[8];
  unpack_q4_k_scales(w.scales, sc, mn);
  int32_t sum = 0, min_sum = 0;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* q = w.qs + 32 * (j / 2);
    int shift = 4 * (j % 2);
    int32_t sub = 0;
    for (int i = 0; i < 32; ++i) sub += ((q[i] >> shift) & 0x0F) * x.qs[32 * j + i];
    sum += sc[j] * sub;
    min_sum += mn[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return x.d * (half_to_float(w.d) * static_cast<float>(sum) - half_to_float(w.dmin) * static_cast<float>(min_sum));
}

float dot_q6_k(const BlockQ6_K& w, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t sub = 0;
    for (int i = 16 * j; i < 16 * j + 16; ++i) sub += (q6_k_quant(w, i) - 32) * x.qs[i];
    sum += w.scales[j] * sub;
  }
  return x.d * half_to_float(w.d) * static_cast<float>(sum);
}

// The 32-element types against Q8_0-style activations: Σ w·x = d_w·d_x·Σ q·q_x (+ m·d_x·Σ q_x
// for the types with a min).
float dot_q4_1(const BlockQ4_1& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += (w.qs[i % 16] >> (4 * (i / 16)) & 0x0F) * x.qs[i];
  return x.d * (half_to_float(w.d) * static_cast<float>(sum) + half_to_float(w.m) * static_cast<float>(x.sum));
}

float dot_q5_0(const BlockQ5_0& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += (q5_quant(w.qh, w.qs, i) - 16) * x.qs[i];
  return static_cast<float>(sum) * (half_to_float(w.d) * x.d);
}

float dot_q5_1(const BlockQ5_1& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += q5_quant(w.qh, w.qs, i) * x.qs[i];
  return x.d * (half_to_float(w.d) * static_cast<float>(sum) + half_to_float(w.m) * static_cast<float>(x.sum));
}

float dot_iq4_nl(const BlockIQ4_NL& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += kIq4Values[w.qs[i % 16] >> (4 * (i / 16)) & 0x0F] * x.qs[i];
  return static_cast<float>(sum) * (half_to_float(w.d) * x.d);
}

float dot_mxfp4(const BlockMXFP4& w, const ActQ8_0& x) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += kMxfp4Values[w.qs[i % 16] >> (4 * (i / 16)) & 0x0F] * x.qs[i];
  return static_cast<float>(sum) * (mxfp4_scale(w.e) * x.d);
}

// The 256-element types against Q8_K, as dot_q4_k / dot_q6_k: integer sums per sub-block times
// their integer scales, the mins through the activations' per-16 sums.
float dot_q2_k(const BlockQ2_K& w, const BlockQ8_K& x) {
  int32_t sum = 0, min_sum = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t sub = 0;
    for (int i = 16 * j; i < 16 * j + 16; ++i) sub += q2_k_quant(w, i) * x.qs[i];
    sum += (w.scales[j] & 0x0F) * sub;
    min_sum += (w.scales[j] >> 4) * x.bsums[j];
  }
  return x.d * (half_to_float(w.d) * static_cast<float>(sum) - half_to_float(w.dmin) * static_cast<float>(min_sum));
}

float dot_q3_k(const BlockQ3_K& w, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t sub = 0;
    for (int i = 16 * j; i < 16 * j + 16; ++i) sub += q3_k_quant(w, i) * x.qs[i];
    sum += q3_k_scale(w, j) * sub;
  }
  return x.d * half_to_float(w.d) * static_cast<float>(sum);
}

float dot_q5_k(const BlockQ5_K& w, const BlockQ8_K& x) {
  uint8_t sc[8], mn[8];
  unpack_q4_k_scales(w.scales, sc, mn);
  int32_t sum = 0, min_sum = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t sub = 0;
    for (int i = 32 * j; i < 32 * j + 32; ++i) sub += q5_k_quant(w, i) * x.qs[i];
    sum += sc[j] * sub;
    min_sum += mn[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return x.d * (half_to_float(w.d) * static_cast<float>(sum) - half_to_float(w.dmin) * static_cast<float>(min_sum));
}

float dot_iq4_xs(const BlockIQ4_XS& w, const BlockQ8_K& x) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t sub = 0;
    for (int i = 0; i < 32; ++i) sub += kIq4Values[w.qs[16 * j + i % 16] >> (4 * (i / 16)) & 0x0F] * x.qs[32 * j + i];
    sum += iq4_xs_scale(w, j) * sub;
  }
  return x.d * half_to_float(w.d) * static_cast<float>(sum);
}

float as_is(float v) { return v; }

// Float weight values, read from unaligned bytes.
template <class Stored, float (*kToFloat)(Stored)>
struct FloatValue {
  static constexpr size_t kBytes = sizeof(Stored);
  static float at(const uint8_t* p) {
    Stored v;
    std::memcpy(&v, p, sizeof v);
    return kToFloat(v);
  }
};
using F32Value = FloatValue<float, as_is>;
using F16Value = FloatValue<Half, half_to_float>;
using BF16Value = FloatValue<BHalf, bf16_to_float>;

// Dot product of one row of W with one token's activations, per weight type and layout. The
// float rows of both layouts add the same products in the same order (bit-identical results).
template <class Value>
struct FloatRow {
  static float dot(const uint8_t* w, const uint8_t* x, int64_t n, int64_t) {
    auto* xf = reinterpret_cast<const float*>(x);
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += Value::at(w + Value::kBytes * static_cast<size_t>(i)) * xf[i];
    return sum;
  }
};

template <class Value>
struct FloatInterleavedRow {
  static float dot(const uint8_t* group, const uint8_t* x, int64_t n, int64_t lane) {
    auto* xf = reinterpret_cast<const float*>(x);
    float sum = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += Value::at(group + Value::kBytes * static_cast<size_t>(i * kInterleave + lane)) * xf[i];
    return sum;
  }
};

template <class Block, class Act, float (*kDot)(const Block&, const Act&)>
struct QuantRow {
  static float dot(const uint8_t* w, const uint8_t* x, int64_t n, int64_t) {
    auto* wb = reinterpret_cast<const Block*>(w);
    auto* xb = reinterpret_cast<const Act*>(x);
    float sum = 0;
    for (int64_t b = 0; b < n; ++b) sum += kDot(wb[b], xb[b]);
    return sum;
  }
};

// Interleaved copies: each block is first rebuilt in GGUF form, so the arithmetic (and the
// result, bit for bit) is that of the row layout.
template <class Block, class Act, Layout kLayout, float (*kDot)(const Block&, const Act&)>
struct InterleavedRow {
  static float dot(const uint8_t* group, const uint8_t* x, int64_t n, int64_t lane) {
    auto* xb = reinterpret_cast<const Act*>(x);
    float sum = 0;
    Block block;
    for (int64_t b = 0; b < n; ++b) {
      extract_block(kLayout, group, n, lane, b, &block);
      sum += kDot(block, xb[b]);
    }
    return sum;
  }
};

template <class Row, bool kInterleaved>
void tile_fn(const Tile& tile) {
  for (int64_t r = 0; r < tile.n_rows; ++r) {
    const uint8_t* w = kInterleaved ? tile.w + static_cast<size_t>(r / kInterleave) * tile.w_stride
                                    : tile.w + static_cast<size_t>(r) * tile.w_stride;
    for (int64_t t = 0; t < tile.n_tokens; ++t)
      tile.y[t * tile.y_stride + r] =
          Row::dot(w, tile.x + static_cast<size_t>(t) * tile.x_stride, tile.n_blocks, r % kInterleave);
  }
}

const KernelSet kGeneric{
    "generic",
    VectorIsa::kPortable,
    tile_fn<FloatRow<F32Value>, false>,
    tile_fn<FloatRow<F16Value>, false>,
    tile_fn<FloatRow<BF16Value>, false>,
    tile_fn<QuantRow<BlockQ4_0, ActQ8_0, dot_q4_0>, false>,
    tile_fn<QuantRow<BlockQ8_0, ActQ8_0, dot_q8_0>, false>,
    tile_fn<QuantRow<BlockQ4_K, BlockQ8_K, dot_q4_k>, false>,
    tile_fn<QuantRow<BlockQ6_K, BlockQ8_K, dot_q6_k>, false>,
    tile_fn<InterleavedRow<BlockQ4_0, ActQ8_0, kQ4_0x16, dot_q4_0>, true>,
    tile_fn<InterleavedRow<BlockQ8_0, ActQ8_0, kQ8_0x16, dot_q8_0>, true>,
    tile_fn<InterleavedRow<BlockQ4_K, BlockQ8_K, kQ4_Kx16, dot_q4_k>, true>,
    tile_fn<InterleavedRow<BlockQ6_K, BlockQ8_K, kQ6_Kx16, dot_q6_k>, true>,
    tile_fn<FloatInterleavedRow<F32Value>, true>,
    tile_fn<FloatInterleavedRow<F16Value>, true>,
    tile_fn<FloatInterleavedRow<BF16Value>, true>,
    tile_fn<QuantRow<BlockQ4_1, ActQ8_0, dot_q4_1>, false>,
    tile_fn<QuantRow<BlockQ5_0, ActQ8_0, dot_q5_0>, false>,
    tile_fn<QuantRow<BlockQ5_1, ActQ8_0, dot_q5_1>, false>,
    tile_fn<QuantRow<BlockQ2_K, BlockQ8_K, dot_q2_k>, false>,
    tile_fn<QuantRow<BlockQ3_K, BlockQ8_K, dot_q3_k>, false>,
    tile_fn<QuantRow<BlockQ5_K, BlockQ8_K, dot_q5_k>, false>,
    tile_fn<QuantRow<BlockIQ4_NL, ActQ8_0, dot_iq4_nl>, false>,
    tile_fn<QuantRow<BlockIQ4_XS, BlockQ8_K, dot_iq4_xs>, false>,
    tile_fn<QuantRow<BlockMXFP4, ActQ8_0, dot_mxfp4>, false>,
    tile_fn<InterleavedRow<BlockQ5_K, BlockQ8_K, kQ5_Kx16, dot_q5_k>, true>,
    tile_fn<InterleavedRow<BlockIQ4_XS, BlockQ8_K, kIQ4_XSx16, dot_iq4_xs>, true>,
    tile_fn<InterleavedRow<BlockQ3_K, BlockQ8_K, kQ3_Kx16, dot_q3_k>, true>,
    tile_fn<InterleavedRow<BlockQ2_K, BlockQ8_K, kQ2_Kx16, dot_q2_k>, true>,
};

}  // namespace

const KernelSet& generic_kernels() { return kGeneric; }

}  // namespace orchard::core::kernels
