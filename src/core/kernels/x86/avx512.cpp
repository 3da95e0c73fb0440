// AVX-512 VNNI kernels: the row-layout kernels of ymm_kernels.inc with vpdpbusd/vpdpwssd, and
// 512-bit kernels for the 16-row interleaved copies (Q4_0, Q8_0, Q4_K, Q6_K and the float types).
// GCC 12's own _mm512_cvtph_ps/_mm512_cvtepi32_ps start from _mm512_undefined_ps(), which it
// then reports as (maybe-)uninitialized wherever they inline (a false positive in its headers;
// the broadcasts and shifts start from _mm512_undefined_epi32() the same way).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/kernels/tile_driver.h"
#include "core/kernels/x86/x86_sets.h"

namespace orchard::core::kernels {
namespace {

inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i dot_s16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

#include "core/kernels/x86/ymm_kernels.inc"

// Writes the 16 rows' outputs of group `group` for T tokens, leaving out padding rows.
template <int T>
void store_group(const Tile& tile, int64_t group, int64_t t0, const __m512 (&acc)[T]) {
  const int64_t rows_here = std::min<int64_t>(kInterleave, tile.n_rows - group * kInterleave);
  const auto mask = static_cast<__mmask16>((1u << rows_here) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(tile.y + (t0 + t) * tile.y_stride + group * kInterleave, mask, acc[t]);
}

// Walks a tile of an interleaved copy group by group, tokens in runs of 8, 4, 2, 1 (compile-time
// counts, so the per-token accumulators live in registers): a group's columns are read from
// memory once and served from L1/L2 to every run of tokens.
template <class K>
void group_tile(const Tile& tile) {
  const int64_t groups = (tile.n_rows + kInterleave - 1) / kInterleave;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t t = 0;
    for (; t + 8 <= tile.n_tokens; t += 8) K::template run<8>(tile, g, t);
    if (t + 4 <= tile.n_tokens) {
      K::template run<4>(tile, g, t);
      t += 4;
    }
    if (t + 2 <= tile.n_tokens) {
      K::template run<2>(tile, g, t);
      t += 2;
    }
    if (t < tile.n_tokens) K::template run<1>(tile, g, t);
  }
}

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// Four bytes of x broadcast to every lane, straight from memory (a load-port µop).
inline __m512i broadcast4(const void* p) { return _mm512_broadcastd_epi32(_mm_loadu_si32(p)); }

// Each int32 lane's low (high) int16 copied into both its halves (vpshufb within 128-bit lanes),
// so that vpdpwssd weighs both int16 of the other operand's lane by it.
inline __m512i low_halves_doubled(__m512i v) {
  return _mm512_shuffle_epi8(v, _mm512_set4_epi32(0x0D0C0D0C, 0x09080908, 0x05040504, 0x01000100));
}
inline __m512i high_halves_doubled(__m512i v) {
  return _mm512_shuffle_epi8(v, _mm512_set4_epi32(0x0F0E0F0E, 0x0B0A0B0A, 0x07060706, 0x03020302));
}

// Each int32 lane's low (high) int16, sign- or zero-extended: a row's scale of a pair of
// sub-blocks.
inline __m512i signed_low_halves(__m512i v) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16); }
inline __m512i signed_high_halves(__m512i v) { return _mm512_srai_epi32(v, 16); }
inline __m512i unsigned_low_halves(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)); }
inline __m512i unsigned_high_halves(__m512i v) { return _mm512_srli_epi32(v, 16); }

// Per-token int32 sums of vpdpbusd products over a run of quant words, kept in enough
// independent chains that their latency stays hidden when few tokens share the weights (at
// 4+ tokens the tokens' own chains suffice, and more would cost registers).
template <int T>
struct DotChains {
  static constexpr int kChains = T >= 4 ? 1 : T == 2 ? 2 : 4;
  __m512i s[T][kChains];
  DotChains() {
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < kChains; ++c) s[t][c] = _mm512_setzero_si512();
  }
  void add(int t, int word, __m512i w, __m512i x) { s[t][word % kChains] = _mm512_dpbusd_epi32(s[t][word % kChains], w, x); }
  __m512i total(int t) const {
    __m512i sum = s[t][0];
    for (int c = 1; c < kChains; ++c) sum = _mm512_add_epi32(sum, s[t][c]);
    return sum;
  }
};

// 16 rows × T tokens of a kQ4_Kx16 copy, or (kFifthBit) of a kQ5_Kx16 one, whose quants gain
// their fifth bit from qh (0..31, still unsigned for vpdpbusd). Per sub-block of 32, 8 vpdpbusd
// give each row's Σ q·x in its int32 lane, multiplied by the row's 6-bit scale (vpmulld) into
// the super-block sum; the mins meet the activations' per-16 sums through vpdpwssd, so the only
// float work is two FMAs per super-block and token.
// Decode (one token) streams each weight byte once from DRAM with little work per byte. Asking
// for a whole column's lines before computing on it puts all of its cache misses in flight at
// once, instead of one line at a time as the loads reach them. The column asked for is the
// first at least 2 KiB ahead (past a tile's end the lines are the next group's, or unused: a
// prefetch never faults). On an earlier AVX-512 host (TinyLlama Q4_K_M decode, one core) the
// current column had measured best (35–36 tok/s against 31–32 at 4 KiB ahead); on Sapphire
// Rapids (2 cores) the current column left the 256-bit AVX2 kernels, which ask 1 KiB ahead,
// faster on a mixture's small expert matrices, and asking ahead is faster. bench_kernels, 2
// threads, medians of three alternated runs, current column vs 1 KiB ahead, then 1 KiB vs 2 KiB
// in a second set: moe_decode Q4_K 740 → 622, 622 → 567 µs; Q4_0 681 → 633, 592 → 553; Q4_K
// with Q6_K down 856 → 765, 658 → 683; gemv 5632 × 2048 Q4_K 423 → 359, 372 → 362; Q6_K 728 →
// 613, 576 → 584; Q8_0 741 → 679, 683 → 643; Q4_0 381 → 376, 360 → 333. moe-3b decode, 2
// threads, alternated with the current-column build: Q4_K_M 23.8 → 27.5 and 25.3 → 32.0 tok/s,
// Q4_0 33.3 → 34.8 and 30.7 → 38.3.
// Runs of up to 4 tokens (a batched decode step of 2–4 sequences, and a prompt's tails) stream
// the weights too and ask for them the same way; at 8 tokens a column's arithmetic covers its
// misses. bench_kernels decode_batch 5632 × 2048, 2 threads, medians of three alternated runs,
// asking for runs of one token only vs up to 4: 2 sequences Q6_K 1113 → 643 µs, Q4_K 499 → 471,
// Q4_0 447 → 392; 4 sequences Q6_K 1012 → 766, Q4_K 593 → 495, Q4_0 458 → 436.
constexpr int kPrefetchTokens = 4;
constexpr size_t kColumnPrefetchAhead = 2048;
template <size_t kColumn>
inline void prefetch_column(const uint8_t* column) {
  constexpr size_t kAhead = (kColumnPrefetchAhead + kColumn - 1) / kColumn * kColumn;
  for (size_t line = 0; line < kColumn; line += 64) _mm_prefetch(reinterpret_cast<const char*>(column + kAhead + line), _MM_HINT_T0);
}

// The 32-element types' columns are small (288 bytes for Q4_0, 544 for Q8_0), and asking for
// one column's lines per column, as above, was slower than not asking at all: the hardware
// prefetcher follows their steady stream, and the requests only got in its way. Asking once
// per burst of whole columns (at least 4 KiB) for the next burst is faster than either. One
// process alternating the variants step by step (a moe_decode-shaped step, moe-3b's 4 experts
// of 32, from DRAM; medians of 750 steps each), Q4_0, one column 2 KiB ahead / none / 4 KiB
// bursts: 1 thread 26.1 / 28.0 / 31.8 GB/s, 2 threads 47.5 / 50.2 / 54.6; bursts of 2 KiB
// (two ahead) 28.8 and 50.0, of 8 KiB 19.7 and 34.6. Q8_0: 1 thread 27.0 / 30.3 / 31.7, 2
// threads 51.5 / 57.5 / 60.8. A 5632 × 2048 Q4_0 matrix: 1 thread 27.7 / 29.4 / 35.7, 2 threads
// 66.0 / 66.1 / 64.7 (the bus saturated either way). Runs of 2–4 tokens keep the column
// prefetch: their arithmetic per byte is higher, and in bench_kernels decode_batch (4 rows)
// the bursts looked slower (not measured finely enough to say). The burst is unrolled and always inlined:
// GCC 12 judges a function that only prefetches to have no effect and drops calls to it that
// are not inlined before that analysis (it did so to this burst's unrolled lines in a lambda).
template <size_t... kLine>
[[gnu::always_inline]] inline void prefetch_lines(const uint8_t* first, std::index_sequence<kLine...>) {
  (_mm_prefetch(reinterpret_cast<const char*>(first + 64 * kLine), _MM_HINT_T0), ...);
}
template <size_t kColumn>
[[gnu::always_inline]] inline void prefetch_burst(const uint8_t* column, int64_t b) {
  constexpr size_t kColumnsPerBurst = (4096 + kColumn - 1) / kColumn, kBurst = kColumnsPerBurst * kColumn;
  if (static_cast<size_t>(b) % kColumnsPerBurst == 0) prefetch_lines(column + kBurst, std::make_index_sequence<(kBurst + 63) / 64>());
}

template <bool kFifthBit>
struct KMinInterleaved {
  static constexpr size_t kColumn = kFifthBit ? kQ5_KColumn : kQ4_KColumn;

  // Quant word v's nibbles of sub-block `sub` (low nibbles for even, high for odd), with the
  // fifth bits of `high` (qh word) where the type has them: bit `sub` of each qh byte.
  static __m512i quants(__m512i v, __m512i high, int sub) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i low = _mm512_and_si512(sub % 2 ? _mm512_srli_epi16(v, 4) : v, nibble);
    if constexpr (!kFifthBit) {
      return low;
    } else {
      // Bit `sub` of each byte moved to bit 4 (a 16-bit shift; bits crossing into the other
      // byte land outside bit 4 and are masked off), then low | (that & 0x10): one vpternlogd.
      const __m512i moved = sub <= 4 ? _mm512_slli_epi16(high, 4 - sub) : _mm512_srli_epi16(high, sub - 4);
      return _mm512_ternarylogic_epi32(low, moved, _mm512_set1_epi8(0x10), 0xF8);
    }
  }

  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const BlockQ8_K* x[T];
    token_pointers(tile, t0, x);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < tile.n_blocks; ++b, w += kColumn) {
      if constexpr (T <= kPrefetchTokens) prefetch_column<kColumn>(w);
      const __m512 d = _mm512_cvtph_ps(load256(w)), dmin = _mm512_cvtph_ps(load256(w + kQ4_KDmin));
      // Σ_j min_j · Σ(x in sub-block j): sub-block j's two per-16 sums are the int32 word j of
      // bsums, so (min_j, min_j) against it is one vpdpwssd.
      __m512i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const __m512i mins = _mm512_cvtepu8_epi16(load256(w + kQ4_KMins + 32 * p));
        const __m512i even = low_halves_doubled(mins), odd = high_halves_doubled(mins);
        for (int t = 0; t < T; ++t) {
          sum[t] = _mm512_dpwssd_epi32(sum[t], even, broadcast4(x[t][b].bsums + 4 * p));
          sum[t] = _mm512_dpwssd_epi32(sum[t], odd, broadcast4(x[t][b].bsums + 4 * p + 2));
        }
      }
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dmin, _mm512_set1_ps(x[t][b].d)), acc[t]);
        sum[t] = _mm512_setzero_si512();
      }
      for (int p = 0; p < 4; ++p) {
        // Sub-blocks 2p (low nibbles of quant words 8p..8p+7) and 2p+1 (high nibbles).
        const __m512i scales = _mm512_cvtepu8_epi16(load256(w + kQ4_KScales + 32 * p));
        const uint8_t* q = w + kQ4_KQuants + 512 * p;
        // One token: each quant word loaded once for both sub-blocks (low and high nibbles);
        // more tokens would need two sets of accumulators each, so they take the halves in turn.
        constexpr int kHalvesAtOnce = T == 1 ? 2 : 1;
        for (int first = 0; first < 2; first += kHalvesAtOnce) {
          DotChains<T> dots[kHalvesAtOnce];
          for (int k = 0; k < 8; ++k) {
            const __m512i v = load512(q + 64 * k);
            const __m512i high = kFifthBit ? load512(w + kQ5_KHigh + 64 * k) : v;
            for (int i = 0; i < kHalvesAtOnce; ++i) {
              const int half = first + i;
              const __m512i wq = quants(v, high, 2 * p + half);
              for (int t = 0; t < T; ++t) dots[i].add(t, k, wq, broadcast4(x[t][b].qs + 64 * p + 32 * half + 4 * k));
            }
          }
          for (int i = 0; i < kHalvesAtOnce; ++i) {
            const int half = first + i;
            const __m512i scale = half ? unsigned_high_halves(scales) : unsigned_low_halves(scales);
            for (int t = 0; t < T; ++t) sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dots[i].total(t), scale));
          }
        }
      }
      for (int t = 0; t < T; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x[t][b].d)), acc[t]);
    }
    store_group(tile, group, t0, acc);
  }
};

// 16 rows × T tokens of a kIQ4_XSx16 copy. The nibbles index IQ4_NL's table through vpshufb,
// into the table plus 128 (so vpdpbusd reads them unsigned); per sub-block of 32, 8 vpdpbusd
// give each row's Σ (value + 128) · x, times the row's signed scale (vpmulld), and the 128 comes
// off as 128 · Σ_j scale_j · Σ(x in sub-block j), one vpdpwssd per sub-block against the
// activations' per-16 sums (as Q4_K's mins).
struct IQ4_XSInterleaved {
  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const BlockQ8_K* x[T];
    token_pointers(tile, t0, x);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i table = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values))),
                                           _mm512_set1_epi8(static_cast<char>(0x80)));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < tile.n_blocks; ++b, w += kIQ4_XSColumn) {
      if constexpr (T <= kPrefetchTokens) prefetch_column<kIQ4_XSColumn>(w);
      __m512i sum[T], offset[T];
      for (int t = 0; t < T; ++t) sum[t] = offset[t] = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const __m512i scales = _mm512_cvtepi8_epi16(load256(w + kIQ4_XSScales + 32 * p));
        const __m512i pair_scales[2] = {low_halves_doubled(scales), high_halves_doubled(scales)};
        const __m512i row_scales[2] = {signed_low_halves(scales), signed_high_halves(scales)};
        for (int i = 0; i < 2; ++i) {
          const int j = 2 * p + i;
          const uint8_t* q = w + kIQ4_XSQuants + 256 * j;
          DotChains<T> dots;
          for (int k = 0; k < 4; ++k) {
            const __m512i v = load512(q + 64 * k);
            const __m512i low = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nibble));
            const __m512i high = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
            for (int t = 0; t < T; ++t) {
              dots.add(t, 2 * k, low, broadcast4(x[t][b].qs + 32 * j + 4 * k));
              dots.add(t, 2 * k + 1, high, broadcast4(x[t][b].qs + 32 * j + 16 + 4 * k));
            }
          }
          for (int t = 0; t < T; ++t) {
            sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dots.total(t), row_scales[i]));
            offset[t] = _mm512_dpwssd_epi32(offset[t], pair_scales[i], broadcast4(x[t][b].bsums + 2 * j));
          }
        }
      }
      const __m512 d = _mm512_cvtph_ps(load256(w));
      for (int t = 0; t < T; ++t) {
        const __m512i total = _mm512_sub_epi32(sum[t], _mm512_slli_epi32(offset[t], 7));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, _mm512_set1_ps(x[t][b].d)), acc[t]);
      }
    }
    store_group(tile, group, t0, acc);
  }
};

// 16 rows × T tokens of a copy of the 2-bit-plane K-quants (kQ2_Kx16, kQ3_Kx16): 16 sub-blocks
// of 16, and qs words whose four 2-bit fields (shifts j = 0..3) hold elements 128h + 32j + l.
// Quants are rebuilt unsigned by the type (`Planes::quants`); per sub-block of 16, 4 vpdpbusd
// give each row's Σ q·x, and `Planes::pair` weighs a pair of sub-blocks' sums by their scales
// into `sum` and their mins or offsets (against the activations' per-16 sums, one vpdpwssd)
// into `other`; `Planes::result` makes the floats.
template <class Planes>
struct PlaneInterleaved {
  // One token (decode): each word (and the type's word beside it) is loaded once for the four
  // shifts that share it, into [shift][odd sub-block] sums, where the loop below loads them
  // once per shift. Its first form, loading them per shift, left Q3_K at 139–147 µs against
  // 97–105 (gemv 5632 × 2048, 2 threads).
  static void one_token(const uint8_t* w, const BlockQ8_K& x, __m512i& sum, __m512i& other) {
    for (int h = 0; h < 2; ++h) {
      __m512i dots[4][2];
      for (auto& d : dots) d[0] = d[1] = _mm512_setzero_si512();
      for (int m = 0; m < 8; ++m) {
        const typename Planes::Words words = Planes::load(w, h, m);
        for (int j = 0; j < 4; ++j)
          dots[j][m / 4] = _mm512_dpbusd_epi32(dots[j][m / 4], Planes::quants(words, h, j), broadcast4(x.qs + 128 * h + 32 * j + 4 * m));
      }
      for (int j = 0; j < 4; ++j) Planes::pair(w, 4 * h + j, x, dots[j][0], dots[j][1], sum, other);
    }
  }

  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const BlockQ8_K* x[T];
    token_pointers(tile, t0, x);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < tile.n_blocks; ++b, w += Planes::kColumn) {
      if constexpr (T <= kPrefetchTokens) prefetch_column<Planes::kColumn>(w);
      __m512i sum[T], other[T];
      for (int t = 0; t < T; ++t) sum[t] = other[t] = _mm512_setzero_si512();
      if constexpr (T == 1) {
        one_token(w, x[0][b], sum[0], other[0]);
      } else {
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j) {
            __m512i dots[T][2];
            for (int odd = 0; odd < 2; ++odd) {
              DotChains<T> chains;
              for (int i = 0; i < 4; ++i) {
                const int m = 4 * odd + i;
                const __m512i wq = Planes::quants(Planes::load(w, h, m), h, j);
                for (int t = 0; t < T; ++t) chains.add(t, i, wq, broadcast4(x[t][b].qs + 128 * h + 32 * j + 4 * m));
              }
              for (int t = 0; t < T; ++t) dots[t][odd] = chains.total(t);
            }
            for (int t = 0; t < T; ++t) Planes::pair(w, 4 * h + j, x[t][b], dots[t][0], dots[t][1], sum[t], other[t]);
          }
      }
      for (int t = 0; t < T; ++t) acc[t] = Planes::result(w, sum[t], other[t], x[t][b].d, acc[t]);
    }
    store_group(tile, group, t0, acc);
  }
};

// Q3_K: the quant plus 4 (0..7) from its 2 bits in a qs word and its third in the hmask word
// beside it; signed scales; the 4 comes off as 4 · Σ scale · Σ(x in the sub-block).
struct Q3_KPlanes {
  static constexpr size_t kColumn = kQ3_KColumn;
  struct Words {
    __m512i v, high;
  };
  static Words load(const uint8_t* w, int h, int m) {
    return {load512(w + kQ3_KQuants + 64 * (8 * h + m)), load512(w + kQ3_KHigh + 64 * m)};
  }
  static __m512i quants(const Words& words, int h, int j) {
    const __m512i low = _mm512_and_si512(_mm512_srli_epi16(words.v, 2 * j), _mm512_set1_epi8(0x03));
    const int bit = 4 * h + j;
    // That bit moved to bit 2 of each byte (a 16-bit shift; what crosses into the other byte
    // lands outside bit 2 and is masked off), then low | (that & 0x04): one vpternlogd.
    const __m512i moved = bit >= 2 ? _mm512_srli_epi16(words.high, bit - 2) : _mm512_slli_epi16(words.high, 2 - bit);
    return _mm512_ternarylogic_epi32(low, moved, _mm512_set1_epi8(0x04), 0xF8);
  }
  static void pair(const uint8_t* w, int pair, const BlockQ8_K& x, __m512i even, __m512i odd, __m512i& sum, __m512i& offset) {
    const __m512i scales = _mm512_cvtepi8_epi16(load256(w + kQ3_KScales + 32 * pair));
    offset = _mm512_dpwssd_epi32(offset, scales, broadcast4(x.bsums + 2 * pair));
    sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(even, signed_low_halves(scales)));
    sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(odd, signed_high_halves(scales)));
  }
  static __m512 result(const uint8_t* w, __m512i sum, __m512i offset, float xd, __m512 acc) {
    const __m512i total = _mm512_sub_epi32(sum, _mm512_slli_epi32(offset, 2));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(_mm512_cvtph_ps(load256(w)), _mm512_set1_ps(xd)), acc);
  }
};

// Q2_K: the 2-bit quant left in place (q · 4^j, at most 192: still a byte), so a field costs one
// AND, and the sub-block's sums, exact multiples of 4^j, are shifted back once; each
// sub-block's byte holds its 4-bit scale (low nibble) and min (high); the mins meet the
// activations' per-16 sums and come off times dmin. Shifting every field down first (a vpsrlw
// more per word and field) ran gemv 5632 × 2048 at 87–94 µs on 2 threads, 253 → 189–197 on one.
struct Q2_KPlanes {
  static constexpr size_t kColumn = kQ2_KColumn;
  using Words = __m512i;
  static Words load(const uint8_t* w, int h, int m) { return load512(w + kQ2_KQuants + 64 * (8 * h + m)); }
  static __m512i quants(const Words& v, int, int j) { return _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(3 << (2 * j)))); }
  static void pair(const uint8_t* w, int pair, const BlockQ8_K& x, __m512i even, __m512i odd, __m512i& sum, __m512i& mins) {
    const int shift = 2 * (pair % 4);
    even = _mm512_srai_epi32(even, shift);
    odd = _mm512_srai_epi32(odd, shift);
    const __m512i bytes = _mm512_cvtepu8_epi16(load256(w + kQ2_KScales + 32 * pair));
    const __m512i scales = _mm512_and_si512(bytes, _mm512_set1_epi16(0x0F));
    mins = _mm512_dpwssd_epi32(mins, _mm512_srli_epi16(bytes, 4), broadcast4(x.bsums + 2 * pair));
    sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(even, unsigned_low_halves(scales)));
    sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(odd, unsigned_high_halves(scales)));
  }
  static __m512 result(const uint8_t* w, __m512i sum, __m512i mins, float xd, __m512 acc) {
    const __m512 x_scale = _mm512_set1_ps(xd);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(_mm512_cvtph_ps(load256(w)), x_scale), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(_mm512_cvtph_ps(load256(w + kQ2_KDmin)), x_scale), acc);
  }
};

// 16 rows × T tokens of a kQ6_Kx16 copy. Quants are rebuilt unsigned (0..63) from a word of
// ql and one of qh; per sub-block of 16, 4 vpdpbusd give each row's Σ q·x, times its scale
// (vpmulld); the offset of 32 comes off through the activations' per-16 sums, as
// Σ (-32 · scale_j) · bsum_j with one vpdpwssd per pair of sub-blocks.
struct Q6_KInterleaved {
  // Element e of half h: low nibble in ql byte 64h + e % 64 (high half of the byte for e ≥ 64),
  // top bits in qh byte 32h + e % 32 at bit 2 (e / 32). So the 4 quant words m of run g
  // (elements 32g + 4m..) use ql word 16h + 8 (g % 2) + m and qh word 8h + m; runs are
  // sub-block pairs 4h + g, words 0-3 the even sub-block, 4-7 the odd one.
  // Quant word m of run g, rebuilt unsigned from its ql and qh words.
  static __m512i quants(__m512i low, __m512i high, int g) {
    const __m512i nibble = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    if (g >= 2) low = _mm512_srli_epi16(low, 4);
    high = g == 0 ? _mm512_slli_epi16(high, 4) : g == 1 ? _mm512_slli_epi16(high, 2) : g == 2 ? high : _mm512_srli_epi16(high, 2);
    // (low & 0x0F) | (high & 0x30): one vpternlogd after the first AND.
    return _mm512_ternarylogic_epi32(_mm512_and_si512(low, nibble), high, top, 0xF8);
  }
  // Adds the offset of 32 (Σ -32 · scale_j · bsum_j) and Σ_j scale_j · dot_j of pair 4h + g.
  static __m512i scaled(__m512i sum, const uint8_t* w, const BlockQ8_K& x, int pair, __m512i even_dot, __m512i odd_dot) {
    const __m512i scales = _mm512_cvtepi8_epi16(load256(w + kQ6_KScales + 32 * pair));
    const __m512i offset = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(scales, 5));
    sum = _mm512_dpwssd_epi32(sum, offset, broadcast4(x.bsums + 2 * pair));
    sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(even_dot, signed_low_halves(scales)));
    return _mm512_add_epi32(sum, _mm512_mullo_epi32(odd_dot, signed_high_halves(scales)));
  }

  // One token (decode): each ql and qh word is loaded once for the runs that share it (a qh
  // word serves all four runs of its half, a ql word two), where the loop over runs below
  // loads qh four times and ql twice. One core, 256 × 2048 (in cache): 26.2 → 32.6 GB/s; 32000
  // × 2048 (from DRAM): 22.5–23.0 → 23.4–25.4.
  static __m512i one_token(const uint8_t* w, const BlockQ8_K& x) {
    __m512i sum = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      __m512i dots[4][2];  // [run g][odd sub-block]
      for (auto& d : dots) d[0] = d[1] = _mm512_setzero_si512();
      for (int m = 0; m < 8; ++m) {
        const __m512i high = load512(w + kQ6_KHigh + 64 * (8 * h + m));
        const __m512i low[2] = {load512(w + kQ6_KLow + 64 * (16 * h + m)), load512(w + kQ6_KLow + 64 * (16 * h + 8 + m))};
        for (int g = 0; g < 4; ++g) {
          const int pair = 4 * h + g, odd = m / 4;
          dots[g][odd] = _mm512_dpbusd_epi32(dots[g][odd], quants(low[g % 2], high, g),
                                             broadcast4(x.qs + 16 * (2 * pair + odd) + 4 * (m % 4)));
        }
      }
      for (int g = 0; g < 4; ++g) sum = scaled(sum, w, x, 4 * h + g, dots[g][0], dots[g][1]);
    }
    return sum;
  }

  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const BlockQ8_K* x[T];
    token_pointers(tile, t0, x);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < tile.n_blocks; ++b, w += kQ6_KColumn) {
      __m512i sum[T];
      if constexpr (T <= kPrefetchTokens) prefetch_column<kQ6_KColumn>(w);
      if constexpr (T == 1) {
        sum[0] = one_token(w, x[0][b]);
      } else {
        for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
        // Several tokens share each rebuilt word here, and [run][odd] accumulators per token
        // would not fit the registers: one run at a time (measured: 58 against 103–117 GMAC/s
        // at 64 tokens). Left to the compiler to unroll: fully unrolled (pragmas), decode ran at
        // half the speed, 7.6 against 15.3 GB/s on one core, for 15% more prompt throughput.
        for (int h = 0; h < 2; ++h) {
          for (int g = 0; g < 4; ++g) {
            const int pair = 4 * h + g;
            const __m512i scales = _mm512_cvtepi8_epi16(load256(w + kQ6_KScales + 32 * pair));
            const __m512i offset = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(scales, 5));
            for (int t = 0; t < T; ++t) sum[t] = _mm512_dpwssd_epi32(sum[t], offset, broadcast4(x[t][b].bsums + 2 * pair));
            for (int odd = 0; odd < 2; ++odd) {
              const __m512i scale = odd ? signed_high_halves(scales) : signed_low_halves(scales);
              DotChains<T> dots;
              for (int i = 0; i < 4; ++i) {
                const int m = 4 * odd + i;
                const __m512i wq = quants(load512(w + kQ6_KLow + 64 * (16 * h + 8 * (g % 2) + m)),
                                          load512(w + kQ6_KHigh + 64 * (8 * h + m)), g);
                for (int t = 0; t < T; ++t) dots.add(t, i, wq, broadcast4(x[t][b].qs + 16 * (2 * pair + odd) + 4 * i));
              }
              for (int t = 0; t < T; ++t) sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(dots.total(t), scale));
            }
          }
        }
      }
      const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(w));
      for (int t = 0; t < T; ++t)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x[t][b].d)), acc[t]);
    }
    store_group(tile, group, t0, acc);
  }
};

// 16 rows × T tokens of an interleaved copy. Each 64-byte load holds 4 quants of each of 16
// rows, so vpdpbusd against x's matching 4 quants (broadcast) adds to one int32 lane per row;
// the block's 16 scales convert with one vcvtph2ps and the result is 16 rows' outputs in one
// vector, with no horizontal sums. Weights are unsigned; kOffset (8 for Q4_0, 128 for the
// shifted Q8_0) comes off through x's quant sum.
template <Layout kLayout>
struct InterleavedKernel {
  static constexpr bool kNibbles = kLayout == kQ4_0x16;
  static constexpr int kOffset = kNibbles ? 8 : 128;
  static constexpr size_t kColumnBytes = kInterleave * (sizeof(Half) + (kNibbles ? 16 : 32));

  template <int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    constexpr int kChains = T >= 8 ? 1 : T >= 4 ? 2 : 4;
    const uint8_t* w = tile.w + static_cast<size_t>(group) * tile.w_stride;
    const ActQ8_0* x[T];
    for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const ActQ8_0*>(tile.x + static_cast<size_t>(t0 + t) * tile.x_stride);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < tile.n_blocks; ++b, w += kColumnBytes) {
      if constexpr (T == 1) prefetch_burst<kColumnBytes>(w, b);
      else if constexpr (T <= kPrefetchTokens) prefetch_column<kColumnBytes>(w);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
      const uint8_t* quants = w + kInterleave * sizeof(Half);
      __m512i wq[8];  // wq[k]: quants 4k..4k+3 of the 16 rows
      if constexpr (kNibbles) {
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_loadu_si512(quants + 64 * k);
          wq[k] = _mm512_and_si512(v, nibble);
          wq[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
      } else {
        for (int k = 0; k < 8; ++k) wq[k] = _mm512_loadu_si512(quants + 64 * k);
      }
      for (int t = 0; t < T; ++t) {
        const ActQ8_0& a = x[t][b];
        // kChains independent vpdpbusd chains: one chain of 8 would make its latency, not
        // memory, the limit when few tokens share the block.
        __m512i sum[kChains];
        sum[0] = _mm512_set1_epi32(-kOffset * a.sum);
        for (int c = 1; c < kChains; ++c) sum[c] = _mm512_setzero_si512();
        // Broadcast straight from memory (a load-port µop), not through a general register.
        for (int k = 0; k < 8; ++k)
          sum[k % kChains] = _mm512_dpbusd_epi32(sum[k % kChains], wq[k], _mm512_broadcastd_epi32(_mm_loadu_si32(a.qs + 4 * k)));
        for (int c = 1; c < kChains; ++c) sum[0] = _mm512_add_epi32(sum[0], sum[c]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[0]), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[t]);
      }
    }
    store_group(tile, group, t0, acc);
  }

};

// Float weights in 16-row groups (kF32x16, kF16x16, kBF16x16): a group's outputs for a token are
// Σ_c column c (its 16 rows' values, one load) × x[c] (broadcast), a sum of outer products with
// no horizontal reductions. A micro-tile of G groups × T tokens keeps G·T accumulators in
// registers (at most 4 × 6 = 24 of 32); per column it makes G loads, T broadcasts and G·T FMAs,
// so the FMA rate bounds it, not loads (standalone, one Zen 4 core: 56 GMAC/s of a 58.6 peak,
// where the row-layout GEMM above reaches 35–44). One token (decode) is handed one group at a
// time (the matmul driver's decode grain) and splits its columns over four FMA chains; the
// hardware prefetcher follows that sequential stream, and a software prefetch ahead of it
// measured slower (TinyLlama F16 decode, one core, alternated: 12.2–12.7 tok/s without, 10.3–10.8
// at 1 KiB ahead, 11.2–11.4 at 4 KiB).
struct LoadF32Column {
  static constexpr size_t kBytes = sizeof(float);
  static __m512 at(const uint8_t* p) { return _mm512_loadu_ps(p); }
};
struct LoadF16Column {
  static constexpr size_t kBytes = sizeof(Half);
  static __m512 at(const uint8_t* p) { return _mm512_cvtph_ps(load256(p)); }
};
struct LoadBF16Column {
  static constexpr size_t kBytes = sizeof(BHalf);
  static __m512 at(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
  }
};

template <class Load>
struct FloatGroups {
  static constexpr size_t kColumn = kInterleave * Load::kBytes;

  template <int G, int T>
  static void run(const Tile& tile, int64_t group, int64_t t0) {
    const uint8_t* w[G];
    for (int g = 0; g < G; ++g) w[g] = tile.w + static_cast<size_t>(group + g) * tile.w_stride;
    const float* x[T];
    token_pointers(tile, t0, x);
    // Below four independent FMA chains their latency (4 cycles each) limits a decode step, not
    // memory: one token over fewer than four groups splits the columns over kChains sums.
    constexpr int kChains = T == 1 ? 4 / G : 1;
    __m512 acc[kChains][G][T];
    for (int k = 0; k < kChains; ++k)
      for (int g = 0; g < G; ++g)
        for (int t = 0; t < T; ++t) acc[k][g][t] = _mm512_setzero_ps();
    auto column = [&](int k, int64_t c) {
      const size_t at = static_cast<size_t>(c) * kColumn;
      __m512 wv[G];
      for (int g = 0; g < G; ++g) wv[g] = Load::at(w[g] + at);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_set1_ps(x[t][c]);
        for (int g = 0; g < G; ++g) acc[k][g][t] = _mm512_fmadd_ps(wv[g], xv, acc[k][g][t]);
      }
    };
    int64_t c = 0;
    for (; c + kChains <= tile.n_blocks; c += kChains)
      for (int k = 0; k < kChains; ++k) column(k, c + k);
    for (; c < tile.n_blocks; ++c) column(0, c);
    for (int k = 1; k < kChains; ++k)
      for (int g = 0; g < G; ++g)
        for (int t = 0; t < T; ++t) acc[0][g][t] = _mm512_add_ps(acc[0][g][t], acc[k][g][t]);
    for (int g = 0; g < G; ++g) store_group(tile, group + g, t0, acc[0][g]);
  }
};

const KernelSet kAvx512{
    "avx512-vnni",
    VectorIsa::kAvx512,
    FloatGemm<LoadF32, 4, 6, 8>::tile,
    FloatGemm<LoadF16, 4, 6, 8>::tile,
    FloatGemm<LoadBF16, 4, 6, 8>::tile,
    row_tile<Q4_0Kernel, 8, kRowPrefetch>,
    row_tile<Q8_0Kernel, 8, kRowPrefetch>,
    row_tile<Q4_KKernel, 8, kRowPrefetch>,
    row_tile<Q6_KKernel, 8, kRowPrefetch>,
    group_tile<InterleavedKernel<kQ4_0x16>>,
    group_tile<InterleavedKernel<kQ8_0x16>>,
    group_tile<KMinInterleaved<false>>,
    group_tile<Q6_KInterleaved>,
    GroupTokenTiles<FloatGroups<LoadF32Column>, 4, 6>::tile,
    GroupTokenTiles<FloatGroups<LoadF16Column>, 4, 6>::tile,
    GroupTokenTiles<FloatGroups<LoadBF16Column>, 4, 6>::tile,
    row_tile<LowBitKernel<BlockQ4_1>, 8, kRowPrefetch>,
    row_tile<LowBitKernel<BlockQ5_0>, 8, kRowPrefetch>,
    row_tile<LowBitKernel<BlockQ5_1>, 8, kRowPrefetch>,
    row_tile<Q2_KKernel, 8, kRowPrefetch>,
    row_tile<Q3_KKernel, 8, kRowPrefetch>,
    row_tile<Q5_KKernel, 8, kRowPrefetch>,
    row_tile<TableKernel<IQ4_NLBlock>, 8, kRowPrefetch>,
    row_tile<IQ4_XSKernel, 8, kRowPrefetch>,
    row_tile<TableKernel<MXFP4Block>, 8, kRowPrefetch>,
    group_tile<KMinInterleaved<true>>,
    group_tile<IQ4_XSInterleaved>,
    group_tile<PlaneInterleaved<Q3_KPlanes>>,
    group_tile<PlaneInterleaved<Q2_KPlanes>>,
};

}  // namespace

const KernelSet& avx512_kernels() { return kAvx512; }

}  // namespace orchard::core::kernels
