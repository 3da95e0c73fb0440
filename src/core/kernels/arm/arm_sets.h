#pragma once
// The arm64 kernel sets; cpu_features.cpp chooses between them.
#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

const KernelSet& neon_kernels();          // baseline AArch64 (NEON is always there)
const KernelSet& neon_dotprod_kernels();  // ARMv8.2 dot product (sdot)
// Their small-batch kernels (kernel_set.h), one set each.
const SmallBatchSet& neon_small_batch_kernels();
const SmallBatchSet& neon_dotprod_small_batch_kernels();

}  // namespace orchard::core::kernels
