// AVX2 + FMA + F16C kernels (compiled with those flags only; called only when cpuid says so).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

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

// Asks for a whole column's lines before computing on it, so a decode step has many cache
// misses in flight at once. The column asked for is the first at least 1 KiB ahead (the lines
// past a tile's end are the next group's, or unused: a prefetch never faults), so its misses
// have a column's computing, or several, to arrive in: the 256-bit kernels spend enough
// instructions per byte that the current column's lines (what the AVX-512 kernels ask for) come
// too late. Measured on the 2-core AVX2 EPYC, 2 threads, runs alternated on a host at load 13,
// where the current column was asked for before: gemv 32000 × 2048 Q4_0 19.8–21.6 → 14.9–17.8
// ms, Q8_0 37.9–39.5 → 22.5–26.2 ms; moe-3b Q4_0 decode 2.67–2.99 → 3.05–3.30 tok/s. Q4_K's and
// Q6_K's columns (2368, 3392 bytes) are asked for one column ahead as well: on that host at
// load 13–14, one core, a 2048 × 2048 copy in L3 (the latency a column has to hide), medians of
// 8–16 alternated runs: Q6_K 12.6 → 13.6 and 11.8 → 12.3 GB/s, Q4_K 18.6 → 19.6 and 15.5 →
// 16.5 GB/s per CPU-second; from DRAM the host's load hid any difference.
//
// The lines are asked for half before each half of the column is computed, not all at once: a
// burst of a whole column (37 lines of Q4_K, 53 of Q6_K) is likely more misses than the core
// tracks at once, and its tail then holds up the loads behind it. Same host and copies, sets of
// 12 alternated runs against the whole column at once: Q6_K 12.7 → 14.1 and 11.6 → 13.2 GB/s
// per CPU-second, Q4_K 17.0 → 18.7. From DRAM (bench_kernels, one thread, alternated pairs at
// load 12–19) gemv Q6_K 32000 × 2048 was faster in 9 of 10 pairs (one set's medians 42.2 → 34.3
// ms), moe_decode Q4_K with Q6_K down in 9 of 14 (8.0 → 7.0 ms in one set, 5.5 → 6.9 in
// another): to be confirmed on a quiet host. A column under 1 KiB (Q4_0, Q8_0) is a few
// lines, still asked for at once before its first half (split, moe_decode Q4_0 was slower in 9
// of 12 pairs).
template <size_t kColumn>
inline void prefetch_half_column(const uint8_t* column, int half) {
  constexpr size_t kAhead = (1024 + kColumn - 1) / kColumn * kColumn;
  constexpr size_t kLines = (kColumn + 63) / 64;
  constexpr bool kSplit = kColumn >= 1024;
  const size_t begin = kSplit ? half * kLines / 2 : (half == 0 ? 0 : kLines);
  const size_t end = kSplit ? (half + 1) * kLines / 2 : kLines;
  const uintptr_t first = reinterpret_cast<uintptr_t>(column) + kAhead;
  for (size_t line = begin; line < end; ++line) _mm_prefetch(reinterpret_cast<const char*>(first + 64 * line), _MM_HINT_T0);
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
        if constexpr (T == 1 && requires { K::one_token(column, x[0][b], acc[0][0], acc[1][0]); }) {
          K::one_token(column, x[0][b], acc[0][0], acc[1][0]);  // both halves at once, asking for lines itself
        } else {
          if constexpr (T == 1) prefetch_half_column<K::kColumn>(column, 0);
          K::template column<T>(column, b, 0, x, acc[0]);
          if constexpr (T == 1) prefetch_half_column<K::kColumn>(column, 1);
          K::template column<T>(column, b, 1, x, acc[1]);
        }
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

// kQ6_Kx16: quants rebuilt unsigned (0..63) from a ql and a qh word as in the row kernel. Two
// words' vpmaddubsw pair sums (each at most 2 × 63 × 127) add in int16 (at most 32004) and meet
// the row's scale in one vpmaddwd, so a sub-block of 16 over 8 rows takes 4 + 2 multiplies where
// the row kernel takes 4 + 4; the offset of 32 comes off as Σ (-32 · scale_j) · bsum_j, one
// vpmaddwd per sub-block pair. Word m of run g of part p (elements 128p + 32g + 4m..) is built
// from ql word 16p + 8 (g % 2) + m (high nibbles for g ≥ 2) and qh word 8p + m (bits 2g, 2g + 1),
// and belongs to sub-block 8p + 2g + m / 4 (see Q6_KInterleaved in avx512.cpp).
struct Q6_KHalves {
  using Act = BlockQ8_K;
  static constexpr size_t kColumn = kQ6_KColumn;

  // Words 4·odd .. 4·odd + 3 of run g of part p: one sub-block of 8 rows.
  static void quants(const uint8_t* w, int h, int p, int g, int odd, __m256i (&wq)[4]) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    for (int i = 0; i < 4; ++i) {
      const int m = 4 * odd + i;
      __m256i low = load256(w + kQ6_KLow + 64 * (16 * p + 8 * (g % 2) + m) + 32 * h);
      __m256i high = load256(w + kQ6_KHigh + 64 * (8 * p + m) + 32 * h);
      if (g >= 2) low = _mm256_srli_epi16(low, 4);
      high = g == 0 ? _mm256_slli_epi16(high, 4) : g == 1 ? _mm256_slli_epi16(high, 2) : g == 2 ? high : _mm256_srli_epi16(high, 2);
      wq[i] = _mm256_or_si256(_mm256_and_si256(low, nibble), _mm256_and_si256(high, top));
    }
  }

  // One or two tokens (decode, or an expert's share of a prompt): each ql and qh word is loaded
  // and shifted once for the four runs that share it, where the run-at-a-time loop below loads
  // qh four times and ql twice, which only more tokens pay for (in cache, 256 × 2048, one core:
  // one token 10.9 GB/s run at a time, where the row kernel makes 14.9).
  template <int T>
  static void few_tokens(const uint8_t* w, int64_t b, int h, const BlockQ8_K* const (&x)[T], __m256i (&total)[T]) {
    const __m256i dup_low = duplicate_low16(), dup_high = duplicate_high16();
    const __m256i nibble = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    // Two sums per token, so that one token still has two add chains.
    __m256i sum[T][2];
    for (auto& s : sum) s[0] = s[1] = _mm256_setzero_si256();
    for (int p = 0; p < 2; ++p) {
      __m256i scales[4];
      for (int g = 0; g < 4; ++g) {
        const int pair = 4 * p + g;
        scales[g] = _mm256_cvtepi8_epi16(load128(w + kQ6_KScales + 32 * pair + 16 * h));
        const __m256i offset = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales[g], 5));
        for (int t = 0; t < T; ++t)
          sum[t][g % 2] = _mm256_add_epi32(sum[t][g % 2], _mm256_madd_epi16(offset, broadcast4(x[t][b].bsums + 2 * pair)));
      }
      for (int odd = 0; odd < 2; ++odd)
        for (int m0 = 4 * odd; m0 < 4 * odd + 4; m0 += 2) {
          __m256i dots[4][T];  // per run g and token: words m0 and m0 + 1, added in int16
          for (int m = m0; m < m0 + 2; ++m) {
            const __m256i high = load256(w + kQ6_KHigh + 64 * (8 * p + m) + 32 * h);
            const __m256i low0 = load256(w + kQ6_KLow + 64 * (16 * p + m) + 32 * h);
            const __m256i low1 = load256(w + kQ6_KLow + 64 * (16 * p + 8 + m) + 32 * h);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(low0, nibble), _mm256_and_si256(_mm256_slli_epi16(high, 4), top)),
                _mm256_or_si256(_mm256_and_si256(low1, nibble), _mm256_and_si256(_mm256_slli_epi16(high, 2), top)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low0, 4), nibble), _mm256_and_si256(high, top)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(low1, 4), nibble),
                                _mm256_and_si256(_mm256_srli_epi16(high, 2), top)),
            };
            for (int g = 0; g < 4; ++g)
              for (int t = 0; t < T; ++t) {
                const __m256i product = _mm256_maddubs_epi16(q[g], broadcast4(x[t][b].qs + 128 * p + 32 * g + 4 * m));
                dots[g][t] = m == m0 ? product : _mm256_add_epi16(dots[g][t], product);
              }
          }
          for (int g = 0; g < 4; ++g) {
            const __m256i scale = _mm256_shuffle_epi8(scales[g], odd ? dup_high : dup_low);
            for (int t = 0; t < T; ++t) sum[t][g % 2] = _mm256_add_epi32(sum[t][g % 2], _mm256_madd_epi16(dots[g][t], scale));
          }
        }
    }
    for (int t = 0; t < T; ++t) total[t] = _mm256_add_epi32(sum[t][0], sum[t][1]);
  }

  // Word m of run g of part p, rebuilt as in quants() with g a constant. Each field is masked
  // before it is shifted into place (so no bits cross from the neighbouring byte and the mask can
  // take the load as its operand): four instructions a word, five for g = 3, with no loads of
  // their own (shifting first and masking after took 5.5 and ran at 1.01–1.04× the ticks in L2).
  template <int p, int g>
  static __m256i word(const uint8_t* w, int h, int m) {
    const __m256i low = load256(w + kQ6_KLow + 64 * (16 * p + 8 * (g % 2) + m) + 32 * h);
    const __m256i high = load256(w + kQ6_KHigh + 64 * (8 * p + m) + 32 * h);
    __m256i l, hi = _mm256_and_si256(high, _mm256_set1_epi8(static_cast<char>(3 << (2 * g))));  // the run's 2 bits
    if constexpr (g < 2) l = _mm256_and_si256(low, _mm256_set1_epi8(0x0F));
    else l = _mm256_srli_epi16(_mm256_and_si256(low, _mm256_set1_epi8(static_cast<char>(0xF0))), 4);
    if constexpr (g < 2) hi = _mm256_slli_epi16(hi, 4 - 2 * g);  // to bits 4-5
    if constexpr (g == 3) hi = _mm256_srli_epi16(hi, 2);
    return _mm256_or_si256(l, hi);
  }

  // Scale pair `pair` (sub-blocks 2·pair and 2·pair + 1, run g of part p) of both halves for
  // one token: each activation broadcast serves both halves' words. The offset of 32 is taken
  // off once per column: Σ (scale_j · bsum_j), one vpmaddwd a pair and half, times 32 at the end
  // (at most 16 × 128 × 2048 × 32 = 2^27 in int32).
  template <int p, int g>
  static void one_token_pair(const uint8_t* w, const BlockQ8_K& x, __m256i (&sum)[2][2], __m256i (&offsets)[2]) {
    constexpr int pair = 4 * p + g;
    // Without this GCC 12 sees the same ql and qh words loaded by several pairs, keeps them (or
    // their shifts) from one pair to the next, and spills them to the stack.
    asm volatile("" : "+r"(w));
    const __m256i bsums = broadcast4(x.bsums + 2 * pair);
    __m256i scales[2];
    for (int h = 0; h < 2; ++h) {
      scales[h] = _mm256_cvtepi8_epi16(load128(w + kQ6_KScales + 32 * pair + 16 * h));
      offsets[h] = _mm256_add_epi32(offsets[h], _mm256_madd_epi16(scales[h], bsums));
    }
    for (int odd = 0; odd < 2; ++odd) {
      const int8_t* a = x.qs + 128 * p + 32 * g + 16 * odd;
      const __m256i a0 = broadcast4(a), a1 = broadcast4(a + 4), a2 = broadcast4(a + 8), a3 = broadcast4(a + 12);
      for (int h = 0; h < 2; ++h) {
        const __m256i scale = _mm256_shuffle_epi8(scales[h], odd ? duplicate_high16() : duplicate_low16());
        const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(word<p, g>(w, h, 4 * odd), a0),
                                            _mm256_maddubs_epi16(word<p, g>(w, h, 4 * odd + 1), a1));
        const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(word<p, g>(w, h, 4 * odd + 2), a2),
                                            _mm256_maddubs_epi16(word<p, g>(w, h, 4 * odd + 3), a3));
        sum[h][odd] = _mm256_add_epi32(sum[h][odd], _mm256_add_epi32(_mm256_madd_epi16(s0, scale), _mm256_madd_epi16(s1, scale)));
        asm("" : "+x"(sum[h][odd]));  // keeps the sums in registers (as in q4_0_column below)
      }
    }
  }

  // A decode step's column, both halves (HalfGroups calls this for one token in place of
  // column<1>): a sub-block of 16 rows at a time, every index a constant. Each output is the
  // same integer sum as few_tokens' (exact, so the same float), in fewer instructions: GCC 12
  // compiles few_tokens<1> to a rolled loop whose iterations (8 vpmaddubsw each) store 11–12
  // values to the stack and load 32–34 back. The next column's lines are asked for in two
  // halves, one before each part, as HalfGroups does before each half (two columns ahead was
  // 1.00–1.16× the ticks from DRAM).
  static void one_token(const uint8_t* w, const BlockQ8_K& x, __m256& acc0, __m256& acc1) {
    __m256i sum[2][2], offsets[2];
    for (int h = 0; h < 2; ++h) sum[h][0] = sum[h][1] = offsets[h] = _mm256_setzero_si256();
    prefetch_half_column<kColumn>(w, 0);
    [&]<int... pair>(std::integer_sequence<int, pair...>) {
      (one_token_pair<0, pair>(w, x, sum, offsets), ...);
    }(std::make_integer_sequence<int, 4>{});
    prefetch_half_column<kColumn>(w, 1);
    [&]<int... pair>(std::integer_sequence<int, pair...>) {
      (one_token_pair<1, pair>(w, x, sum, offsets), ...);
    }(std::make_integer_sequence<int, 4>{});
    const __m256 xd = _mm256_set1_ps(x.d);
    __m256* acc[2] = {&acc0, &acc1};
    for (int h = 0; h < 2; ++h) {
      const __m256i total = _mm256_sub_epi32(_mm256_add_epi32(sum[h][0], sum[h][1]), _mm256_slli_epi32(offsets[h], 5));
      const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(w) + 8 * h);
      *acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xd), *acc[h]);
    }
  }

  template <int T>
  static void column(const uint8_t* w, int64_t b, int h, const BlockQ8_K* const (&x)[T], __m256 (&acc)[T]) {
    __m256i sum[T];
    if constexpr (T <= 2) {
      few_tokens(w, b, h, x, sum);
    } else {
      for (auto& v : sum) v = _mm256_setzero_si256();
      many_tokens(w, b, h, x, sum);
    }
    const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(w) + 8 * h);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(x[t][b].d)), acc[t]);
  }

  // More tokens: one sub-block of 8 rows rebuilt at a time and served to each token in turn
  // (per-run accumulators for every token would not fit the registers).
  template <int T>
  static void many_tokens(const uint8_t* w, int64_t b, int h, const BlockQ8_K* const (&x)[T], __m256i (&sum)[T]) {
    const __m256i dup_low = duplicate_low16(), dup_high = duplicate_high16();
    for (int pair = 0; pair < 8; ++pair) {
      const int p = pair / 4, g = pair % 4;
      // Row r's (scale 2·pair, scale 2·pair + 1) in int32 lane r.
      const __m256i scales = _mm256_cvtepi8_epi16(load128(w + kQ6_KScales + 32 * pair + 16 * h));
      const __m256i offset = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales, 5));
      for (int t = 0; t < T; ++t) sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(offset, broadcast4(x[t][b].bsums + 2 * pair)));
      for (int odd = 0; odd < 2; ++odd) {
        const __m256i scale = _mm256_shuffle_epi8(scales, odd ? dup_high : dup_low);
        __m256i wq[4];
        quants(w, h, p, g, odd, wq);
        for (int t = 0; t < T; ++t) {
          const int8_t* a = x[t][b].qs + 128 * p + 32 * g + 16 * odd;
          const __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(wq[0], broadcast4(a)), _mm256_maddubs_epi16(wq[1], broadcast4(a + 4)));
          const __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(wq[2], broadcast4(a + 8)), _mm256_maddubs_epi16(wq[3], broadcast4(a + 12)));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_add_epi32(_mm256_madd_epi16(s0, scale), _mm256_madd_epi16(s1, scale)));
        }
      }
    }
  }
};

void q4_0_small_batch_tile(const Tile& tile);  // with the small-batch kernels below

// Q4_0 on the interleaved copy: one or two tokens (a decode step's stream, each column's lines
// asked for ahead) through HalfGroups; more (prompts) through the small-batch walk, whose
// q4_0_column serves a column to 4 tokens and both halves at once where HalfGroups' runs of 4
// take each half on its own and a token's 8 activation broadcasts twice.
void q4_0_tile(const Tile& tile) {
  if (tile.n_tokens <= 2) HalfGroups<Q4_0Halves, 2>::tile(tile);
  else q4_0_small_batch_tile(tile);
}

const KernelSet kAvx2{
    "avx2",
    VectorIsa::kAvx2,
    FloatGemm<LoadF32, 3, 4, 4>::tile,
    FloatGemm<LoadF16, 3, 4, 4>::tile,
    FloatGemm<LoadBF16, 3, 4, 4>::tile,
    row_tile<Q4_0Kernel, 4, kRowPrefetch>,
    row_tile<Q8_0Kernel, 4, kRowPrefetch>,
    row_tile<Q4_KKernel, 4, kRowPrefetch>,
    row_tile<Q6_KKernel, 4, kRowPrefetch>,
    q4_0_tile,
    HalfGroups<Q8_0Halves, 4>::tile,
    HalfGroups<Q4_KHalves, 4>::tile,
    HalfGroups<Q6_KHalves, 4>::tile,
    nullptr,
    nullptr,
    nullptr,
    row_tile<LowBitKernel<BlockQ4_1>, 4, kRowPrefetch>,
    row_tile<LowBitKernel<BlockQ5_0>, 4, kRowPrefetch>,
    row_tile<LowBitKernel<BlockQ5_1>, 4, kRowPrefetch>,
    row_tile<Q2_KKernel, 4, kRowPrefetch>,
    row_tile<Q3_KKernel, 4, kRowPrefetch>,
    row_tile<Q5_KKernel, 4, kRowPrefetch>,
    row_tile<TableKernel<IQ4_NLBlock>, 4, kRowPrefetch>,
    row_tile<IQ4_XSKernel, 4, kRowPrefetch>,
    row_tile<TableKernel<MXFP4Block>, 4, kRowPrefetch>,
    nullptr,  // Q5_K, IQ4_XS, Q3_K and Q2_K keep their GGUF rows (no interleaved kernels here)
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

const KernelSet& avx2_kernels() { return kAvx2; }

// Small-batch kernels (kernel_set.h): a decode step of 2..kSmallBatch sequences. The few-token
// runs of HalfGroups above walk a group half by half and run of 4 tokens by run, each pass over
// all its columns: the first pass reads the group from memory without a prefetch and the others
// from cache, so a step of 2 streams the weights slower than a step of 1. Here each column
// serves every token of a run, both halves, before the next (the next column prefetched
// meanwhile): one pass from memory, with the tokens' accumulators in L1 between columns. The
// per-token arithmetic is the Halves' own, so each output is the same sequence of operations
// as in a one-token step.
namespace {

// Tokens per pass over a group: 8 tokens' activations of a 2048-wide row (≈ 20 KiB) stay in L1
// while the columns go by; 16 did not (measured: a pass of 16 Q4_K or Q6_K tokens was slower
// than the old runs of 4). A second run reads the group from cache.
constexpr int kSmallBatchRun = 8;

// A step of several tokens spends several times a one-token step's time on a column, so the
// next column's lines (at least 1 KiB ahead, as prefetch_column asks below that size) are
// asked for while this one is worked: they arrive before they are needed.
template <size_t kColumn>
inline void prefetch_next_column(const uint8_t* column) {
  constexpr size_t kAhead = (1024 + kColumn - 1) / kColumn * kColumn;
  const uintptr_t first = reinterpret_cast<uintptr_t>(column) + kAhead;
  for (size_t line = 0; line < kColumn; line += 64) _mm_prefetch(reinterpret_cast<const char*>(first + line), _MM_HINT_T0);
}

// Accumulators of a group's halves (0, 1) for a run of tokens.
using RunAcc = __m256[2][kSmallBatchRun];

// Writes tokens [t0, t0 + n) of group g's halves, leaving out padding rows.
void store_run(const Tile& tile, int64_t g, int halves, int64_t t0, int n, const RunAcc& acc) {
  for (int h = 0; h < halves; ++h) {
    const int64_t r0 = g * kInterleave + 8 * h, rows_here = std::min<int64_t>(8, tile.n_rows - r0);
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rows_here)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < n; ++t) {
      float* y = tile.y + (t0 + t) * tile.y_stride + r0;
      if (rows_here == 8) _mm256_storeu_ps(y, acc[h][t]);
      else _mm256_maskstore_ps(y, mask, acc[h][t]);
    }
  }
}

// Tokens [0, T) of x and acc through K::column<T>, the accumulators loaded and stored back.
template <class K, int T>
inline void column_run(const uint8_t* column, int64_t b, int h, const typename K::Act* const* x, __m256* acc) {
  const typename K::Act* xs[T];
  __m256 a[T];
  for (int t = 0; t < T; ++t) {
    xs[t] = x[t];
    a[t] = acc[t];
  }
  K::template column<T>(column, b, h, xs, a);
  for (int t = 0; t < T; ++t) acc[t] = a[t];
}

// Tokens [0, n) through one K::column<n> call (n ≤ the sequence's length): a half column's
// weights are unpacked once for all of them; what does not fit the registers (the per-token
// sums) spills to L1, which costs less than unpacking again.
template <class K, int... kMinus1>
inline void column_all(int n, const uint8_t* column, int64_t b, int h, const typename K::Act* const* x, __m256* acc,
                       std::integer_sequence<int, kMinus1...>) {
  ((n == kMinus1 + 1 ? column_run<K, kMinus1 + 1>(column, b, h, x, acc) : void()), ...);
}

// Walks the groups of a tile and, in each, its tokens in runs of kSmallBatchRun:
// `run(g, halves, t0, n, acc)` adds every column of group g's first `halves` halves for tokens
// [t0, t0 + n) into acc (zeroed before, stored after).
template <class Run>
void small_batch_walk(const Tile& tile, Run&& run) {
  alignas(32) RunAcc acc;
  const int64_t groups = (tile.n_rows + kInterleave - 1) / kInterleave;
  for (int64_t g = 0; g < groups; ++g) {
    const int halves = g * kInterleave + 8 < tile.n_rows ? 2 : 1;  // a padding half is left out
    for (int64_t t0 = 0; t0 < tile.n_tokens; t0 += kSmallBatchRun) {
      const auto n = static_cast<int>(std::min<int64_t>(kSmallBatchRun, tile.n_tokens - t0));
      for (auto& half : acc)
        for (auto& v : half) v = _mm256_setzero_ps();
      run(g, halves, t0, n, acc);
      store_run(tile, g, halves, t0, n, acc);
    }
  }
}

// kPerCall: tokens per K::column call. Q4_K and Q6_K unpack a half column once for the whole
// run (8: their unpacking, 64 words of nibbles or 6-bit quants rebuilt from two words, is dear;
// 5632 × 2048, one thread, least CPU time of 5, runs of 4 → 8 alternated twice at load 13-15:
// Q4_K 8 rows 1771, 2446 → 1716, 1445 µs, 16 rows 3278, 4409 → 2802, 2924; Q6_K 8 rows 3274,
// 2692 → 2378, 2715, 16 rows 5665, 7942 → 3698, 5411). Q8_0 stays at 4: its 16 unpacked words
// fill the registers, and 8 was no faster (8 rows 2627, 2110 → 2731, 2276 µs).
template <class K, int kPerCall>
void small_batch_tile(const Tile& tile) {
  using Act = typename K::Act;
  small_batch_walk(tile, [&](int64_t g, int halves, int64_t t0, int n, RunAcc& acc) {
    const Act* x[kSmallBatchRun];
    for (int t = 0; t < n; ++t) x[t] = reinterpret_cast<const Act*>(tile.x + static_cast<size_t>(t0 + t) * tile.x_stride);
    const uint8_t* w = tile.w + static_cast<size_t>(g) * tile.w_stride;
    for (int64_t b = 0; b < tile.n_blocks; ++b) {
      const uint8_t* column = w + static_cast<size_t>(b) * K::kColumn;
      prefetch_next_column<K::kColumn>(column);
      for (int h = 0; h < halves; ++h) {
        int t = 0;
        for (; t + kPerCall <= n; t += kPerCall) column_run<K, kPerCall>(column, b, h, x + t, acc[h] + t);
        if (t < n) column_all<K>(n - t, column, b, h, x + t, acc[h] + t, std::make_integer_sequence<int, kPerCall - 1>());
      }
    }
  });
}

// Adds column b of a Q4_0 group, both halves, for T ≤ 4 tokens (x[t] their activations,
// offset[t] their -8 · Σx of block b). The weights sit in registers one word (4 quants of each
// of 8 rows, per half) at a time and each broadcast of a token's 4 activations feeds both
// halves, so a product takes 0.75 loads where Q4_0Halves::column, with a half's 8 words held
// and a token's 8 broadcasts per half, takes about 1.6: on the 2-core AVX2 EPYC (Zen 3, two
// 256-bit loads a cycle) those loads, not the multiplies, bounded the step. A token's int16
// sums (T × 2 halves, 8 registers at T = 4) meet the words in another order than
// Q4_0Halves' tree, but integer sums are exact (8 words of at most 2 × 15 × 127 fit int16 in
// any order), and from the int32 sum on the operations are Q4_0Halves', so every output is bit
// for bit the one-token kernel's. Measured in L2 (256 × 2048, 8 tokens, one core): 10.4 →
// 8.6 cycles per token, half and block with GCC, 10.2 → 8.4 with Clang (the words in a rolled
// loop then; the pinned sums below took GCC further).
template <int T>
inline void q4_0_column(const uint8_t* column, int64_t b, const ActQ8_0* const* x, const int32_t* offset, __m256* acc0,
                        __m256* acc1) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const uint8_t* q = column + kInterleave * sizeof(Half);
  // Word k: low nibbles of the k-th 64 bytes, then (k >= 4) high ones.
  const auto words = [&](int k, __m256i& w0, __m256i& w1) {
    __m256i v0 = load256(q + 64 * (k % 4)), v1 = load256(q + 64 * (k % 4) + 32);
    if (k >= 4) {
      v0 = _mm256_srli_epi16(v0, 4);
      v1 = _mm256_srli_epi16(v1, 4);
    }
    w0 = _mm256_and_si256(v0, nibble);
    w1 = _mm256_and_si256(v1, nibble);
  };
  // The empty asm pins each token's two sums to registers at every step. Without it GCC 12, which
  // unrolls the words, keeps the 4 broadcasts of a word live at once, runs out of registers and
  // spills sums; with it, it unpacks the words ahead and the sums stay put. In L2 (256 × 2048,
  // 8 tokens, one core, TSC ticks per token, half and block, least of 300, alternated in one
  // process): 7.18 → 6.59 (0.92×), 0.78× at the host's lower clock. Clang 14 is level with the
  // loop before (0.96–1.02×).
  __m256i sum[2][T];
  __m256i w0, w1;
  words(0, w0, w1);
  for (int t = 0; t < T; ++t) {
    const __m256i a = broadcast4(x[t][b].qs);
    sum[0][t] = _mm256_maddubs_epi16(w0, a);
    sum[1][t] = _mm256_maddubs_epi16(w1, a);
    asm("" : "+x"(sum[0][t]), "+x"(sum[1][t]));
  }
  for (int k = 1; k < 8; ++k) {
    words(k, w0, w1);
    for (int t = 0; t < T; ++t) {
      const __m256i a = broadcast4(x[t][b].qs + 4 * k);
      sum[0][t] = _mm256_add_epi16(sum[0][t], _mm256_maddubs_epi16(w0, a));
      sum[1][t] = _mm256_add_epi16(sum[1][t], _mm256_maddubs_epi16(w1, a));
      asm("" : "+x"(sum[0][t]), "+x"(sum[1][t]));
    }
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 dw0 = _mm256_cvtph_ps(load128(column)), dw1 = _mm256_cvtph_ps(load128(column + 16));
  for (int t = 0; t < T; ++t) {
    const __m256i off = _mm256_set1_epi32(offset[t]);
    const __m256 d = _mm256_set1_ps(x[t][b].d);
    acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(sum[0][t], ones), off)),
                              _mm256_mul_ps(dw0, d), acc0[t]);
    acc1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(sum[1][t], ones), off)),
                              _mm256_mul_ps(dw1, d), acc1[t]);
  }
}

// Q4_0, the decode-hot type, past the generic walk: a column serves the run's tokens four at a
// time through q4_0_column, and each token's -8 · Σx is a broadcast from a table made once per
// tile, not built per column. Prompts take it too (q4_0_tile): the per-token arithmetic is the
// same, so the prompt's cost per position falls with the decode step's.
void q4_0_small_batch_tile(const Tile& tile) {
  const auto n_tokens = static_cast<size_t>(tile.n_tokens);
  thread_local std::vector<int32_t> offsets;  // [block][token]: -8 · Σx, as Q4_0Halves adds it
  offsets.resize(static_cast<size_t>(tile.n_blocks) * n_tokens);
  for (size_t t = 0; t < n_tokens; ++t) {
    const auto* x = reinterpret_cast<const ActQ8_0*>(tile.x + t * tile.x_stride);
    for (int64_t b = 0; b < tile.n_blocks; ++b) offsets[static_cast<size_t>(b) * n_tokens + t] = -8 * x[b].sum;
  }
  // A padding half (halves = 1) is computed all the same, on the copy's zero blocks, and not stored.
  small_batch_walk(tile, [&](int64_t g, int, int64_t t0, int n, RunAcc& acc) {
    const ActQ8_0* x[kSmallBatchRun];
    for (int t = 0; t < n; ++t) x[t] = reinterpret_cast<const ActQ8_0*>(tile.x + static_cast<size_t>(t0 + t) * tile.x_stride);
    const uint8_t* w = tile.w + static_cast<size_t>(g) * tile.w_stride;
    for (int64_t b = 0; b < tile.n_blocks; ++b) {
      const uint8_t* column = w + static_cast<size_t>(b) * Q4_0Halves::kColumn;
      prefetch_next_column<Q4_0Halves::kColumn>(column);
      const int32_t* offset = offsets.data() + static_cast<size_t>(b) * n_tokens + t0;
      int t = 0;
      for (; t + 4 <= n; t += 4) q4_0_column<4>(column, b, x + t, offset + t, acc[0] + t, acc[1] + t);
      if (n - t == 3) {
        q4_0_column<3>(column, b, x + t, offset + t, acc[0] + t, acc[1] + t);
      } else if (t < n) {
        // One or two tokens feed too few products per word loaded (11.3 and 11.8 cycles in
        // q4_0_column against Q4_0Halves' 10.4): a half's words held for them instead.
        for (int h = 0; h < 2; ++h)
          column_all<Q4_0Halves>(n - t, column, b, h, x + t, acc[h] + t, std::make_integer_sequence<int, 2>());
      }
    }
  });
}

const SmallBatchSet kAvx2SmallBatch{
    q4_0_small_batch_tile,
    small_batch_tile<Q8_0Halves, 4>,
    small_batch_tile<Q4_KHalves, kSmallBatchRun>,
    small_batch_tile<Q6_KHalves, kSmallBatchRun>,
};

}  // namespace

const SmallBatchSet& avx2_small_batch_kernels() { return kAvx2SmallBatch; }

}  // namespace orchard::core::kernels
