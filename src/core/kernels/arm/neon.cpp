// Baseline NEON kernels (every AArch64 CPU).
#include <arm_neon.h>

#include <cstring>

#include "core/kernels/arm/arm_sets.h"
#include "core/kernels/tile_driver.h"

namespace orchard::core::kernels {
namespace {

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) {
  // Products fit in s16 (|a·b| ≤ 128²); pairs of them are widened into the s32 lanes.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}

#include "core/kernels/arm/neon_kernels.inc"

const KernelSet kNeon{
    "neon",
    false,
    row_tile<FloatKernel<LoadF32>, 4>,
    row_tile<FloatKernel<LoadF16>, 4>,
    row_tile<FloatKernel<LoadBF16>, 4>,
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
    nullptr,  // q4_1
    nullptr,  // q5_0
    nullptr,  // q5_1
    nullptr,  // q2_k
    nullptr,  // q3_k
    nullptr,  // q5_k
    nullptr,  // iq4_nl
    nullptr,  // iq4_xs
    nullptr,  // mxfp4
};

}  // namespace

const KernelSet& neon_kernels() { return kNeon; }

}  // namespace orchard::core::kernels
