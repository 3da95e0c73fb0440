#pragma once
// The arm64 kernel sets; cpu_features.cpp chooses between them.
#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

const KernelSet& neon_kernels();          // baseline AArch64 (NEON is always there)
const KernelSet& neon_dotprod_kernels();  // ARMv8.2 dot product (sdot)

}  // namespace orchard::core::kernels
