#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

// Linked on architectures without SIMD kernels: the generic set serves every call.
std::vector<const KernelSet*> supported_simd_kernels() { return {}; }

}  // namespace orchard::core::kernels
