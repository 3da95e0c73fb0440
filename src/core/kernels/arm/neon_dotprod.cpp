// NEON kernels with the ARMv8.2 dot product (compiled with +dotprod; called only when the CPU has it).
#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/kernels/arm/arm_sets.h"
#include "core/kernels/tile_driver.h"

namespace orchard::core::kernels {
namespace {

inline int32x4_t dot_s8(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }

template <int kLane>
inline int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t x) { return vdotq_laneq_s32(acc, w, x, kLane); }
constexpr bool kSdot = true;  // neon_small_batch.inc chooses its kernels by it

#include "core/kernels/arm/neon_kernels.inc"
#include "core/kernels/arm/neon_interleaved.inc"
#include "core/kernels/arm/neon_small_batch.inc"

const KernelSet kNeonDotprod{
    "neon-dotprod",
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

const SmallBatchSet kNeonDotprodSmallBatch{
    small_batch_tile<Q4_0Run>,
    small_batch_tile<Q8_0Run>,
    small_batch_tile<Q4_KRun>,
    small_batch_tile<Q6_KRun>,
};

}  // namespace

const KernelSet& neon_dotprod_kernels() { return kNeonDotprod; }
const SmallBatchSet& neon_dotprod_small_batch_kernels() { return kNeonDotprodSmallBatch; }

}  // namespace orchard::core::kernels
