#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

// Linked on architectures without SIMD kernels: the generic set serves every call.
std::vector<const KernelSet*> supported_simd_kernels() { return {}; }
const SmallBatchSet* small_batch_kernels(const KernelSet&) { return nullptr; }

}  // namespace orchard::core::kernels
