// AVX-512 VNNI kernels: the row-layout kernels of ymm_kernels.inc with vpdpbusd/vpdpwssd, and
// 512-bit kernels for the 16-row interleaved Q4_0/Q8_0 copies.
// GCC 12's own _mm512_cvtph_ps/_mm512_cvtepi32_ps start from _mm512_undefined_ps(), which it
// then reports as maybe-uninitialized wherever they inline (a false positive in its headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/kernels/tile_driver.h"
#include "core/kernels/x86/x86_sets.h"

namespace orchard::core::kernels {
namespace {

inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i dot_s16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

#include "core/kernels/x86/ymm_kernels.inc"

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
    const int64_t rows_here = std::min<int64_t>(kInterleave, tile.n_rows - group * kInterleave);
    const auto mask = static_cast<__mmask16>((1u << rows_here) - 1);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(tile.y + (t0 + t) * tile.y_stride + group * kInterleave, mask, acc[t]);
  }

  static void tile(const Tile& tile) {
    const int64_t groups = (tile.n_rows + kInterleave - 1) / kInterleave;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t t = 0;
      for (; t + 8 <= tile.n_tokens; t += 8) run<8>(tile, g, t);
      if (t + 4 <= tile.n_tokens) {
        run<4>(tile, g, t);
        t += 4;
      }
      if (t + 2 <= tile.n_tokens) {
        run<2>(tile, g, t);
        t += 2;
      }
      if (t < tile.n_tokens) run<1>(tile, g, t);
    }
  }
};

const KernelSet kAvx512{
    "avx512-vnni",
    false,
    row_tile<FloatKernel<LoadF32>, 8>,
    row_tile<FloatKernel<LoadF16>, 8>,
    row_tile<FloatKernel<LoadBF16>, 8>,
    row_tile<Q4_0Kernel, 8>,
    row_tile<Q8_0Kernel, 8>,
    row_tile<Q4_KKernel, 8>,
    row_tile<Q6_KKernel, 8>,
    InterleavedKernel<kQ4_0x16>::tile,
    InterleavedKernel<kQ8_0x16>::tile,
};

}  // namespace

const KernelSet& avx512_kernels() { return kAvx512; }

}  // namespace orchard::core::kernels
