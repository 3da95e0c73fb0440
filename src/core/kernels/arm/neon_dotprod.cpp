// NEON kernels with the ARMv8.2 dot product (compiled with +dotprod; called only when the CPU has it).
#include <arm_neon.h>

#include <cstring>

#include "core/kernels/arm/arm_sets.h"
#include "core/kernels/tile_driver.h"

namespace orchard::core::kernels {
namespace {

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

#include "core/kernels/arm/neon_kernels.inc"

const KernelSet kNeonDotprod{
    "neon-dotprod",
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

const KernelSet& neon_dotprod_kernels() { return kNeonDotprod; }

}  // namespace orchard::core::kernels
