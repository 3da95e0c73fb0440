#include "model/attention_amx.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "model/exp_approx.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_AMX 1
// GCC 12's AVX-512 conversions start from _mm512_undefined_*() (see ops.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace orchard::model::ops {

#ifdef ORCHARD_AMX
namespace {

constexpr int32_t kRows = 16;         // query vectors per tile (a tile's rows)
constexpr int32_t kChunk = 64;        // keys per step of the online softmax
static_assert(kChunk == kKeyBlock, "a chunk is one block of the cache's keys");
constexpr int32_t kKeyGroup = 16;     // keys per score tile (its columns)
constexpr int32_t kKeyStep = 32;      // keys per P·V product (its depth: 16 pairs)
constexpr int32_t kDimStep = 32;      // key dimensions per Q·K product (its depth)
constexpr int32_t kValueGroup = 16;   // value dimensions per output tile (its columns)
constexpr int32_t kTileElements = kRows * 32;  // bfloat16s in one 16 × 64-byte operand tile

bool detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!amx_bf16 || !amx_tile) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return false;  // AVX512_BF16
  // Linux leaves the tiles' 8 KiB of state off until a process asks for it (ARCH_REQ_XCOMP_PERM
  // for XFEATURE_XTILEDATA), and refuses where the kernel predates AMX.
  constexpr long kRequestPermission = 0x1023, kTileData = 18;
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

bool allowed_by_environment() {
  const char* value = std::getenv("ORCHARD_AMX");
  return value == nullptr || std::string_view(value) != "0";
}
bool amx_allowed = allowed_by_environment();

// The tile registers' shapes (palette 1): every tile used is 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
// Tiles 1-2 hold A's hi and lo, 3-4 B's, and 0, 5, 6, 7 four products being summed: a tile
// product waits for the one before it into the same tile, so four independent sums keep the
// unit busy where one sum left it waiting most of the time.
constexpr int32_t kTilesUsed = 8, kSums = 4;

// sum += A · B over a split pair each (hi·hi + hi·lo + lo·hi), with A in tiles 1-2 and B's
// halves at b and b + kTileElements.
#define ORCHARD_AMX_SPLIT_PRODUCT(sum, b)        \
  do {                                           \
    _tile_loadd(3, (b), 64);                     \
    _tile_loadd(4, (b) + kTileElements, 64);     \
    _tile_dpbf16ps(sum, 1, 3);                   \
    _tile_dpbf16ps(sum, 1, 4);                   \
    _tile_dpbf16ps(sum, 2, 3);                   \
  } while (0)

#define ORCHARD_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,amx-tile,amx-bf16")))

// GCC's tile loads and stores are asm without a memory clobber: this orders them with the
// ordinary stores that fill their operands and the loads that read their results.
inline void memory_barrier() { __asm__ volatile("" ::: "memory"); }
// The four product sums (tiles 0, 5, 6, 7) start at zero.
ORCHARD_AMX_TARGET inline void zero_sums() {
  _tile_zero(0);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
}

// Two bfloat16s per float, x = hi + lo: 32 floats (a then b) to 32 hi and 32 lo in order (an A
// operand's row), or interleaved a0 b0 a1 b1 … (a B operand's row of pairs).
ORCHARD_AMX_TARGET inline void split(__m512 a, __m512 b, bool interleave, uint16_t* hi, uint16_t* lo) {
  const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  const __m512 a_hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
  const __m512 b_hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
  __m512i l = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, b_hi), _mm512_sub_ps(a, a_hi)));
  __m512i out_hi = h;
  if (interleave) {
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    out_hi = _mm512_permutexvar_epi16(pairs, h);
    l = _mm512_permutexvar_epi16(pairs, l);
  }
  _mm512_storeu_si512(hi, out_hi);
  _mm512_storeu_si512(lo, l);
}

// 16 consecutive elements of the cache's type as floats (masked-off ones 0), each times its own
// scale (Q8_0 keys: 16 positions' scales) or one scale (Q8_0 values).
template <KvType kType>
ORCHARD_AMX_TARGET inline __m512 load16(const void* base, int64_t index, __mmask16 mask) {
  if constexpr (kType == KvType::F32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + index);
  } else if constexpr (kType == KvType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const core::Half*>(base) + index));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, static_cast<const int8_t*>(base) + index)));
  }
}
// Asks for the cache line of an element a chunk ahead.
template <KvType kType>
inline void prefetch(const void* base, int64_t index) {
  using T = std::conditional_t<kType == KvType::F32, float, std::conditional_t<kType == KvType::F16, core::Half, int8_t>>;
  __builtin_prefetch(static_cast<const T*>(base) + index);
}
ORCHARD_AMX_TARGET inline __m512 load_scales(const core::Half* scales, int64_t index, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, scales + index));
}

ORCHARD_AMX_TARGET inline __mmask16 keys_in(int32_t first, int32_t lo, int32_t hi) {
  const __m512i key = _mm512_add_epi32(_mm512_set1_epi32(first), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  return _mm512_cmpge_epi32_mask(key, _mm512_set1_epi32(lo)) & _mm512_cmplt_epi32_mask(key, _mm512_set1_epi32(hi));
}

// A thread's working memory, kept between calls (a block's needs depend on its widths only).
struct Scratch {
  std::vector<uint8_t> bytes;
  uint8_t* take(size_t size) {
    const size_t offset = used;
    used += (size + 63) / 64 * 64;
    return base + offset;
  }
  void reserve(size_t size) {
    if (bytes.size() < size + 64) bytes.assign(size + 64, 0);
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) & ~uintptr_t{63});
    used = 0;
  }
  uint8_t* base = nullptr;
  size_t used = 0;
};

// One query vector of the block: where it is read and written, and the keys it sees.
struct QueryVector {
  const float* q;
  float* out;
  int32_t first_key, n_keys;
  float sink;
};

template <KvType kType>
ORCHARD_AMX_TARGET void attend(const AttentionBlock& b) {
  const int32_t dims = b.head_dim, value_dims = b.value_dim ? b.value_dim : b.head_dim;
  const int32_t dim_steps = dims / kDimStep, value_groups = value_dims / kValueGroup;
  const int32_t vectors = b.n_rows * b.group, n_tiles = (vectors + kRows - 1) / kRows;
  const float scale = b.scale != 0 ? b.scale : 1.0f / std::sqrt(static_cast<float>(dims));
  constexpr int32_t kGroups = kChunk / kKeyGroup, kSteps = kChunk / kKeyStep;
  constexpr size_t kTileBytes = kTileElements * sizeof(uint16_t);

  thread_local Scratch scratch;
  const size_t q_bytes = size_t(n_tiles) * dim_steps * 2 * kTileBytes;
  const size_t k_bytes = size_t(kGroups) * dim_steps * 2 * kTileBytes;
  const size_t v_bytes = size_t(value_groups) * kSteps * 2 * kTileBytes;
  const size_t p_bytes = size_t(kSteps) * 2 * kTileBytes;
  const size_t o_bytes = size_t(n_tiles) * kRows * value_dims * sizeof(float);
  const size_t row_bytes = size_t(n_tiles) * kRows * sizeof(float);
  scratch.reserve(q_bytes + k_bytes + v_bytes + p_bytes + o_bytes + 3 * row_bytes + (kRows * kChunk + kRows * kSums * kValueGroup) * sizeof(float) +
                  size_t(vectors) * sizeof(QueryVector) + 16 * 64);
  auto* q_pack = reinterpret_cast<uint16_t*>(scratch.take(q_bytes));
  auto* k_pack = reinterpret_cast<uint16_t*>(scratch.take(k_bytes));
  auto* v_pack = reinterpret_cast<uint16_t*>(scratch.take(v_bytes));
  auto* p_pack = reinterpret_cast<uint16_t*>(scratch.take(p_bytes));
  auto* outputs = reinterpret_cast<float*>(scratch.take(o_bytes));
  auto* running_max = reinterpret_cast<float*>(scratch.take(row_bytes));
  auto* running_sum = reinterpret_cast<float*>(scratch.take(row_bytes));
  auto* rescale = reinterpret_cast<float*>(scratch.take(row_bytes));
  auto* scores = reinterpret_cast<float*>(scratch.take(kRows * kChunk * sizeof(float)));
  auto* product = reinterpret_cast<float*>(scratch.take(kRows * kSums * kValueGroup * sizeof(float)));
  auto* query = reinterpret_cast<QueryVector*>(scratch.take(size_t(vectors) * sizeof(QueryVector)));

  int32_t max_keys = 0, min_first = b.n_keys[0];
  for (int32_t v = 0; v < vectors; ++v) {
    const int32_t row = v / b.group, head = v % b.group;
    QueryVector& x = query[v];
    x.q = b.q + row * b.row_stride + int64_t{head} * dims;
    x.out = b.out + row * (b.out_row_stride ? b.out_row_stride : b.row_stride) + int64_t{head} * value_dims;
    x.first_key = b.first_key ? b.first_key[row] : 0;
    x.n_keys = b.n_keys[row];
    x.sink = b.sinks ? b.sinks[head] : 0.0f;
    max_keys = std::max(max_keys, x.n_keys);
    min_first = std::min(min_first, x.first_key);
  }

  // Queries times the scale, split; padding rows of the last tile are zeros.
  std::memset(q_pack, 0, q_bytes);
  for (int32_t v = 0; v < vectors; ++v) {
    const int32_t tile = v / kRows, row = v % kRows;
    for (int32_t s = 0; s < dim_steps; ++s) {
      uint16_t* hi = q_pack + (size_t(tile * dim_steps + s) * 2) * kTileElements + row * 32;
      const float* q = query[v].q + s * kDimStep;
      split(_mm512_mul_ps(_mm512_loadu_ps(q), _mm512_set1_ps(scale)), _mm512_mul_ps(_mm512_loadu_ps(q + 16), _mm512_set1_ps(scale)),
            false, hi, hi + kTileElements);
    }
  }
  std::fill(outputs, outputs + size_t(n_tiles) * kRows * value_dims, 0.0f);
  std::fill(running_max, running_max + size_t(n_tiles) * kRows, -std::numeric_limits<float>::infinity());
  std::fill(running_sum, running_sum + size_t(n_tiles) * kRows, 0.0f);

  TileConfig config;
  for (int32_t t = 0; t < kTilesUsed; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = kRows;
  }
  _tile_loadconfig(&config);

  const auto* keys = b.keys;
  const auto* values = b.values;
  for (int32_t c0 = min_first / kChunk * kChunk; c0 < max_keys; c0 += kChunk) {
    // This chunk's keys and values the block may read; the rest pack as zeros (a value that is
    // never stored must not reach a product, even times a zero probability).
    const int32_t lo = std::max(c0, min_first), hi = std::min(c0 + kChunk, max_keys);
    for (int32_t g = 0; g < kGroups; ++g) {
      const int32_t j0 = c0 + g * kKeyGroup;
      const __mmask16 mask = keys_in(j0, lo, hi);
      for (int32_t s = 0; s < dim_steps; ++s) {
        uint16_t* k_hi = k_pack + (size_t(g * dim_steps + s) * 2) * kTileElements;
        __m512 block_scale = _mm512_set1_ps(1.0f);
        if constexpr (kType == KvType::Q8_0)
          block_scale = load_scales(b.key_scales, key_element(dims / kKvQ8Block, s * kDimStep / kKvQ8Block, j0), mask);
        for (int32_t r = 0; r < kRows; ++r) {
          const int32_t d = s * kDimStep + 2 * r;
          const int64_t at = key_element(dims, d, j0);  // dimension d + 1 follows a block row on
          prefetch<kType>(keys, at + int64_t{kChunk} * dims);
          prefetch<kType>(keys, at + int64_t{kChunk} * dims + kKeyBlock);
          const __m512 even = _mm512_mul_ps(load16<kType>(keys, at, mask), block_scale);
          const __m512 odd = _mm512_mul_ps(load16<kType>(keys, at + kKeyBlock, mask), block_scale);
          split(even, odd, true, k_hi + r * 32, k_hi + kTileElements + r * 32);
        }
      }
    }
    for (int32_t step = 0; step < kSteps; ++step)
      for (int32_t r = 0; r < kRows; ++r) {
        const int32_t j = c0 + step * kKeyStep + 2 * r;
        const __mmask16 even_mask = j >= lo && j < hi ? 0xFFFF : 0, odd_mask = j + 1 >= lo && j + 1 < hi ? 0xFFFF : 0;
        for (int32_t t = 0; t < value_groups; ++t) {
          uint16_t* v_hi = v_pack + (size_t(t * kSteps + step) * 2) * kTileElements;
          const int32_t d0 = t * kValueGroup;
          prefetch<kType>(values, (j + kChunk) * b.value_stride + d0);
          prefetch<kType>(values, (j + 1 + kChunk) * b.value_stride + d0);
          __m512 even = load16<kType>(values, j * b.value_stride + d0, even_mask);
          __m512 odd = load16<kType>(values, (j + 1) * b.value_stride + d0, odd_mask);
          if constexpr (kType == KvType::Q8_0) {
            if (even_mask) even = _mm512_mul_ps(even, _mm512_set1_ps(_cvtsh_ss(b.value_scales[j * b.value_scale_stride + d0 / kKvQ8Block])));
            if (odd_mask) odd = _mm512_mul_ps(odd, _mm512_set1_ps(_cvtsh_ss(b.value_scales[(j + 1) * b.value_scale_stride + d0 / kKvQ8Block])));
          }
          split(even, odd, true, v_hi + r * 32, v_hi + kTileElements + r * 32);
        }
      }

    for (int32_t tile = 0; tile < n_tiles; ++tile) {
      const int32_t first_vector = tile * kRows, count = std::min(kRows, vectors - first_vector);
      bool sees_chunk = false;
      for (int32_t i = 0; i < count; ++i) {
        const QueryVector& x = query[first_vector + i];
        sees_chunk |= x.first_key < c0 + kChunk && x.n_keys > c0;
      }
      if (!sees_chunk) continue;

      // Scores of the tile's 16 query vectors over the chunk's 64 keys.
      const uint16_t* q_hi = q_pack + size_t(tile * dim_steps) * 2 * kTileElements;
      memory_barrier();
      static_assert(kGroups == kSums, "one sum per key group");
      zero_sums();
      for (int32_t s = 0; s < dim_steps; ++s) {
        const uint16_t* a = q_hi + size_t(s) * 2 * kTileElements;
        const uint16_t* k = k_pack + size_t(s) * 2 * kTileElements;
        const size_t group_stride = size_t(dim_steps) * 2 * kTileElements;
        _tile_loadd(1, a, 64);
        _tile_loadd(2, a + kTileElements, 64);
        ORCHARD_AMX_SPLIT_PRODUCT(0, k);
        ORCHARD_AMX_SPLIT_PRODUCT(5, k + group_stride);
        ORCHARD_AMX_SPLIT_PRODUCT(6, k + 2 * group_stride);
        ORCHARD_AMX_SPLIT_PRODUCT(7, k + 3 * group_stride);
      }
      constexpr size_t kScoreStride = kChunk * sizeof(float);
      _tile_stored(0, scores, kScoreStride);
      _tile_stored(5, scores + kKeyGroup, kScoreStride);
      _tile_stored(6, scores + 2 * kKeyGroup, kScoreStride);
      _tile_stored(7, scores + 3 * kKeyGroup, kScoreStride);
      memory_barrier();

      // Online softmax: each row's new maximum, its probabilities over the keys it sees here (0
      // for the others), the factor that rescales what earlier chunks left.
      for (int32_t i = 0; i < kRows; ++i) {
        float* s = scores + i * kChunk;
        const size_t slot = size_t(first_vector) + i;
        const QueryVector* x = i < count ? &query[first_vector + i] : nullptr;
        const int32_t first = x ? std::max(x->first_key, c0) : 0, end = x ? std::min(x->n_keys, c0 + kChunk) : 0;
        if (first >= end) {
          std::fill(s, s + kChunk, 0.0f);
          rescale[slot] = 1.0f;
          continue;
        }
        __mmask16 visible[kChunk / 16];
        __m512 lanes = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
        for (int32_t k = 0; k < kChunk / 16; ++k) {
          visible[k] = keys_in(c0 + 16 * k, first, end);
          lanes = _mm512_mask_max_ps(lanes, visible[k], lanes, _mm512_loadu_ps(s + 16 * k));
        }
        const float old_max = running_max[slot];
        const float new_max = std::max(old_max, _mm512_reduce_max_ps(lanes));
        for (int32_t j = 0; j < kChunk; ++j) s[j] = exp_approx(s[j] - new_max);
        __m512 sum = _mm512_setzero_ps();
        for (int32_t k = 0; k < kChunk / 16; ++k) {
          const __m512 p = _mm512_maskz_mov_ps(visible[k], _mm512_loadu_ps(s + 16 * k));
          _mm512_storeu_ps(s + 16 * k, p);
          sum = _mm512_add_ps(sum, p);
        }
        const float factor = old_max == -std::numeric_limits<float>::infinity() ? 0.0f : exp_approx(old_max - new_max);
        rescale[slot] = factor;
        running_sum[slot] = running_sum[slot] * factor + _mm512_reduce_add_ps(sum);
        running_max[slot] = new_max;
      }
      for (int32_t step = 0; step < kSteps; ++step)
        for (int32_t i = 0; i < kRows; ++i) {
          uint16_t* p_hi = p_pack + size_t(step) * 2 * kTileElements + i * 32;
          const float* s = scores + i * kChunk + step * kKeyStep;
          split(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16), false, p_hi, p_hi + kTileElements);
        }
      memory_barrier();

      // outputs = outputs · rescale + P · V, 16 value dimensions at a time.
      float* tile_out = outputs + size_t(first_vector) * value_dims;
      // Up to kSums groups at a time; the product buffer holds their 16 rows side by side.
      for (int32_t t0 = 0; t0 < value_groups; t0 += kSums) {
        const int32_t n = std::min(kSums, value_groups - t0);
        zero_sums();
        for (int32_t step = 0; step < kSteps; ++step) {
          const uint16_t* p = p_pack + size_t(step) * 2 * kTileElements;
          const uint16_t* v = v_pack + (size_t(t0 * kSteps + step) * 2) * kTileElements;
          const size_t group_stride = size_t(kSteps) * 2 * kTileElements;
          _tile_loadd(1, p, 64);
          _tile_loadd(2, p + kTileElements, 64);
          ORCHARD_AMX_SPLIT_PRODUCT(0, v);
          if (n > 1) ORCHARD_AMX_SPLIT_PRODUCT(5, v + group_stride);
          if (n > 2) ORCHARD_AMX_SPLIT_PRODUCT(6, v + 2 * group_stride);
          if (n > 3) ORCHARD_AMX_SPLIT_PRODUCT(7, v + 3 * group_stride);
        }
        constexpr size_t kProductStride = kSums * kValueGroup * sizeof(float);
        _tile_stored(0, product, kProductStride);
        if (n > 1) _tile_stored(5, product + kValueGroup, kProductStride);
        if (n > 2) _tile_stored(6, product + 2 * kValueGroup, kProductStride);
        if (n > 3) _tile_stored(7, product + 3 * kValueGroup, kProductStride);
        memory_barrier();
        for (int32_t i = 0; i < count; ++i) {
          const __m512 factor = _mm512_set1_ps(rescale[first_vector + i]);
          for (int32_t t = 0; t < n; ++t) {
            float* o = tile_out + size_t(i) * value_dims + (t0 + t) * kValueGroup;
            _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_loadu_ps(o), factor, _mm512_loadu_ps(product + (i * kSums + t) * kValueGroup)));
          }
        }
      }
    }
  }
  _tile_release();

  for (int32_t v = 0; v < vectors; ++v) {
    const QueryVector& x = query[v];
    float denominator = running_sum[v];
    if (b.sinks) denominator += exp_approx(x.sink - running_max[v]);
    const float inverse = 1.0f / denominator;
    const float* o = outputs + size_t(v) * value_dims;
    for (int32_t d = 0; d < value_dims; ++d) x.out[d] = o[d] * inverse;
  }
}

}  // namespace

bool amx_available() {
  static const bool available = detect();
  return available;
}

bool amx_suits(const AttentionBlock& block) {
  const int32_t value_dims = block.value_dim ? block.value_dim : block.head_dim;
  return amx_allowed && block.type != KvType::F32 && core::active_vector_isa() == core::VectorIsa::kAvx512 && amx_available() &&
         block.head_dim % kDimStep == 0 && value_dims % kValueGroup == 0;
}

void allow_amx_attention(bool allowed) { amx_allowed = allowed; }

void attend_block_amx(const AttentionBlock& block) {
  switch (block.type) {
    case KvType::F32: return attend<KvType::F32>(block);
    case KvType::F16: return attend<KvType::F16>(block);
    case KvType::Q8_0: return attend<KvType::Q8_0>(block);
  }
}

#else

bool amx_available() { return false; }
bool amx_suits(const AttentionBlock&) { return false; }
void allow_amx_attention(bool) {}
void attend_block_amx(const AttentionBlock&) { throw Error("AMX attention called on a machine without AMX"); }

#endif

}  // namespace orchard::model::ops
