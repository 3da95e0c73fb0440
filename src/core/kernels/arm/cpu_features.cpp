// arm64 feature detection: NEON is architectural; the dot product is optional before ARMv8.4.
#include "core/kernels/arm/arm_sets.h"

#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace orchard::core::kernels {
namespace {

bool has_dotprod() {
#if defined(__APPLE__)
  int value = 0;
  size_t size = sizeof value;
  return sysctlbyname("hw.optional.arm.FEAT_DotProd", &value, &size, nullptr, 0) == 0 && value != 0;
#elif defined(__linux__)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return false;
#endif
}

}  // namespace

std::vector<const KernelSet*> supported_simd_kernels() {
  std::vector<const KernelSet*> sets;
  if (has_dotprod()) sets.push_back(&neon_dotprod_kernels());
  sets.push_back(&neon_kernels());
  return sets;
}

const SmallBatchSet* small_batch_kernels(const KernelSet& set) {
  if (&set == &neon_dotprod_kernels()) return &neon_dotprod_small_batch_kernels();
  if (&set == &neon_kernels()) return &neon_small_batch_kernels();
  return nullptr;
}

}  // namespace orchard::core::kernels
