#pragma once
// The x86-64 kernel sets, each defined in a file compiled for its ISA; cpu_features.cpp
// chooses among them.
#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

const KernelSet& avx2_kernels();    // AVX2 + FMA + F16C
const KernelSet& avx512_kernels();
const SmallBatchSet& avx2_small_batch_kernels();  // 2..kSmallBatch tokens on AVX2's interleaved copies  // AVX-512 F/BW/VL + VNNI (plus the AVX2 features)

}  // namespace orchard::core::kernels
