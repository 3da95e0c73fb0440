#include "comm/reduce.h"

#include <cstdint>
#include <cstring>

#include "core/quant.h"

namespace orchard::comm {
namespace {

// The compiler's half type lets it use F16C / native half instructions where the target has
// them: _Float16 (GCC >= 12 on x86-64, GCC >= 13, Clang on arm64 and from 15 on x86-64), or
// __fp16 on arm64 with GCC 12, whose C++ has no _Float16 though it defines __FLT16_MAX__.
// Other compilers convert in software.
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define ORCHARD_NATIVE_HALF __fp16
#elif defined(__FLT16_MAX__)
#define ORCHARD_NATIVE_HALF _Float16
#endif
#ifdef ORCHARD_NATIVE_HALF
void sum_f16(void* out, const void* a, const void* b, size_t n) {
  using Half = ORCHARD_NATIVE_HALF;
  auto* o = static_cast<Half*>(out);
  const auto *x = static_cast<const Half*>(a), *y = static_cast<const Half*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = static_cast<Half>(static_cast<float>(x[i]) + static_cast<float>(y[i]));
}
#else
void sum_f16(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<core::Half*>(out);
  const auto *x = static_cast<const core::Half*>(a), *y = static_cast<const core::Half*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = core::float_to_half(core::half_to_float(x[i]) + core::half_to_float(y[i]));
}
#endif

void sum_bf16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = core::float_to_bf16(core::bf16_to_float(a[i]) + core::bf16_to_float(b[i]));
}

void sum_f32(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

void sum_into(void* out, const void* a, const void* b, size_t count, DType dtype) {
  switch (dtype) {
    case DType::F32:
      sum_f32(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), count);
      return;
    case DType::F16:
      sum_f16(out, a, b, count);
      return;
    case DType::BF16:
      sum_bf16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count);
      return;
  }
  ORCHARD_CHECK(false, "bad dtype {}", static_cast<int>(dtype));
}

}  // namespace orchard::comm
