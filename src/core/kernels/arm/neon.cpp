// Baseline NEON kernels (every AArch64 CPU).
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/kernels/arm/arm_sets.h"
#include "core/kernels/tile_driver.h"

namespace orchard::core::kernels {
namespace {

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
  // Products fit in s16 (|a·b| ≤ 128²); pairs of them are widened into the s32 lanes.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}

// dot_lane for the interleaved kernels, without sdot: x's lane broadcast, the 16 products
// widened to int16 and summed in adjacent pairs (a row's 4 products are 2 adjacent pairs).
// A pair reaches at most 2 × 128 × 127 = 32512 in int16, since the activations stay within ±127
// (both quantizers round x · 127 / amax) and the weights within the int8 range.
template <int kLane>
inline int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t x) {
  const int8x16_t xs = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), kLane));
  return vpadalq_s16(acc, vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(xs)), vmull_high_s8(w, xs)));
}
constexpr bool kSdot = false;  // neon_small_batch.inc chooses its kernels by it

#include "core/kernels/arm/neon_kernels.inc"
#include "core/kernels/arm/neon_interleaved.inc"
#include "core/kernels/arm/neon_small_batch.inc"

const KernelSet kNeon{
    "neon",
    VectorIsa::kNeon,
    row_tile<FloatKernel<LoadF32>, 4>,
    row_tile<FloatKernel<LoadF16>, 4>,
    row_tile<FloatKernel<LoadBF16>, 4>,
    row_tile<Q4_0Kernel, 4>,
    row_tile<Q8_0Kernel, 4>,
    row_tile<Q4_KKernel, 4>,
    row_tile<Q6_KKernel, 4>,
    QuadGroups<Q4_0Quads>::tile,
    QuadGroups<Q8_0Quads>::tile,
    QuadGroups<Q4_KQuads>::tile,
    QuadGroups<Q6_KQuads>::tile,
    GroupTokenTiles<FloatGroups<LoadF32Column>, 1, 4>::tile,
    GroupTokenTiles<FloatGroups<LoadF16Column>, 1, 4>::tile,
    GroupTokenTiles<FloatGroups<LoadBF16Column>, 1, 4>::tile,
    row_tile<Block32Kernel<Q4_1Block>, 4>,
    row_tile<Block32Kernel<Q5_0Block>, 4>,
    row_tile<Block32Kernel<Q5_1Block>, 4>,
    row_tile<LowBitKKernel<BlockQ2_K>, 4>,
    row_tile<LowBitKKernel<BlockQ3_K>, 4>,
    row_tile<Q5_KKernel, 4>,
    row_tile<Block32Kernel<IQ4_NLBlock>, 4>,
    row_tile<IQ4_XSKernel, 4>,
    row_tile<Block32Kernel<MXFP4Block>, 4>,
    nullptr,  // Q5_K, IQ4_XS, Q3_K and Q2_K keep their GGUF rows (no interleaved kernels here)
    nullptr,
    nullptr,
    nullptr,
};

const SmallBatchSet kNeonSmallBatch{
    small_batch_tile<Q4_0Run>,
    small_batch_tile<Q8_0Run>,
    small_batch_tile<Q4_KRun>,
    small_batch_tile<Q6_KRun>,
};

}  // namespace

const KernelSet& neon_kernels() { return kNeon; }
const SmallBatchSet& neon_small_batch_kernels() { return kNeonSmallBatch; }

}  // namespace orchard::core::kernels
