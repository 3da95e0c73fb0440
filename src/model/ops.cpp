#include "model/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>

#include "core/kernels.h"
#include "core/quant.h"
#include "model/attention_amx.h"
#include "model/attention_vnni.h"
#include "model/exp_approx.h"

#if defined(__x86_64__)
// GCC 12's _mm512_cvtph_ps and _mm512_cvtepi8_epi32 start from _mm512_undefined_*(), which it
// then reports as (maybe-)uninitialized wherever they inline (as in core/kernels/x86/avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace orchard::model::ops {
namespace {

// Attention and SiLU are hot enough during prompt processing to want the widest vectors the
// CPU has; everything else auto-vectorizes fine at the baseline ISA.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_X86_DISPATCH 1
// The kernel set's instructions (they need at least what these clones do), so that a smaller
// set chosen with ORCHARD_KERNELS computes attention and norms as that CPU would too.
bool use_avx512() { return core::active_vector_isa() == core::VectorIsa::kAvx512; }
bool use_avx2() { return core::active_vector_isa() == core::VectorIsa::kAvx2; }
#endif

// gate[i] = silu(gate[i]) * up[i], inlined into each ISA's clone like the attention loops.
// Below -87, where e^-x is clamped, silu(x) = x·e^x is under 1e-35: it is taken as 0 there.
[[gnu::always_inline]] inline void silu_mul_loop(float* __restrict gate, const float* __restrict up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float silu = x / (1.0f + exp_approx(-x));
    gate[i] = (x < -87.0f ? 0.0f : silu) * up[i];
  }
}

// gpt-oss's clamped SwiGLU (see ops.h). Where 1.702·g is below -87.3 (e^-x clamped), the
// result is under 1e-36 and taken as 0, as silu_mul does.
[[gnu::always_inline]] inline void swiglu_clamped_loop(float* __restrict gate, const float* __restrict up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    const float glu = g / (1.0f + exp_approx(-kAlpha * g));
    gate[i] = (kAlpha * g < -87.0f ? 0.0f : glu) * (u + 1.0f);
  }
}

// out[i] = x[i] / rms(x) · weight[i], with Σ x[i]² in double, element i added to partial sum
// i % 16 and the 16 combined pairwise (8 + 8, then 4 + 4, ...). One serial chain of n adds was
// the longest stretch of a decode step that only the main thread works on (2048 wide: 2.4 µs,
// twice a layer and once for the output, the other threads waiting): 16 chains are short and
// vectorize at any width. The square of a float is exact in double, so a fused multiply-add
// rounds as a multiply and an add, and the scaling has no add: every ISA's clone gives the same
// bits.
[[gnu::always_inline]] inline void rms_norm_loops(const float* x, const float* weight, float* out, int64_t n, float eps) {
  constexpr int kLanes = 16;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int j = 0; i + j < n; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  const float scale = static_cast<float>(1.0 / std::sqrt(lane[0] / static_cast<double>(n) + eps));
  for (i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// 16 floats as one value (GCC/Clang vector extensions), so the tiles below compile to one zmm,
// two ymm or four NEON registers, whichever the clone is built for. at16 views 16 floats at any
// address as one, by reference: a vector passed by value would change the ABI between clones.
using Vec16 = float __attribute__((vector_size(64)));
using UnalignedVec16 = float __attribute__((vector_size(64), aligned(4), may_alias));
[[gnu::always_inline]] inline const UnalignedVec16& at16(const float* p) {
  return *reinterpret_cast<const UnalignedVec16*>(p);
}
[[gnu::always_inline]] inline UnalignedVec16& at16(float* p) { return *reinterpret_cast<UnalignedVec16*>(p); }
// 8 floats, for the AVX2 clone: GCC does not split a 16-float vector into two ymm registers
// there but lowers it through memory and general registers, element pairs at a time.
using Vec8 = float __attribute__((vector_size(32)));
using UnalignedVec8 = float __attribute__((vector_size(32), aligned(4), may_alias));

// The vector view of p for a tile's vector type.
template <class V>
[[gnu::always_inline]] inline auto& at(const float* p) {
  if constexpr (sizeof(V) == 64) return at16(p);
  else return *reinterpret_cast<const UnalignedVec8*>(p);
}
template <class V>
[[gnu::always_inline]] inline auto& at(float* p) {
  if constexpr (sizeof(V) == 64) return at16(p);
  else return *reinterpret_cast<UnalignedVec8*>(p);
}

// Tile sizes, per clone (its Loads' kQueries, kKeys, kDims). AVX-512 has 32 registers: a
// prompt's tiles are 4 query vectors × 32 keys of scores (8 accumulators; per head dimension, 2
// key loads and 4 broadcasts for 8 FMAs) and 4 query vectors × 64 dimensions of output (16
// accumulators; per key, 4 value loads and 4 broadcasts for 16 FMAs); over an F16 cache a decode
// step's 8 query heads of a KV head are one tile of 8 vectors × 32 keys and × 32 dimensions
// (`Avx512DecodeLoads`, 16 accumulators each), so each key and value is loaded and converted
// once a step rather than once per 4 heads (decode steps at depth 1.1-1.4x faster; prompt
// blocks were ~1.1x slower on two threads in such tiles, so they keep 4). The portable clone takes the prompt's tiles (NEON's 32 registers of a quarter the
// width). AVX2 has 16 registers of half the width, where the same tiles in 16-float vectors went
// through memory on every FMA (attention was 35% of a TinyLlama pp512), so its clone takes
// 8-float vectors, 4 queries, 16 keys and 16 dimensions (8 ymm accumulators each). Scores keep
// rows of whole 32-key tiles in every clone. A query's sums run in the same order whatever its
// tile, so its result does not depend on the vectors sharing the tile.
constexpr int32_t kMaxTileQueries = 8, kTileKeys = 32;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// How a clone reads the cache: a vector of F32, F16 or int8 (Q8_0 codes) elements as floats,
// and one F16 scale. Outputs go by reference: a vector returned by value would change the ABI
// between clones. Not always_inline: the conversions are intrinsics of the clone's target, which
// GCC inlines only into a function of that target (here, once the tile loops are inlined into
// the clone); 16-float vectors of GCC's __builtin_convertvector came out one element at a time.
struct PortableLoads {
  using V = Vec16;
  static constexpr int32_t kQueries = 4, kKeys = kTileKeys, kDims = 64;
  static inline void load(V& out, const float* p) { out = at16(p); }
  static inline void load(V& out, const core::Half* p) {
#if defined(__aarch64__)
    for (int i = 0; i < 4; ++i) {
      const float32x4_t x = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
      std::memcpy(reinterpret_cast<float*>(&out) + 4 * i, &x, sizeof x);
    }
#else
    for (int i = 0; i < 16; ++i) out[i] = core::half_to_float(p[i]);
#endif
  }
  static inline void load(V& out, const int8_t* p) {
#if defined(__aarch64__)
    const int8x16_t b = vld1q_s8(p);
    const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    const float32x4_t x[4] = {vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
                              vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))};
    std::memcpy(&out, x, sizeof x);
#else
    for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(p[i]);
#endif
  }
  static inline float scalar(core::Half h) {
#if defined(__aarch64__)
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
#else
    return core::half_to_float(h);
#endif
  }
};

#ifdef ORCHARD_X86_DISPATCH
struct Avx512Loads {
  using V = Vec16;
  static constexpr int32_t kQueries = 4, kKeys = kTileKeys, kDims = 64;
  __attribute__((target("avx512f,f16c"))) static inline void load(V& out, const float* p) { out = at16(p); }
  __attribute__((target("avx512f,f16c"))) static inline void load(V& out, const core::Half* p) {
    out = reinterpret_cast<V>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  __attribute__((target("avx512f,f16c"))) static inline void load(V& out, const int8_t* p) {
    out = reinterpret_cast<V>(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
  }
  __attribute__((target("avx512f,f16c"))) static inline float scalar(core::Half h) { return _cvtsh_ss(h); }
};

// A decode step's tiles over an F16 cache (one row, whole groups of 8 query heads). An F32
// cache's decode steps measured slower in them (bench_attention decode_attention, depth 4096
// and 16384: 1.1-1.3x), so it keeps the prompt's.
struct Avx512DecodeLoads : Avx512Loads {
  static constexpr int32_t kQueries = 8, kDims = 32;
  static bool suits(const AttentionBlock& b) { return b.type == KvType::F16 && b.n_rows == 1 && b.group % kQueries == 0; }
};

struct Avx2Loads {
  using V = Vec8;
  static constexpr int32_t kQueries = 4, kKeys = 16, kDims = 16;
  __attribute__((target("avx2,fma,f16c"))) static inline void load(V& out, const float* p) {
    out = *reinterpret_cast<const UnalignedVec8*>(p);
  }
  __attribute__((target("avx2,fma,f16c"))) static inline void load(V& out, const core::Half* p) {
    out = reinterpret_cast<V>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  __attribute__((target("avx2,fma,f16c"))) static inline void load(V& out, const int8_t* p) {
    out = reinterpret_cast<V>(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))));
  }
  __attribute__((target("avx2,fma,f16c"))) static inline float scalar(core::Half h) { return _cvtsh_ss(h); }
};
#endif

// The block's keys and values as elements of their type, with their scales where Q8_0.
template <class L, KvType kType>
struct CacheView {
  using T = std::conditional_t<kType == KvType::F32, float, std::conditional_t<kType == KvType::F16, core::Half, int8_t>>;
  static constexpr bool kQuantized = kType == KvType::Q8_0;
  const T* keys;
  const T* values;
  const core::Half* key_scales;
  const core::Half* value_scales;

  explicit CacheView(const AttentionBlock& b)
      : keys(static_cast<const T*>(b.keys)),
        values(static_cast<const T*>(b.values)),
        key_scales(b.key_scales),
        value_scales(b.value_scales) {}
  // One element as a float, for the value dimensions the tiles leave.
  [[gnu::always_inline]] inline float value(const AttentionBlock& b, int32_t j, int32_t d) const {
    return element(values[j * b.value_stride + d], kQuantized ? value_scales[j * b.value_scale_stride + d / kKvQ8Block] : 0);
  }
  [[gnu::always_inline]] static inline float element(T x, core::Half scale) {
    if constexpr (kType == KvType::F32) return x;
    else if constexpr (kType == KvType::F16) return L::scalar(x);
    else return static_cast<float>(x) * L::scalar(scale);
  }
};

// Keys a block's tiles take at a time: every query tile of the block takes its scores, softmax
// and outputs over one chunk before the next chunk starts, so a chunk's keys and values
// come from memory once for the whole block (a decode step's 8 query heads of a KV head are two
// tiles) and stay in L1 for the other tiles and the output's dimension tiles, rather than being
// streamed again per tile and per 16 dimensions (which made decode at 4k depth half its speed).
// 64 keys of 64 F32 dimensions are 16 KiB.
constexpr int32_t kChunkKeys = 64;
// Query vectors whose tiles are taken through the chunks together: a block of 8 rows of 8 query
// heads is one group.
constexpr int32_t kGroupVectors = 128;
// Keys whose scores a tile group keeps at a time (attend_block_typed): at a prompt block's 64
// query vectors, 256 KiB of scores.
constexpr int32_t kSpanKeys = 1024;

// Pointers to the block's query vectors (row-major over rows, then heads), the tile's last
// ones repeated where the block runs out, so every tile has its clone's kQueries of them.
struct QueryTile {
  const float* q[kMaxTileQueries];
  float* out[kMaxTileQueries];
  int32_t first_key[kMaxTileQueries];
  int32_t n_keys[kMaxTileQueries];
  float sink[kMaxTileQueries];
  float* scores[kMaxTileQueries];  // one span's: key span + j at scores[i][j]
  int32_t span;
  int32_t count, max_keys;
  int32_t min_first;  // the tile reads keys [min_first, max_keys)
};

// The tile's rows of scores, `span_keys` each, start at `scores`.
template <int32_t kQueries>
[[gnu::always_inline]] inline QueryTile query_tile(const AttentionBlock& b, int32_t first, float* scores, int32_t span_keys) {
  QueryTile tile{};
  const int32_t total = b.n_rows * b.group;
  tile.count = std::min(kQueries, total - first);
  tile.min_first = b.n_keys[0];
  for (int32_t i = 0; i < kQueries; ++i) {
    const int32_t v = first + std::min(i, tile.count - 1);
    const int32_t row = v / b.group, head = v % b.group;
    tile.q[i] = b.q + row * b.row_stride + static_cast<int64_t>(head) * b.head_dim;
    tile.out[i] = b.out + row * (b.out_row_stride ? b.out_row_stride : b.row_stride) +
                  static_cast<int64_t>(head) * (b.value_dim ? b.value_dim : b.head_dim);
    tile.first_key[i] = b.first_key ? b.first_key[row] : 0;
    tile.n_keys[i] = b.n_keys[row];
    tile.sink[i] = b.sinks ? b.sinks[head] : 0.0f;
    tile.scores[i] = scores + int64_t{std::min(i, tile.count - 1)} * span_keys;
    tile.max_keys = std::max(tile.max_keys, tile.n_keys[i]);
    tile.min_first = std::min(tile.min_first, tile.first_key[i]);
  }
  return tile;
}

// How many of the cache's key blocks ahead the score loop asks for its keys' cache lines.
constexpr int32_t kKeysAheadBlocks = 2;

// The two cache lines from `p` on (the cache's rows start on lines): a tile of 128 bytes whole,
// and a narrower tile's line with the one beside it, which the row's other tile reads next (an
// F32 output tile's 256 bytes get their first two; the rest is the hardware prefetcher's). A
// decode step's F16 tiles are 64 bytes of a 128-byte row and read a row's lines in two strided
// passes; asking for only their own line, the other came late (bench_attention decode_attention,
// depth 4096, one thread: 6.1-6.6 ms against 5.1-5.3 with the neighbour asked for too).
[[gnu::always_inline]] inline void ask_for_two_lines(const void* p) {
  __builtin_prefetch(p);
  __builtin_prefetch(static_cast<const char*>(p) + 64);
}


// scores[i][j - span] = q_i · k_j · scale for j in the chunk [lo, hi) within the tile's
// [min_first, max_keys), in
// whole key tiles at multiples of their width, so each lies in one block of the cache (the scores
// of the keys a tile covers outside those are never read: the cache holds whole blocks). Q8_0 keys are
// scaled as they load, their 32-dimension blocks' scales for the tile's keys loaded once per block.
template <class L, KvType kType>
[[gnu::always_inline]] inline void tile_scores(const AttentionBlock& b, const CacheView<L, kType>& c, const QueryTile& t,
                                               int32_t lo, int32_t hi) {
  using V = typename L::V;
  constexpr int32_t kQueries = L::kQueries, kKeys = L::kKeys, kLanes = sizeof(V) / sizeof(float), kVecs = kKeys / kLanes;
  constexpr bool kQuantized = CacheView<L, kType>::kQuantized;
  const float scale = b.scale != 0 ? b.scale : 1.0f / std::sqrt(static_cast<float>(b.head_dim));
  const int32_t block = kQuantized ? kKvQ8Block : b.head_dim;
  hi = std::min(hi, t.max_keys);
  int32_t j0 = std::max(lo, t.min_first) / kKeys * kKeys;
  const int64_t keys_ahead = int64_t{kKeysAheadBlocks} * kKeyBlock * b.head_dim;
  for (; j0 < hi; j0 += kKeys) {
    V acc[kQueries][kVecs] = {};
    const auto* tile_keys = c.keys + key_element(b.head_dim, 0, j0);
    for (int32_t d0 = 0; d0 < b.head_dim; d0 += block) {
      V block_scale[kVecs];
      if constexpr (kQuantized)
        for (int32_t v = 0; v < kVecs; ++v)
          L::load(block_scale[v], c.key_scales + key_element(b.head_dim / kKvQ8Block, d0 / kKvQ8Block, j0) + kLanes * v);
      for (int32_t d = d0; d < d0 + block; ++d) {
        const auto* k = tile_keys + int64_t{d} * kKeyBlock;
        ask_for_two_lines(k + keys_ahead);
        V kv[kVecs];
        for (int32_t v = 0; v < kVecs; ++v) {
          L::load(kv[v], k + kLanes * v);
          if constexpr (kQuantized) kv[v] *= block_scale[v];
        }
        for (int32_t i = 0; i < kQueries; ++i) {
          const float qd = t.q[i][d];
          for (int32_t v = 0; v < kVecs; ++v) acc[i][v] += qd * kv[v];
        }
      }
    }
    for (int32_t i = 0; i < kQueries; ++i)
      for (int32_t v = 0; v < kVecs; ++v) at<V>(t.scores[i] + (j0 - t.span) + kLanes * v) = acc[i][v] * scale;
  }
}

// A query's softmax so far, over the spans of keys already taken (online softmax): the largest
// score, the sum of e^(score - largest), and the factor by which the last span's new largest
// rescales what the earlier spans left in its output.
struct RunningSoftmax {
  float max[kMaxTileQueries];
  float sum[kMaxTileQueries];
  float rescale[kMaxTileQueries];
};

// Each of the tile's rows' scores over the span's keys [span, end) becomes e^(score - its
// largest so far), zero for the tile's keys the row does not see, and the running softmax takes
// the span in. The maximum and the sum run in the clone's vectors and e^x in a loop of its own,
// so that all three vectorize (a float reduction into one running value stays scalar: it was a
// fifth of decode attention's time at depth).
template <class L>
[[gnu::always_inline]] inline void span_softmax(const QueryTile& t, int32_t end, RunningSoftmax& run) {
  using V = typename L::V;
  constexpr int32_t kLanes = sizeof(V) / sizeof(float);
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  const int32_t tile_first = std::max(t.min_first, t.span) - t.span, tile_end = std::min(t.max_keys, end) - t.span;
  for (int32_t i = 0; i < t.count; ++i) {
    float* s = t.scores[i];
    const int32_t first = std::max(t.first_key[i], t.span) - t.span, n = std::min(t.n_keys[i], end) - t.span;
    run.rescale[i] = 1.0f;
    if (first >= n) {
      for (int32_t j = tile_first; j < tile_end; ++j) s[j] = 0.0f;
      continue;
    }
    float max = s[first];
    V lanes = V{} + max;
    int32_t j = first;
    for (; j + kLanes <= n; j += kLanes) {
      const V x = at<V>(s + j);
      lanes = x > lanes ? x : lanes;
    }
    for (; j < n; ++j) max = std::max(max, s[j]);
    for (int32_t l = 0; l < kLanes; ++l) max = std::max(max, lanes[l]);
    const float old_max = run.max[i], new_max = std::max(old_max, max);
    for (j = first; j < n; ++j) s[j] = exp_approx(s[j] - new_max);
    lanes = V{};
    for (j = first; j + kLanes <= n; j += kLanes) lanes += at<V>(s + j);
    float sum = 0.0f;
    for (; j < n; ++j) sum += s[j];
    for (int32_t l = 0; l < kLanes; ++l) sum += lanes[l];
    for (j = tile_first; j < first; ++j) s[j] = 0.0f;
    for (j = n; j < tile_end; ++j) s[j] = 0.0f;
    run.rescale[i] = old_max == kNone ? 0.0f : exp_approx(old_max - new_max);
    run.sum[i] = run.sum[i] * run.rescale[i] + sum;
    run.max[i] = new_max;
  }
}

// out_i = out_i · rescale_i + Σ_j p_ij · v_j over the chunk's keys [lo, hi) within the tile's,
// p_ij at scores[i][j - span]; a null `rescale` starts the output (the tile's first chunk).
// Q8_0 values scaled by their block's scale as they load.
template <class L, KvType kType>
[[gnu::always_inline]] inline void tile_output(const AttentionBlock& b, const CacheView<L, kType>& c, const QueryTile& t,
                                               int32_t lo, int32_t hi, const float* rescale) {
  using V = typename L::V;
  constexpr int32_t kQueries = L::kQueries, kDims = L::kDims, kLanes = sizeof(V) / sizeof(float), kVecs = kDims / kLanes;
  const int32_t dims = b.value_dim ? b.value_dim : b.head_dim;
  const int32_t first = std::max(lo, t.min_first);
  hi = std::min(hi, t.max_keys);
  // The tile's probabilities for these keys, key by key: the loop below then reads each key's
  // kQueries from one pointer. Read from their rows, the row pointers did not stay in AVX2's
  // registers beside everything else (4 more loads for 8 FMAs, which made the loop load-bound).
  alignas(64) float probs[kChunkKeys][kQueries];
  for (int32_t j = first; j < hi; ++j)
    for (int32_t i = 0; i < kQueries; ++i) probs[j - lo][i] = t.scores[i][j - t.span];
  int32_t d0 = 0;
  for (; d0 + kDims <= dims; d0 += kDims) {
    V acc[kQueries][kVecs] = {};
    if (rescale)
      for (int32_t i = 0; i < kQueries; ++i)
        for (int32_t k = 0; k < kVecs; ++k) acc[i][k] = at<V>(t.out[i] + d0 + kLanes * k) * rescale[std::min(i, t.count - 1)];
    for (int32_t j = first; j < hi; ++j) {
      const auto* v = c.values + j * b.value_stride + d0;
      // Positions are a whole KV row apart: the next chunk's values are asked for while this
      // one's are used (the dimension tiles of a row between them cover its cache lines).
      ask_for_two_lines(v + kChunkKeys * b.value_stride);
      V vv[kVecs];
      for (int32_t k = 0; k < kVecs; ++k) {
        L::load(vv[k], v + kLanes * k);
        if constexpr (CacheView<L, kType>::kQuantized)
          vv[k] *= L::scalar(c.value_scales[j * b.value_scale_stride + (d0 + kLanes * k) / kKvQ8Block]);
      }
      for (int32_t i = 0; i < kQueries; ++i) {
        const float p = probs[j - lo][i];
        for (int32_t k = 0; k < kVecs; ++k) acc[i][k] += p * vv[k];
      }
    }
    for (int32_t i = 0; i < t.count; ++i)
      for (int32_t k = 0; k < kVecs; ++k) at<V>(t.out[i] + d0 + kLanes * k) = acc[i][k];
  }
  for (int32_t i = 0; i < t.count; ++i) {
    float* o = t.out[i];
    for (int32_t d = d0; d < dims; ++d) o[d] = rescale ? o[d] * rescale[i] : 0.0f;
    for (int32_t j = first; j < hi; ++j) {
      const float p = t.scores[i][j - t.span];
      for (int32_t d = d0; d < dims; ++d) o[d] += p * c.value(b, j, d);
    }
  }
}

// Attention as FlashAttention takes it: the block's query tiles go through the keys a span at a
// time (scores, their online softmax, outputs), each span chunk by chunk, so a chunk's keys and
// values come from memory once for the whole block, and no row of scores over every position is
// kept (at 16k positions a prompt block's rows had been 4 MiB, written and read four times). A
// span is long (kSpanKeys) so that the softmax's bookkeeping per row and span stays small beside
// its products, and so that decode streams long runs of keys, then of values.
template <class L, KvType kType>
[[gnu::always_inline]] inline void attend_block_typed(const AttentionBlock& b) {
  static_assert(kTileKeys % L::kKeys == 0, "score rows hold whole kTileKeys tiles");
  static_assert(L::kQueries <= kMaxTileQueries && kGroupVectors % L::kQueries == 0, "a group holds whole tiles");
  static_assert(kChunkKeys % kTileKeys == 0 && kSpanKeys % kChunkKeys == 0, "spans hold whole chunks, chunks whole key tiles");
  const CacheView<L, kType> cache(b);
  int32_t max_keys = 0, min_first = b.n_keys[0];
  for (int32_t r = 0; r < b.n_rows; ++r) {
    max_keys = std::max(max_keys, b.n_keys[r]);
    min_first = std::min(min_first, b.first_key ? b.first_key[r] : 0);
  }
  const int32_t vectors = b.n_rows * b.group, first_span = min_first / kChunkKeys * kChunkKeys;
  const auto span_keys = static_cast<int32_t>(std::min<int64_t>(kSpanKeys, round_up(max_keys - first_span, kChunkKeys)));
  // The tiles are set up once for all chunks (their divisions were a tenth of a decode step's
  // attention when redone per chunk), up to kGroupVectors' tiles at a time.
  constexpr int32_t kQueries = L::kQueries, kTileGroup = kGroupVectors / kQueries;
  QueryTile tiles[kTileGroup];
  RunningSoftmax running[kTileGroup];
  float no_rescale[kQueries];
  std::fill_n(no_rescale, kQueries, 1.0f);
  for (int32_t group_first = 0; group_first < vectors; group_first += kGroupVectors) {
    const int32_t n_tiles =
        std::min(kTileGroup, (vectors - group_first + kQueries - 1) / kQueries);
    for (int32_t i = 0; i < n_tiles; ++i) {
      tiles[i] = query_tile<kQueries>(b, group_first + i * kQueries, b.scores + int64_t{i} * kQueries * span_keys, span_keys);
      for (int32_t s = 0; s < kQueries; ++s) {
        running[i].max[s] = -std::numeric_limits<float>::infinity();
        running[i].sum[s] = 0.0f;
      }
    }
    // Spans and chunks are whole blocks of the cache's keys; a tile takes those holding keys it sees.
    for (int32_t span = first_span; span < max_keys; span += span_keys) {
      const int32_t span_end = std::min(span + span_keys, max_keys);
      const auto sees = [](const QueryTile& t, int32_t lo, int32_t hi) { return t.min_first < hi && lo < t.max_keys; };
      for (int32_t i = 0; i < n_tiles; ++i) tiles[i].span = span;
      for (int32_t lo = span; lo < span_end; lo += kChunkKeys)
        for (int32_t i = 0; i < n_tiles; ++i)
          if (sees(tiles[i], lo, lo + kChunkKeys)) tile_scores(b, cache, tiles[i], lo, lo + kChunkKeys);
      for (int32_t i = 0; i < n_tiles; ++i)
        if (sees(tiles[i], span, span_end)) span_softmax<L>(tiles[i], span_end, running[i]);
      for (int32_t lo = span; lo < span_end; lo += kChunkKeys) {
        for (int32_t i = 0; i < n_tiles; ++i) {
          const QueryTile& t = tiles[i];
          if (!sees(t, lo, lo + kChunkKeys)) continue;
          // The span's first chunk for this tile rescales what earlier spans left; the tile's
          // very first chunk starts its outputs.
          const int32_t tile_first_chunk = std::max(span, t.min_first / kChunkKeys * kChunkKeys);
          const float* rescale = lo <= t.min_first ? nullptr : lo == tile_first_chunk ? running[i].rescale : no_rescale;
          tile_output(b, cache, t, lo, lo + kChunkKeys, rescale);
        }
      }
    }
    for (int32_t i = 0; i < n_tiles; ++i) {
      const QueryTile& t = tiles[i];
      for (int32_t s = 0; s < t.count; ++s) {
        float denominator = running[i].sum[s];
        if (b.sinks) denominator += exp_approx(t.sink[s] - running[i].max[s]);
        const float inverse = 1.0f / denominator;
        float* o = t.out[s];
        for (int32_t d = 0, dims = b.value_dim ? b.value_dim : b.head_dim; d < dims; ++d) o[d] *= inverse;
      }
    }
  }
}

template <class L>
[[gnu::always_inline]] inline void attend_block_loops(const AttentionBlock& b) {
  switch (b.type) {
    case KvType::F32: return attend_block_typed<L, KvType::F32>(b);
    case KvType::F16: return attend_block_typed<L, KvType::F16>(b);
    case KvType::Q8_0: return attend_block_typed<L, KvType::Q8_0>(b);
  }
}

#ifdef ORCHARD_X86_DISPATCH
// The AVX-512 set's whole target (VNNI among it, unused here): GCC's code for these loops, and
// with it the last bits of their results, changed under a narrower one.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c"))) void attend_block_avx512(const AttentionBlock& block) {
  if (Avx512DecodeLoads::suits(block)) return attend_block_typed<Avx512DecodeLoads, KvType::F16>(block);
  attend_block_loops<Avx512Loads>(block);
}
__attribute__((target("avx2,fma,f16c"))) void attend_block_avx2(const AttentionBlock& block) {
  attend_block_loops<Avx2Loads>(block);
}
__attribute__((target("avx512f"))) void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  silu_mul_loop(gate, up, n);
}
__attribute__((target("avx2,fma"))) void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  silu_mul_loop(gate, up, n);
}
__attribute__((target("avx512f"))) void rms_norm_avx512(const float* x, const float* weight, float* out, int64_t n, float eps) {
  rms_norm_loops(x, weight, out, n, eps);
}
__attribute__((target("avx2,fma"))) void rms_norm_avx2(const float* x, const float* weight, float* out, int64_t n, float eps) {
  rms_norm_loops(x, weight, out, n, eps);
}
__attribute__((target("avx512f"))) void swiglu_clamped_avx512(float* gate, const float* up, int64_t n) {
  swiglu_clamped_loop(gate, up, n);
}
__attribute__((target("avx2,fma"))) void swiglu_clamped_avx2(float* gate, const float* up, int64_t n) {
  swiglu_clamped_loop(gate, up, n);
}
#endif

}  // namespace

void attend_block(const AttentionBlock& block) {
#ifdef ORCHARD_X86_DISPATCH
  if (amx_suits(block)) return attend_block_amx(block);
  if (use_avx512()) return vnni_attention_suits(block) ? attend_block_vnni(block) : attend_block_avx512(block);
  if (use_avx2()) return attend_block_avx2(block);
#endif
  attend_block_loops<PortableLoads>(block);
}

bool attention_takes_wide_blocks(const AttentionBlock& shape) {
#ifdef ORCHARD_X86_DISPATCH
  return amx_suits(shape) || (use_avx512() && vnni_attention_suits(shape));
#else
  return amx_suits(shape);
#endif
}

int64_t attention_scratch_floats(int32_t n_rows, int32_t group, int32_t max_keys) {
  // One span's row of scores per query vector of a tile group (a tile's padding vectors reuse
  // the last row).
  const int64_t vectors = std::min<int64_t>(round_up(int64_t{n_rows} * group, kMaxTileQueries), kGroupVectors);
  return vectors * std::min<int64_t>(kSpanKeys, round_up(max_keys, kChunkKeys));
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_scaled(float* y, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float dot(const float* a, const float* b, int64_t n) {
  // 16 running sums the compiler keeps in vector lanes (one AVX-512, two AVX2 or four NEON
  // registers): fast, and the same order for every call of the same length.
  constexpr int64_t kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  float sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float lane : lanes) sum += lane;
  return sum;
}

void softmax(float* x, int64_t n) {
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] = exp_approx(x[i] - max);
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void top_k(const float* x, int32_t n, int32_t k, int32_t* indices) {
  // k is a handful (2-8 of up to a few hundred experts): one insertion pass beats a sort.
  int32_t found = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (found == k && !(x[i] > x[indices[k - 1]])) continue;
    int32_t j = found < k ? found++ : k - 1;
    for (; j > 0 && x[i] > x[indices[j - 1]]; --j) indices[j] = indices[j - 1];
    indices[j] = i;
  }
}

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
#ifdef ORCHARD_X86_DISPATCH
  if (use_avx512()) return rms_norm_avx512(x, weight, out, n, eps);
  if (use_avx2()) return rms_norm_avx2(x, weight, out, n, eps);
#endif
  rms_norm_loops(x, weight, out, n, eps);
}

void rope_angles(int32_t pos, const ModelConfig& config, const float* freq_factors, float* cos, float* sin) {
  const int32_t dims = config.rope_dims;
  const double theta = config.rope_theta, scale = config.rope_freq_scale;
  // YaRN: pairs that turn more than beta_fast times over the original context keep their
  // frequency (extrapolated), those below beta_slow turns are interpolated (× scale), and the
  // pairs between blend linearly. Pair i turns n / (2π θ^(2i/dims)) times over n tokens, so the
  // pair turning b times is dims · ln(n / (2π b)) / (2 ln θ).
  double low = 0, high = 0;
  if (config.rope_yarn) {
    auto pair_of = [&](double rotations) {
      return dims * std::log(config.yarn_original_context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
    };
    low = std::max(0.0, std::floor(pair_of(config.yarn_beta_fast)));
    high = std::min(static_cast<double>(dims - 1), std::ceil(pair_of(config.yarn_beta_slow)));
  }
  for (int32_t i = 0; i < dims / 2; ++i) {
    double freq = std::pow(theta, -2.0 * i / dims);
    if (freq_factors) freq /= freq_factors[i];
    double factor = scale;
    if (config.rope_yarn) {
      const double extrapolate = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
      factor = scale * (1.0 - extrapolate) + extrapolate;
    }
    const double angle = static_cast<double>(pos) * factor * freq;
    cos[i] = static_cast<float>(std::cos(angle) * config.rope_mscale);
    sin[i] = static_cast<float>(std::sin(angle) * config.rope_mscale);
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
  if (use_avx512()) return silu_mul_avx512(gate, up, n);
  if (use_avx2()) return silu_mul_avx2(gate, up, n);
#endif
  silu_mul_loop(gate, up, n);
}

void swiglu_clamped(float* gate, const float* up, int64_t n) {
#ifdef ORCHARD_X86_DISPATCH
  if (use_avx512()) return swiglu_clamped_avx512(gate, up, n);
  if (use_avx2()) return swiglu_clamped_avx2(gate, up, n);
#endif
  swiglu_clamped_loop(gate, up, n);
}

}  // namespace orchard::model::ops
