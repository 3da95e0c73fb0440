// AVX2 + FMA + F16C kernels (compiled with those flags only; called only when cpuid says so).
#include <immintrin.h>

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
    nullptr,
    nullptr,
    nullptr,
    nullptr,
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
