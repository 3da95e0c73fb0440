#include "model/attention_vnni.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "core/kernels/kernel_set.h"
#include "model/exp_approx.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_VNNI_ATTENTION 1
// GCC 12's AVX-512 conversions start from _mm512_undefined_*() (see ops.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace orchard::model::ops {

namespace {
constexpr int32_t kMaxValueBlocks = 16;  // value widths up to 512: the weights' codes buffer
}  // namespace

bool vnni_attention_suits(const AttentionBlock& b) {
  const int32_t dims = b.value_dim ? b.value_dim : b.head_dim;
  const bool widths = b.head_dim % kKvQ8Block == 0 && dims % 64 == 0 && dims / kKvQ8Block <= kMaxValueBlocks;
  return widths && ((b.type == KvType::F16 && b.latent) || (b.type == KvType::Q8_0 && b.value_scale_stride == dims / kKvQ8Block));
}

#ifdef ORCHARD_VNNI_ATTENTION
#define ORCHARD_VNNI_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,f16c"
namespace {

constexpr int32_t kChunk = kKeyBlock;  // keys per pass: one block of the cache's keys
static_assert(kChunk == 64, "a chunk's positions are 4 vectors of 16");
constexpr int32_t kQueries = 4;        // query vectors per tile
// Tiles taken through the chunks together, each chunk rearranged once for them: a 32-row prompt
// block of 8 query heads is one group, and the group's outputs (up to 64 × 4 × 512 floats, 512
// KiB) stay in L2 while every chunk passes.
constexpr int32_t kTileGroup = 64;
// How many of the cache's key blocks ahead a chunk's rearrangement asks for its keys.
constexpr int32_t kKeysAhead = 2;

// A ByteChunk keeps positions in "quad order" from the keys' rearrangement on: vector k,
// 128-bit lane L, element m holds position 16L + 4k + m, so lane L of vector k is the 4
// consecutive positions of quad 4L + k. A weight vector's 8-bit codes (one byte per element)
// are then 4 dwords, each one quad's weights, as the values' products take them.

// out[L] = (in[0]'s 128-bit lane L, in[1]'s, in[2]'s, in[3]'s): 4 × 4 lanes transposed (its own
// inverse).
template <class V>
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline void lanes_transposed(const V in[4], V out[4]) {
  const __m512 x0 = reinterpret_cast<__m512>(in[0]), x1 = reinterpret_cast<__m512>(in[1]);
  const __m512 x2 = reinterpret_cast<__m512>(in[2]), x3 = reinterpret_cast<__m512>(in[3]);
  const __m512 a = _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 b = _mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512 c = _mm512_shuffle_f32x4(x0, x1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 d = _mm512_shuffle_f32x4(x2, x3, _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = reinterpret_cast<V>(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  out[1] = reinterpret_cast<V>(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  out[2] = reinterpret_cast<V>(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)));
  out[3] = reinterpret_cast<V>(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Four rows of 64 codes (a key block's 64 positions at dimensions d..d+3, or 64 dimensions of
// positions j..j+3) as 4 vectors of 16 columns' 4 codes each: vector k's lane L, element m is
// column 16L + 4k + m, its bytes the 4 rows'. Byte and word interleaves within lanes.
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline void column_quads(const int8_t* r0, const int8_t* r1,
                                                                                           const int8_t* r2, const int8_t* r3,
                                                                                           __m512i u[4]) {
  const __m512i a = _mm512_loadu_si512(r0), b = _mm512_loadu_si512(r1);
  const __m512i c = _mm512_loadu_si512(r2), d = _mm512_loadu_si512(r3);
  const __m512i ab_lo = _mm512_unpacklo_epi8(a, b), ab_hi = _mm512_unpackhi_epi8(a, b);
  const __m512i cd_lo = _mm512_unpacklo_epi8(c, d), cd_hi = _mm512_unpackhi_epi8(c, d);
  u[0] = _mm512_unpacklo_epi16(ab_lo, cd_lo);
  u[1] = _mm512_unpackhi_epi16(ab_lo, cd_lo);
  u[2] = _mm512_unpacklo_epi16(ab_hi, cd_hi);
  u[3] = _mm512_unpackhi_epi16(ab_hi, cd_hi);
}

// acc + Σ a·b over each 32-bit element's 4 byte pairs, a unsigned (vpdpbusd). In inline
// assembly because through the intrinsic GCC 12 moved the accumulators between registers and
// the stack around the products (10% of a prompt's Q8_0 attention at 16k positions).
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// 2^x within 2.3e-7 relative: 2^n · 2^f with n the nearest integer and 2^f = 1 + f·q(f) on
// [−1/2, 1/2], q the degree-4 polynomial through (2^f − 1)/f at its 5 Chebyshev nodes (the
// softmax's weights become 8-bit codes; its sums want ~float precision). −∞ and NaN (−∞ − −∞:
// a query with no keys yet) give 0.
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-1000.0f));  // the second operand where x is NaN
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 q = _mm512_set1_ps(1.338130254e-3f);
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.666368515e-3f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.550381014e-2f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.402234904e-1f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.931471806e-1f));
  return _mm512_scalef_ps(_mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f)), n);
}

// Four queries' vectors reduced at once: lane i (all 4 of its elements) of the result is the
// largest (kLargest) or the sum of v[i]'s 16 elements. One transposition for the four, not four
// reductions.
enum class Reduction { kLargest, kSum };
template <Reduction kHow>
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline __m512 combined(__m512 a, __m512 b) {
  if constexpr (kHow == Reduction::kLargest) return _mm512_max_ps(a, b);
  else return _mm512_add_ps(a, b);
}
template <Reduction kHow>
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline __m512 lanes_reduced(const __m512 v[4]) {
  __m512 t[4];
  lanes_transposed(v, t);
  __m512 r = combined<kHow>(combined<kHow>(t[0], t[1]), combined<kHow>(t[2], t[3]));
  r = combined<kHow>(r, _mm512_permute_ps(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return combined<kHow>(r, _mm512_permute_ps(r, _MM_SHUFFLE(1, 0, 3, 2)));
}
// Lane i of v in all 16 elements.
[[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) inline __m512 lane_everywhere(__m512 v, int32_t i) {
  return _mm512_permutexvar_ps(_mm512_set1_epi32(4 * i), v);
}

struct alignas(64) Integers {
  __m512i v;
};
struct alignas(64) Floats {
  __m512 v;
};

// One chunk of a KV head's keys and values as the tiles' products take them, rearranged once for
// every tile of the block (a decode step's 2 tiles included: rearranging per tile cost more).
// Each kind of chunk (ByteChunk: a Q8_0 cache, WordChunk: an F16 cache) says how its codes are
// laid out and multiplied; the softmax between the products is shared.
//
// ByteChunk: the cache's own 8-bit codes, positions in quad order.
struct ByteChunk {
  using Query = core::kernels::ActQ8_0;  // the query's codes per key block
  using WeightCode = uint8_t;
  // A weight's code: p·s rounded to this many steps of the query's largest in the chunk.
  static constexpr float kWeightSteps = 255.0f;
  // Dimensions (scores) or positions (outputs) one element of a product sums.
  static constexpr int32_t kPerProduct = 4;

  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i product(__m512i acc, __m512i a, __m512i b) {
    return dpbusd(acc, a, b);
  }
  // A score's sum before the products: the keys' +128 times the query's codes taken back.
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i score_start(const Query& q) {
    return _mm512_set1_epi32(-128 * q.sum);
  }
  // Where in a weight block's codes the quad of positions the values' product `group` takes
  // starts (values[group] is quad 4L + k: byte 16k + 4L).
  static constexpr int32_t weights_at(int32_t group) { return 16 * (group % 4) + 4 * (group / 4); }

  static void quantize_query(const float* q, Query* codes, int32_t blocks) { core::kernels::quantize_act_q8_0(q, codes, blocks); }
  // Vector k of a weight block's codes (16 positions) stored where the products read them.
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline void store_weights(__m512i rounded, int32_t k,
                                                                                                    WeightCode* block) {
    _mm_store_si128(reinterpret_cast<__m128i*>(block + 16 * k), _mm512_cvtusepi32_epi8(rounded));
  }

  // Per key dimension d (in 4s), the chunk's 64 keys at dimensions d..d+3 as 4 vectors in quad
  // order, unsigned (codes + 128) as VNNI's first operand is: keys[d + k].
  std::vector<Integers> keys;
  // Per key block, the keys' scales times the score scale (log2 units), 4 vectors in quad order.
  std::vector<Floats> key_scales;
  // Per 64 value dimensions and quad of positions, 4 vectors of 16 dimensions in order, each
  // element the quad's 4 codes: values[(tile * 16 + quad) * 4 + k].
  std::vector<Integers> values;
  // Per value block, the positions' scales in quad order (0 past the chunk's keys).
  std::vector<Floats> value_scales;

  __attribute__((target(ORCHARD_VNNI_TARGET))) void take(const AttentionBlock& b, int32_t lo, int32_t end, float score_scale) {
    const int32_t key_blocks = b.head_dim / kKvQ8Block;
    const int32_t dims = b.value_dim ? b.value_dim : b.head_dim, value_blocks = dims / kKvQ8Block;
    const int32_t stored_keys = std::min(kChunk, end - lo);  // keys of the chunk in the cache
    const int32_t last = stored_keys - 1;

    const auto* block_keys = static_cast<const int8_t*>(b.keys) + key_element(b.head_dim, 0, lo);
    const int64_t keys_ahead = int64_t{kKeysAhead} * kKeyBlock * b.head_dim;
    keys.resize(static_cast<size_t>(b.head_dim));
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int32_t d = 0; d < b.head_dim; d += 4) {
      const int8_t* rows = block_keys + int64_t{d} * kKeyBlock;
      for (int32_t r = 0; r < 4; ++r) __builtin_prefetch(rows + keys_ahead + r * kKeyBlock);
      __m512i u[4];
      column_quads(rows, rows + kKeyBlock, rows + 2 * kKeyBlock, rows + 3 * kKeyBlock, u);
      for (int32_t k = 0; k < 4; ++k) keys[static_cast<size_t>(d + k)].v = _mm512_xor_si512(u[k], offset);
    }
    key_scales.resize(static_cast<size_t>(key_blocks) * 4);
    const __m512 scale = _mm512_set1_ps(score_scale);
    for (int32_t blk = 0; blk < key_blocks; ++blk) {
      const core::Half* s = b.key_scales + key_element(key_blocks, blk, lo);
      __m512 in_order[4], quads[4];
      for (int32_t v = 0; v < 4; ++v)
        in_order[v] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16 * v))), scale);
      lanes_transposed(in_order, quads);
      for (int32_t k = 0; k < 4; ++k) key_scales[static_cast<size_t>(blk * 4 + k)].v = quads[k];
    }

    // Rows past the chunk's last key repeat it (their weights are 0): nothing past the cache's
    // last stored position is read.
    const auto* first_values = static_cast<const int8_t*>(b.values) + int64_t{lo} * b.value_stride;
    values.resize(static_cast<size_t>(dims / 64) * (kChunk / 4) * 4);
    for (int32_t tile = 0; tile < dims / 64; ++tile)
      for (int32_t quad = 0; quad < kChunk / 4; ++quad) {
        const int32_t j = 4 * quad;
        const int8_t* row = first_values + tile * 64;
        for (int32_t r = 0; r < 4; ++r) __builtin_prefetch(row + int64_t{j + r + kChunk} * b.value_stride);
        __m512i u[4], in_order[4];
        column_quads(row + int64_t{std::min(j, last)} * b.value_stride, row + int64_t{std::min(j + 1, last)} * b.value_stride,
                     row + int64_t{std::min(j + 2, last)} * b.value_stride, row + int64_t{std::min(j + 3, last)} * b.value_stride, u);
        lanes_transposed(u, in_order);
        for (int32_t k = 0; k < 4; ++k) values[static_cast<size_t>((tile * (kChunk / 4) + quad) * 4 + k)].v = in_order[k];
      }

    // The positions' value scales as floats, [position - lo][block] (the cache's rows of them
    // are contiguous), then each block's in quad order.
    alignas(64) float row_scales[kChunk * kMaxValueBlocks];
    const core::Half* first_scales = b.value_scales + int64_t{lo} * b.value_scale_stride;
    for (int32_t e = 0; e < stored_keys * value_blocks; e += 16) {
      const int32_t left = stored_keys * value_blocks - e;
      const auto mask = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
      _mm512_store_ps(row_scales + e, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, first_scales + e)));
    }
    value_scales.resize(static_cast<size_t>(value_blocks) * 4);
    for (int32_t blk = 0; blk < value_blocks; ++blk)
      for (int32_t k = 0; k < 4; ++k) {
        const __m512i position = positions(k);
        const __mmask16 stored = _mm512_cmplt_epi32_mask(position, _mm512_set1_epi32(stored_keys));
        const __m512i at = _mm512_add_epi32(_mm512_mullo_epi32(position, _mm512_set1_epi32(value_blocks)), _mm512_set1_epi32(blk));
        value_scales[static_cast<size_t>(blk * 4 + k)].v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), stored, at, row_scales, 4);
      }
  }

  // The chunk positions of vector k, in quad order.
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i positions(int32_t k) {
    const __m512i element = _mm512_set_epi32(51, 50, 49, 48, 35, 34, 33, 32, 19, 18, 17, 16, 3, 2, 1, 0);
    return _mm512_add_epi32(element, _mm512_set1_epi32(4 * k));
  }
};

// An F16 cache's elements as 16-bit integer codes, made per chunk: each position's keys and
// values per 32-dimension block rounded to kCodeSteps steps of the block's largest magnitude,
// the query's likewise, the weights to kWeightSteps of the query's largest in the chunk.
// 8191 steps (14 bits) for elements of 11: a code's rounding, at most 2^-14 of its block's
// largest, is below the F16 element's own (2^-11 of itself) wherever the element is within 8×
// of its block's largest, and a dot product is ruled by its largest terms. The step counts keep
// the products' int32 sums exact: 32 of 8191 · 8191 per key block, 64 of 4095 · 8191 per value
// block and chunk.
//
// Positions in natural order: vector k is positions 16k..16k+15, so a weight vector's codes are
// one dword per pair of positions, as the values' products take them.
struct WordChunk {
  struct Query {
    float d;  // a code's worth
    int16_t qs[kKvQ8Block];
  };
  using WeightCode = int16_t;
  static constexpr float kCodeSteps = 8191.0f;
  static constexpr float kWeightSteps = 4095.0f;
  static constexpr int32_t kPerProduct = 2;

  // acc + Σ a·b over each 32-bit element's 2 signed 16-bit pairs (vpdpwssd). Here the
  // intrinsic: GCC 12 moved these accumulators between registers half as often through it as
  // through inline assembly (34 moves in the kernel against 68, at the same speed).
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i product(__m512i acc, __m512i a, __m512i b) {
    return _mm512_dpwssd_epi32(acc, a, b);
  }
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i score_start(const Query&) {
    return _mm512_setzero_si512();
  }
  static constexpr int32_t weights_at(int32_t group) { return 2 * group; }

  // Per pair of key dimensions d, d+1, the chunk's 64 keys as 4 vectors of 16 positions, each
  // element the two dimensions' codes: keys[d / 2 * 4 + k].
  std::vector<Integers> keys;
  // Per key block, the positions' code worth times the score scale (log2 units): [block * 4 + k].
  std::vector<Floats> key_scales;
  // Per 64 value dimensions and pair of positions j, j+1, 4 vectors of 16 dimensions, each
  // element the two positions' codes: values[(tile * 32 + j / 2) * 4 + k].
  std::vector<Integers> values;
  // Per value block, the positions' code worth (0 past the chunk's keys): [block * 4 + k].
  std::vector<Floats> value_scales;

  __attribute__((target(ORCHARD_VNNI_TARGET))) static void quantize_query(const float* q, Query* codes, int32_t blocks) {
    for (int32_t blk = 0; blk < blocks; ++blk) {
      const __m512 x0 = _mm512_loadu_ps(q + blk * kKvQ8Block), x1 = _mm512_loadu_ps(q + blk * kKvQ8Block + 16);
      const float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
      const __m512 to_code = _mm512_set1_ps(largest > 0 ? kCodeSteps / largest : 0.0f);
      codes[blk].d = largest / kCodeSteps;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes[blk].qs), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(x0, to_code))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes[blk].qs + 16),
                          _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(x1, to_code))));
    }
  }
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i positions(int32_t k) {
    return _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16 * k));
  }
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline void store_weights(__m512i rounded, int32_t k,
                                                                                                    WeightCode* block) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(block + 16 * k), _mm512_cvtsepi32_epi16(rounded));
  }

  // 16 F16 elements as int32 codes: round(x · to_code).
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i codes_of(const core::Half* x,
                                                                                                 __m512 to_code) {
    return _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))), to_code));
  }
  // Each element the low 16 bits of `even`'s and of `odd`'s.
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512i word_pairs(__m512i even, __m512i odd) {
    return _mm512_mask_blend_epi16(0xAAAAAAAA, even, _mm512_slli_epi32(odd, 16));
  }
  // The largest of each of 16 vectors' 32 magnitudes (F16 bits, sign cleared, which order as
  // the magnitudes do), as floats in the vectors' order: halves, quarters, qwords, dwords and
  // words of pairs of vectors folded together, a transposition that reduces as it goes.
  [[gnu::always_inline]] __attribute__((target(ORCHARD_VNNI_TARGET))) static inline __m512 largest_of_each(const __m512i v[16]) {
    __m512i halves[8], quarters[4], qwords[2];
    for (int32_t i = 0; i < 8; ++i)  // low 256 bits: vector 2i's halves folded; high: 2i+1's
      halves[i] = _mm512_max_epu16(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xEE));
    for (int32_t i = 0; i < 4; ++i)  // lane L: vector 4i + L
      quarters[i] = _mm512_max_epu16(_mm512_shuffle_i32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                                     _mm512_shuffle_i32x4(halves[2 * i], halves[2 * i + 1], 0xDD));
    for (int32_t i = 0; i < 2; ++i)  // lane L's qwords: vectors 8i + L and 8i + 4 + L
      qwords[i] = _mm512_max_epu16(_mm512_unpacklo_epi64(quarters[2 * i], quarters[2 * i + 1]),
                                   _mm512_unpackhi_epi64(quarters[2 * i], quarters[2 * i + 1]));
    // lane L's dwords: vectors L, 8 + L, 4 + L, 12 + L
    __m512i dwords = _mm512_max_epu16(_mm512_unpacklo_epi32(qwords[0], qwords[1]), _mm512_unpackhi_epi32(qwords[0], qwords[1]));
    dwords = _mm512_max_epu16(dwords, _mm512_srli_epi32(dwords, 16));
    const __m512i in_order = _mm512_permutexvar_epi32(_mm512_set_epi32(15, 11, 7, 3, 13, 9, 5, 1, 14, 10, 6, 2, 12, 8, 4, 0), dwords);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(in_order));
  }

  __attribute__((target(ORCHARD_VNNI_TARGET))) void take(const AttentionBlock& b, int32_t lo, int32_t end, float score_scale) {
    const int32_t key_blocks = b.head_dim / kKvQ8Block;
    const int32_t dims = b.value_dim ? b.value_dim : b.head_dim, value_blocks = dims / kKvQ8Block;
    const int32_t stored_keys = std::min(kChunk, end - lo);
    const int32_t last = stored_keys - 1;
    const __m512i magnitude = _mm512_set1_epi16(0x7fff);
    const __m512 code_steps = _mm512_set1_ps(kCodeSteps);

    const auto* block_keys = static_cast<const core::Half*>(b.keys) + key_element(b.head_dim, 0, lo);
    const int64_t keys_ahead = int64_t{kKeysAhead} * kKeyBlock * b.head_dim;
    keys.resize(static_cast<size_t>(b.head_dim / 2) * 4);
    key_scales.resize(static_cast<size_t>(key_blocks) * 4);
    const __m512 key_worth = _mm512_set1_ps(score_scale / kCodeSteps);
    for (int32_t blk = 0; blk < key_blocks; ++blk) {
      const core::Half* rows = block_keys + int64_t{blk} * kKvQ8Block * kKeyBlock;  // a row: one dimension's 64 keys
      __m512i largest_bits[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (int32_t d = 0; d < kKvQ8Block; ++d) {
        const core::Half* row = rows + int64_t{d} * kKeyBlock;
        __builtin_prefetch(row + keys_ahead);
        __builtin_prefetch(row + keys_ahead + 32);
        for (int32_t h = 0; h < 2; ++h)
          largest_bits[h] = _mm512_max_epu16(largest_bits[h], _mm512_and_si512(_mm512_loadu_si512(row + 32 * h), magnitude));
      }
      __m512 to_code[4];
      for (int32_t k = 0; k < 4; ++k) {
        const __m512i bits = largest_bits[k / 2];
        const __m512 largest = _mm512_cvtph_ps(k % 2 ? _mm512_extracti64x4_epi64(bits, 1) : _mm512_castsi512_si256(bits));
        to_code[k] = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_setzero_ps(), _CMP_GT_OQ), code_steps, largest);
        key_scales[static_cast<size_t>(blk * 4 + k)].v = _mm512_mul_ps(largest, key_worth);
      }
      for (int32_t d = 0; d < kKvQ8Block; d += 2) {
        const core::Half* row = rows + int64_t{d} * kKeyBlock;
        for (int32_t k = 0; k < 4; ++k)
          keys[static_cast<size_t>((blk * kKvQ8Block + d) / 2 * 4 + k)].v =
              word_pairs(codes_of(row + 16 * k, to_code[k]), codes_of(row + kKeyBlock + 16 * k, to_code[k]));
      }
    }

    // Rows past the chunk's last key repeat it (their weights are 0): nothing past the cache's
    // last stored position is read.
    const auto* first_values = static_cast<const core::Half*>(b.values) + int64_t{lo} * b.value_stride;
    auto value_row = [&](int32_t j) { return first_values + int64_t{std::min(j, last)} * b.value_stride; };
    alignas(64) float to_code[kMaxValueBlocks][kChunk];
    value_scales.resize(static_cast<size_t>(value_blocks) * 4);
    const __m512 value_worth = _mm512_set1_ps(1.0f / kCodeSteps);
    for (int32_t blk = 0; blk < value_blocks; ++blk)
      for (int32_t k = 0; k < 4; ++k) {
        __m512i bits[16];
        for (int32_t e = 0; e < 16; ++e)
          bits[e] = _mm512_and_si512(_mm512_loadu_si512(value_row(16 * k + e) + blk * kKvQ8Block), magnitude);
        const __m512 largest = largest_of_each(bits);
        _mm512_store_ps(&to_code[blk][16 * k],
                        _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_setzero_ps(), _CMP_GT_OQ), code_steps, largest));
        const __mmask16 stored = _mm512_cmplt_epi32_mask(positions(k), _mm512_set1_epi32(stored_keys));
        value_scales[static_cast<size_t>(blk * 4 + k)].v = _mm512_maskz_mul_ps(stored, largest, value_worth);
      }
    values.resize(static_cast<size_t>(dims / 64) * (kChunk / 2) * 4);
    for (int32_t tile = 0; tile < dims / 64; ++tile)
      for (int32_t j = 0; j < kChunk; j += 2) {
        const core::Half* even = value_row(j) + tile * 64;
        const core::Half* odd = value_row(j + 1) + tile * 64;
        __builtin_prefetch(even + int64_t{kChunk} * b.value_stride);
        __builtin_prefetch(even + int64_t{kChunk} * b.value_stride + 32);
        __builtin_prefetch(odd + int64_t{kChunk} * b.value_stride);
        __builtin_prefetch(odd + int64_t{kChunk} * b.value_stride + 32);
        for (int32_t k = 0; k < 4; ++k) {
          const int32_t blk = 2 * tile + k / 2;
          values[static_cast<size_t>((tile * (kChunk / 2) + j / 2) * 4 + k)].v =
              word_pairs(codes_of(even + 16 * k, _mm512_set1_ps(to_code[blk][j])), codes_of(odd + 16 * k, _mm512_set1_ps(to_code[blk][j + 1])));
        }
      }
  }
};

// A tile's 4 query vectors (the block's last one repeated where it runs out) and their running
// softmax, in lanes: lane i of `max` and `sum` (all 4 elements) is query i's largest score so
// far and Σ 2^(score − largest), base 2.
template <class C>
struct Tile {
  const typename C::Query* codes[kQueries];
  float* out[kQueries];
  int32_t first_key[kQueries], n_keys[kQueries];
  float sink[kQueries];
  int32_t count, min_first, max_keys;
  alignas(64) float max[16];
  alignas(64) float sum[16];
};

// What a tile's pass over a chunk hands from one step to the next: its scores in the chunk's
// order (log2 units), then its weights' codes per value block, [query][block][the chunk's
// order] (so the codes of the positions one product takes are one dword), and per query the
// factor that brings the earlier outputs to the new running largest M' (2^(M − M')) and the
// worth of a code in each value block (its unit times 2^(C − M')).
struct TileScores {
  __m512 s[kQueries][4];
};
template <class C>
struct TileWeights {
  alignas(64) typename C::WeightCode codes[kQueries][kMaxValueBlocks][kChunk];
  float rescale[kQueries];
  float unit[kQueries][kMaxValueBlocks];
  bool written[kQueries];  // whether earlier chunks wrote the query's output
};

// The chunk's scores, two queries at a time so that their 8 accumulators, 8 sums and the keys'
// 4 vectors stay in registers: per key block Σ key code · query code (less what a ByteChunk's
// +128 added), times the key's and the query's scales.
template <class C>
__attribute__((target(ORCHARD_VNNI_TARGET))) inline void chunk_scores(const AttentionBlock& b, const C& c, const Tile<C>& t,
                                                                  TileScores& out) {
  const int32_t key_blocks = b.head_dim / kKvQ8Block;
  for (int32_t i0 = 0; i0 < kQueries; i0 += 2) {
    __m512 s[2][4];
    for (int32_t blk = 0; blk < key_blocks; ++blk) {
      __m512i acc[2][4];
      for (int32_t i = 0; i < 2; ++i)
        for (int32_t k = 0; k < 4; ++k) acc[i][k] = C::score_start(t.codes[i0 + i][blk]);
      const Integers* block_keys = &c.keys[static_cast<size_t>(blk * kKvQ8Block / C::kPerProduct * 4)];
#pragma GCC unroll 16
      for (int32_t e = 0; e < kKvQ8Block / C::kPerProduct; ++e) {
        const Integers* u = block_keys + 4 * e;
        for (int32_t i = 0; i < 2; ++i) {
          int32_t codes;
          std::memcpy(&codes, t.codes[i0 + i][blk].qs + e * C::kPerProduct, sizeof codes);
          const __m512i q = _mm512_set1_epi32(codes);
          for (int32_t k = 0; k < 4; ++k) acc[i][k] = C::product(acc[i][k], u[k].v, q);
        }
      }
      for (int32_t i = 0; i < 2; ++i) {
        const __m512 query_scale = _mm512_set1_ps(t.codes[i0 + i][blk].d);
        for (int32_t k = 0; k < 4; ++k) {
          const __m512 scale = _mm512_mul_ps(c.key_scales[static_cast<size_t>(blk * 4 + k)].v, query_scale);
          const __m512 x = _mm512_cvtepi32_ps(acc[i][k]);
          s[i][k] = blk == 0 ? _mm512_mul_ps(x, scale) : _mm512_fmadd_ps(x, scale, s[i][k]);
        }
      }
    }
    for (int32_t i = 0; i < 2; ++i)
      for (int32_t k = 0; k < 4; ++k) out.s[i0 + i][k] = s[i][k];
  }
}

// The running softmax over the chunk at `lo`, four queries in the four lanes: the chunk's
// largest score C, the new largest M' = max(M, C), the sum rescaled by 2^(M − M'), this chunk's
// weights taken as 2^(score − C), then each weight times its value block's scale rounded to
// kWeightSteps of the query's largest (≤ half a step off).
template <class C>
__attribute__((target(ORCHARD_VNNI_TARGET))) inline void chunk_softmax(const AttentionBlock& b, const C& c, Tile<C>& t, int32_t lo,
                                                                   const TileScores& scores, TileWeights<C>& w) {
  const int32_t dims = b.value_dim ? b.value_dim : b.head_dim, value_blocks = dims / kKvQ8Block;
  // Keys a query does not see (its window's start, its own end, the cache's end) score −∞.
  const __m512 minus_infinity = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 s[kQueries][4], row_max[kQueries];
  for (int32_t i = 0; i < kQueries; ++i) {
    for (int32_t k = 0; k < 4; ++k) s[i][k] = scores.s[i][k];
    if (lo < t.first_key[i] || lo + kChunk > t.n_keys[i]) {
      const __m512i from = _mm512_set1_epi32(t.first_key[i] - lo), to = _mm512_set1_epi32(t.n_keys[i] - lo);
      for (int32_t k = 0; k < 4; ++k) {
        const __m512i position = C::positions(k);
        const __mmask16 seen = _mm512_cmpge_epi32_mask(position, from) & _mm512_cmplt_epi32_mask(position, to);
        s[i][k] = _mm512_mask_blend_ps(seen, minus_infinity, s[i][k]);
      }
    }
    row_max[i] = _mm512_max_ps(_mm512_max_ps(s[i][0], s[i][1]), _mm512_max_ps(s[i][2], s[i][3]));
  }
  const __m512 old_max = _mm512_load_ps(t.max), chunk_max = lanes_reduced<Reduction::kLargest>(row_max);
  const __m512 new_max = _mm512_max_ps(old_max, chunk_max);
  const __m512 rescale = exp2_ps(_mm512_sub_ps(old_max, new_max));
  const __m512 to_running = exp2_ps(_mm512_sub_ps(chunk_max, new_max));
  __m512 p[kQueries][4], row_sum[kQueries];
  for (int32_t i = 0; i < kQueries; ++i) {
    const __m512 largest = lane_everywhere(chunk_max, i);
    for (int32_t k = 0; k < 4; ++k) p[i][k] = exp2_ps(_mm512_sub_ps(s[i][k], largest));
    row_sum[i] = _mm512_add_ps(_mm512_add_ps(p[i][0], p[i][1]), _mm512_add_ps(p[i][2], p[i][3]));
  }
  const __m512 chunk_sum = lanes_reduced<Reduction::kSum>(row_sum);
  _mm512_store_ps(t.sum, _mm512_fmadd_ps(_mm512_load_ps(t.sum), rescale, _mm512_mul_ps(to_running, chunk_sum)));
  _mm512_store_ps(t.max, new_max);
  for (int32_t i = 0; i < kQueries; ++i) {
    w.rescale[i] = rescale[4 * i];
    w.written[i] = old_max[4 * i] != -std::numeric_limits<float>::infinity();
  }
  // Each weight p·s as a code of the query's largest in the chunk: four queries' largest found
  // at once, then their scales to codes in one division.
  for (int32_t blk = 0; blk < value_blocks; ++blk) {
    const Floats* scales = &c.value_scales[static_cast<size_t>(blk * 4)];
    __m512 row_largest[kQueries];
    for (int32_t i = 0; i < kQueries; ++i) {
      row_largest[i] = _mm512_mul_ps(p[i][0], scales[0].v);
      for (int32_t k = 1; k < 4; ++k) row_largest[i] = _mm512_max_ps(row_largest[i], _mm512_mul_ps(p[i][k], scales[k].v));
    }
    const __m512 largest = lanes_reduced<Reduction::kLargest>(row_largest);
    const __m512 to_code = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(largest, _mm512_setzero_ps(), _CMP_GT_OQ),
                                               _mm512_set1_ps(C::kWeightSteps), largest);
    for (int32_t i = 0; i < kQueries; ++i) {
      w.unit[i][blk] = largest[4 * i] / C::kWeightSteps * to_running[4 * i];
      const __m512 query_to_code = lane_everywhere(to_code, i);
      for (int32_t k = 0; k < 4; ++k)
        C::store_weights(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(p[i][k], scales[k].v), query_to_code)), k, w.codes[i][blk]);
    }
  }
}

// The outputs, 64 dimensions (two value blocks) at a time: out · 2^(M − M') + 2^(C − M') ·
// Σ code·value · (the block's code worth).
template <class C>
__attribute__((target(ORCHARD_VNNI_TARGET))) inline void chunk_outputs(const AttentionBlock& b, const C& c, const Tile<C>& t,
                                                                   const TileWeights<C>& w) {
  const int32_t dims = b.value_dim ? b.value_dim : b.head_dim;
  constexpr int32_t kGroups = kChunk / C::kPerProduct;  // runs of positions one product takes
  for (int32_t tile = 0; tile < dims / 64; ++tile) {
    const int32_t blk = 2 * tile;
    __m512i acc[kQueries][4];
    for (int32_t i = 0; i < kQueries; ++i)
      for (int32_t k = 0; k < 4; ++k) acc[i][k] = _mm512_setzero_si512();
    // Four groups a step: GCC unrolls the inner loop whole, as it does not a 16- or 32-step one.
    for (int32_t g0 = 0; g0 < kGroups; g0 += 4)
      for (int32_t g = g0; g < g0 + 4; ++g) {
        const Integers* v = &c.values[static_cast<size_t>((tile * kGroups + g) * 4)];
        const int32_t at = C::weights_at(g);
        for (int32_t i = 0; i < kQueries; ++i) {
          int32_t low, high;
          std::memcpy(&low, &w.codes[i][blk][at], sizeof low);
          std::memcpy(&high, &w.codes[i][blk + 1][at], sizeof high);
          const __m512i w_low = _mm512_set1_epi32(low), w_high = _mm512_set1_epi32(high);
          acc[i][0] = C::product(acc[i][0], w_low, v[0].v);
          acc[i][1] = C::product(acc[i][1], w_low, v[1].v);
          acc[i][2] = C::product(acc[i][2], w_high, v[2].v);
          acc[i][3] = C::product(acc[i][3], w_high, v[3].v);
        }
      }
    for (int32_t i = 0; i < t.count; ++i) {
      const __m512 keep = _mm512_set1_ps(w.rescale[i]);
      for (int32_t k = 0; k < 4; ++k) {
        float* o = t.out[i] + tile * 64 + 16 * k;
        const __m512 part = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][k]), _mm512_set1_ps(w.unit[i][blk + k / 2]));
        _mm512_storeu_ps(o, w.written[i] ? _mm512_fmadd_ps(_mm512_loadu_ps(o), keep, part) : part);
      }
    }
  }
}

// Tiles that take each step of a chunk before any takes the next: one tile's steps are a chain
// (the softmax's reductions and e^x wait on its scores, the codes on the softmax), which the
// next tiles' steps, independent of it, fill.
constexpr int32_t kStepTiles = 4;

// The tiles' passes over the chunk at `lo`, for those that see keys in it.
template <class C>
__attribute__((target(ORCHARD_VNNI_TARGET))) inline void take_chunk(const AttentionBlock& b, const C& c, Tile<C>* tiles,
                                                                int32_t n_tiles, int32_t lo) {
  TileScores scores[kStepTiles];
  TileWeights<C> weights[kStepTiles];
  int32_t taking[kStepTiles];
  for (int32_t next = 0; next < n_tiles;) {
    int32_t n = 0;
    for (; next < n_tiles && n < kStepTiles; ++next)
      if (tiles[next].min_first < lo + kChunk && lo < tiles[next].max_keys) taking[n++] = next;
    for (int32_t j = 0; j < n; ++j) chunk_scores(b, c, tiles[taking[j]], scores[j]);
    for (int32_t j = 0; j < n; ++j) chunk_softmax(b, c, tiles[taking[j]], lo, scores[j], weights[j]);
    for (int32_t j = 0; j < n; ++j) chunk_outputs(b, c, tiles[taking[j]], weights[j]);
  }
}

template <class C>
__attribute__((target(ORCHARD_VNNI_TARGET))) void attend(const AttentionBlock& b) {
  const int32_t key_blocks = b.head_dim / kKvQ8Block;
  const int32_t dims = b.value_dim ? b.value_dim : b.head_dim;
  const float score_scale =
      (b.scale != 0 ? b.scale : 1.0f / std::sqrt(static_cast<float>(b.head_dim))) * std::numbers::log2e_v<float>;
  const int32_t vectors = b.n_rows * b.group;
  thread_local C chunk;
  thread_local std::vector<typename C::Query> query_codes;
  query_codes.resize(static_cast<size_t>(kTileGroup) * kQueries * static_cast<size_t>(key_blocks));
  Tile<C> tiles[kTileGroup];
  for (int32_t group_first = 0; group_first < vectors; group_first += kTileGroup * kQueries) {
    const int32_t n_tiles = std::min(kTileGroup, (vectors - group_first + kQueries - 1) / kQueries);
    int32_t min_first = std::numeric_limits<int32_t>::max(), max_keys = 0;
    for (int32_t ti = 0; ti < n_tiles; ++ti) {
      Tile<C>& t = tiles[ti];
      const int32_t first = group_first + ti * kQueries;
      t.count = std::min(kQueries, vectors - first);
      t.min_first = std::numeric_limits<int32_t>::max();
      t.max_keys = 0;
      for (int32_t i = 0; i < kQueries; ++i) {
        const int32_t v = first + std::min(i, t.count - 1), row = v / b.group, head = v % b.group;
        const float* q = b.q + row * b.row_stride + static_cast<int64_t>(head) * b.head_dim;
        t.out[i] = b.out + row * (b.out_row_stride ? b.out_row_stride : b.row_stride) + static_cast<int64_t>(head) * dims;
        t.first_key[i] = b.first_key ? b.first_key[row] : 0;
        t.n_keys[i] = b.n_keys[row];
        t.sink[i] = b.sinks ? b.sinks[head] : 0.0f;
        typename C::Query* codes = &query_codes[static_cast<size_t>((ti * kQueries + i) * key_blocks)];
        C::quantize_query(q, codes, key_blocks);
        t.codes[i] = codes;
        t.min_first = std::min(t.min_first, t.first_key[i]);
        t.max_keys = std::max(t.max_keys, t.n_keys[i]);
      }
      for (int32_t e = 0; e < 16; ++e) {
        t.max[e] = -std::numeric_limits<float>::infinity();
        t.sum[e] = 0.0f;
      }
      min_first = std::min(min_first, t.min_first);
      max_keys = std::max(max_keys, t.max_keys);
    }
    // Chunks are the cache's key blocks; a tile takes those holding keys it sees.
    for (int32_t lo = min_first / kChunk * kChunk; lo < max_keys; lo += kChunk) {
      chunk.take(b, lo, max_keys, score_scale);
      take_chunk(b, chunk, tiles, n_tiles, lo);
    }
    for (int32_t ti = 0; ti < n_tiles; ++ti) {
      const Tile<C>& t = tiles[ti];
      for (int32_t i = 0; i < t.count; ++i) {
        float denominator = t.sum[4 * i];
        // A sink's logit joins the denominator only (base e, the running largest base 2).
        if (b.sinks) denominator += exp_approx(t.sink[i] - t.max[4 * i] * std::numbers::ln2_v<float>);
        const __m512 inverse = _mm512_set1_ps(1.0f / denominator);
        for (int32_t d = 0; d < dims; d += 16) _mm512_storeu_ps(t.out[i] + d, _mm512_mul_ps(_mm512_loadu_ps(t.out[i] + d), inverse));
      }
    }
  }
}

}  // namespace

void attend_block_vnni(const AttentionBlock& block) {
  if (block.type == KvType::F16) return attend<WordChunk>(block);
  attend<ByteChunk>(block);
}

#else

void attend_block_vnni(const AttentionBlock&) { throw Error("VNNI attention called on a machine without AVX-512"); }

#endif

}  // namespace orchard::model::ops
