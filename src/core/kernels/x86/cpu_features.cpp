// x86-64 feature detection. Compiled without ISA flags: it must run on any x86-64 CPU.
#include <cpuid.h>

#include "core/kernels/x86/x86_sets.h"

namespace orchard::core::kernels {
namespace {

struct Features {
  bool avx2 = false;
  bool avx512 = false;
};

uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return static_cast<uint64_t>(hi) << 32 | lo;
}

Features detect() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  // The OS must save the registers too: XCR0 bits 1-2 for xmm/ymm, 5-7 for the AVX-512 state.
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6) != 0x6) return f;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  f.avx2 = avx2 && fma && f16c;
  f.avx512 = f.avx2 && avx512f && avx512bw && avx512vl && vnni && (xcr0 & 0xE0) == 0xE0;
  return f;
}

}  // namespace

std::vector<const KernelSet*> supported_simd_kernels() {
  Features f = detect();
  std::vector<const KernelSet*> sets;
  if (f.avx512) sets.push_back(&avx512_kernels());
  if (f.avx2) sets.push_back(&avx2_kernels());
  return sets;
}

// AVX-512's VNNI kernels keep a 16-row group's outputs for several tokens in registers already.
const SmallBatchSet* small_batch_kernels(const KernelSet& set) {
  return &set == &avx2_kernels() ? &avx2_small_batch_kernels() : nullptr;
}

}  // namespace orchard::core::kernels
