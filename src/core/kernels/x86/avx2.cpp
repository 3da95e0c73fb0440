// AVX2 + FMA + F16C kernels (compiled with those flags only; called only when cpuid says so).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/kernels/tile_driver.h"
#include "core/kernels/x86/x86_sets.h"

namespace orchard::core::kernels {
namespace {

inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
  // u ≤ 255 only for abs(Q8_0) ≤ 128 against |s| ≤ 127: the s16 pair sums stay below 32767.
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

inline __m256i dot_s16(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

#include "core/kernels/x86/ymm_kernels.inc"

// Kernels on the 16-row interleaved copies (kernel_set.h), for prompts above all: each 64-byte
// run of quant words holds 4 bytes of each of 16 rows, so its first and second 32 bytes are the
// same 4 quants of rows 0-7 and 8-15, and one vpmaddubsw against the token's 4 matching
// activations (broadcast) adds into one row per 32-bit lane. Outputs of 8 rows come out as one
// vector with no horizontal sums, and a weight vector, unpacked once, serves every token of a
// run. Without VNNI the u8 × s8 products land in int16 pairs: where those cannot overflow
// (4-bit quants: 8 × 2 × 15 × 127 < 32767) a block's words add up in int16 and are widened
// once, which halves the multiplies of the row kernels (one vpmaddwd per word there).
//
// A group is worked as its two halves of 8 rows. With few tokens (a decode step) both halves
// of a column are done before the next column, so the copy streams through once; with more,
// one half at a time over all columns, which keeps a token's accumulators (one vector per
// half) and the unpacked weights within the 16 registers. Either way each output is the same
// sequence of operations, so a row's result does not depend on how tokens are grouped.

// Writes T tokens' outputs of half h of group `group`, leaving out padding rows.
template <int T>
void store_half(const Tile& tile, int64_t group, int h, int64_t t0, const __m256 (&acc)[T]) {
  const int64_t r0 = group * kInterleave + 8 * h, rows_here = std::min<int64_t>(8, tile.n_rows - r0);
  if (rows_here <= 0) return;
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rows_here)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int t = 0; t < T; ++t) {
    float* y = tile.y + (t0 + t) * tile.y_stride + r0;
    if (rows_here == 8) _mm256_storeu_ps(y, acc[t]);
    else _mm256_maskstore_ps(y, mask, acc[t]);
  }
}

// Asks for a whole column's lines before computing on it, so a decode step has all of its
// cache misses in flight at once (as the AVX-512 kernels do, where it measured best).
template <size_t kColumn>
inline void prefetch_column(const uint8_t* column) {
  for (size_t line = 0; line < kColumn; line += 64) _mm_prefetch(reinterpret_cast<const char*>(column + line), _MM_HINT_T0);
}

// Four bytes of x in every lane (one vpbroadcastd from memory).
inline __m256i broadcast4(const void* p) {
  int32_t word;
  std::memcpy(&word, p, sizeof word);
  return _mm256_set1_epi32(word);
}

// Runs `K::column<T>(column, b, h, x, acc)` (adds column b of half h for T tokens) over a tile:
// tokens in runs of kTokens, then 2 and 1.
template <class K, int kTokens>
struct HalfGroups {
  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const typename K::Act* x[T];
    token_pointers(tile, t0, x);
    if constexpr (T <= 2) {
      __m256 acc[2][T];
      for (auto& a : acc)
        for (auto& v : a) v = _mm256_setzero_ps();
      for (int64_t b = 0; b < tile.n_blocks; ++b) {
        const uint8_t* column = w + static_cast<size_t>(b) * K::kColumn;
        if constexpr (T == 1) prefetch_column<K::kColumn>(column);
        K::template column<T>(column, b, 0, x, acc[0]);
        K::template column<T>(column, b, 1, x, acc[1]);
      }
      store_half(tile, group, 0, t0, acc[0]);
      store_half(tile, group, 1, t0, acc[1]);
    } else {
      for (int h = 0; h < 2; ++h) {
        if (group * kInterleave + 8 * h >= tile.n_rows) break;
        __m256 acc[T];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t b = 0; b < tile.n_blocks; ++b) K::template column<T>(w + static_cast<size_t>(b) * K::kColumn, b, h, x, acc);
        store_half(tile, group, h, t0, acc);
      }
    }
  }

  static void tile(const Tile& tile) {
    const int64_t groups = (tile.n_rows + kInterleave - 1) / kInterleave;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t t = 0;
      for (; t + kTokens <= tile.n_tokens; t += kTokens) run<kTokens>(tile, g, t);
      if (t + 2 <= tile.n_tokens) {
        run<2>(tile, g, t);
        t += 2;
      }
      if (t < tile.n_tokens) run<1>(tile, g, t);
    }
  }
};

// kQ4_0x16: per word, low nibbles are quants 4k..4k+3 and high ones 16 + 4k.., read unsigned;
// the offset of 8 comes off as -8 · Σx. A block's 8 words sum in int16.
struct Q4_0Halves {
  using Act = ActQ8_0;
  static constexpr size_t kColumn = kInterleave * sizeof(BlockQ4_0);

  template <int T>
  static void column(const uint8_t* w, int64_t b, int h, const ActQ8_0* const (&x)[T], __m256 (&acc)[T]) {
    const __m256 dw = _mm256_cvtph_ps(load128(w + 16 * h));
    const uint8_t* q = w + kInterleave * sizeof(Half) + 32 * h;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    __m256i wq[8];
    for (int k = 0; k < 4; ++k) {
      const __m256i v = load256(q + 64 * k);
      wq[k] = _mm256_and_si256(v, nibble);
      wq[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
    }
    for (int t = 0; t < T; ++t) {
      const ActQ8_0& a = x[t][b];
      __m256i p[8];
      for (int k = 0; k < 8; ++k) p[k] = _mm256_maddubs_epi16(wq[k], broadcast4(a.qs + 4 * k));
      // A tree of int16 adds, so the chain is three deep.
      const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])),
                                         _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7])));
      const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)), _mm256_set1_epi32(-8 * a.sum));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)), acc[t]);
    }
  }
};

// kQ8_0x16 (stored plus 128): signed again by an XOR, then |w| × (x with w's sign) as in the
// row kernel. Those pair sums reach 2 × 128 × 127, so each word widens to int32 on its own.
struct Q8_0Halves {
  using Act = ActQ8_0;
  static constexpr size_t kColumn = kInterleave * sizeof(BlockQ8_0);

  template <int T>
  static void column(const uint8_t* w, int64_t b, int h, const ActQ8_0* const (&x)[T], __m256 (&acc)[T]) {
    const __m256 dw = _mm256_cvtph_ps(load128(w + 16 * h));
    const uint8_t* q = w + kInterleave * sizeof(Half) + 32 * h;
    __m256i sign[8], magnitude[8];
    for (int k = 0; k < 8; ++k) {
      sign[k] = _mm256_xor_si256(load256(q + 64 * k), _mm256_set1_epi8(static_cast<char>(0x80)));
      magnitude[k] = _mm256_abs_epi8(sign[k]);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; ++t) {
      const ActQ8_0& a = x[t][b];
      __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int k = 0; k < 8; ++k) {
        const __m256i p = _mm256_maddubs_epi16(magnitude[k], _mm256_sign_epi8(broadcast4(a.qs + 4 * k), sign[k]));
        sum[k % 2] = _mm256_add_epi32(sum[k % 2], _mm256_madd_epi16(p, ones));
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(sum[0], sum[1])), _mm256_mul_ps(dw, _mm256_set1_ps(a.d)),
                               acc[t]);
    }
  }
};

// vpshufb controls copying the low (high) int16 of each 32-bit lane into both its halves.
inline __m256i duplicate_low16() { return _mm256_setr_epi32(0x01000100, 0x05040504, 0x09080908, 0x0D0C0D0C, 0x01000100, 0x05040504, 0x09080908, 0x0D0C0D0C); }
inline __m256i duplicate_high16() { return _mm256_setr_epi32(0x03020302, 0x07060706, 0x0B0A0B0A, 0x0F0E0F0E, 0x03020302, 0x07060706, 0x0B0A0B0A, 0x0F0E0F0E); }

// kQ4_Kx16: per sub-block of 32, its 8 quant words (low or high nibbles) sum in int16 and
// meet the row's 6-bit scale in one vpmaddwd; the mins meet the activations' per-16 sums
// (min_j, min_j) · (bsum 2j, bsum 2j+1) the same way.
struct Q4_KHalves {
  using Act = BlockQ8_K;
  static constexpr size_t kColumn = kQ4_KColumn;

  template <int T>
  static void column(const uint8_t* w, int64_t b, int h, const BlockQ8_K* const (&x)[T], __m256 (&acc)[T]) {
    const __m256i dup_low = duplicate_low16(), dup_high = duplicate_high16(), nibble = _mm256_set1_epi8(0x0F);
    __m256i sum[T];
    for (auto& v : sum) v = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i mins = _mm256_cvtepu8_epi16(load128(w + kQ4_KMins + 32 * p + 16 * h));
      const __m256i even = _mm256_shuffle_epi8(mins, dup_low), odd = _mm256_shuffle_epi8(mins, dup_high);
      for (int t = 0; t < T; ++t) {
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(even, broadcast4(x[t][b].bsums + 4 * p)));
        sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(odd, broadcast4(x[t][b].bsums + 4 * p + 2)));
      }
    }
    const __m256 d = _mm256_cvtph_ps(load128(w + 16 * h)), dmin = _mm256_cvtph_ps(load128(w + kQ4_KDmin + 16 * h));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(dmin, _mm256_set1_ps(x[t][b].d)), acc[t]);
      sum[t] = _mm256_setzero_si256();
    }
    for (int p = 0; p < 4; ++p) {
      const __m256i scales = _mm256_cvtepu8_epi16(load128(w + kQ4_KScales + 32 * p + 16 * h));
      const uint8_t* q = w + kQ4_KQuants + 512 * p + 32 * h;
      for (int half = 0; half < 2; ++half) {  // sub-block 2p + half: low, then high nibbles
        const __m256i scale = _mm256_shuffle_epi8(scales, half ? dup_high : dup_low);
        __m256i wq[8];
        for (int k = 0; k < 8; ++k) {
          const __m256i v = load256(q + 64 * k);
          wq[k] = _mm256_and_si256(half ? _mm256_srli_epi16(v, 4) : v, nibble);
        }
        for (int t = 0; t < T; ++t) {
          const int8_t* a = x[t][b].qs + 64 * p + 32 * half;
          __m256i m[8];
          for (int k = 0; k < 8; ++k) m[k] = _mm256_maddubs_epi16(wq[k], broadcast4(a + 4 * k));
          const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3])),
                                             _mm256_add_epi16(_mm256_add_epi16(m[4], m[5]), _mm256_add_epi16(m[6], m[7])));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(s, scale));
        }
      }
    }
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(x[t][b].d)), acc[t]);
  }
};

const KernelSet kAvx2{
    "avx2",
    false,
    FloatGemm<LoadF32, 3, 4, 4>::tile,
    FloatGemm<LoadF16, 3, 4, 4>::tile,
    FloatGemm<LoadBF16, 3, 4, 4>::tile,
    row_tile<Q4_0Kernel, 4>,
    row_tile<Q8_0Kernel, 4>,
    row_tile<Q4_KKernel, 4>,
    row_tile<Q6_KKernel, 4>,
    HalfGroups<Q4_0Halves, 4>::tile,
    HalfGroups<Q8_0Halves, 4>::tile,
    HalfGroups<Q4_KHalves, 4>::tile,
    nullptr,  // q6_k: rebuilding the 6-bit quants costs as much as the row kernel saves
    nullptr,
    nullptr,
    nullptr,
    row_tile<LowBitKernel<BlockQ4_1>, 4>,
    row_tile<LowBitKernel<BlockQ5_0>, 4>,
    row_tile<LowBitKernel<BlockQ5_1>, 4>,
    row_tile<Q2_KKernel, 4>,
    row_tile<Q3_KKernel, 4>,
    row_tile<Q5_KKernel, 4>,
    row_tile<TableKernel<IQ4_NLBlock>, 4>,
    row_tile<IQ4_XSKernel, 4>,
    row_tile<TableKernel<MXFP4Block>, 4>,
};

}  // namespace

const KernelSet& avx2_kernels() { return kAvx2; }

}  // namespace orchard::core::kernels
