#include "comm/reduce.h"

#include <cstdint>
#include <cstring>

#include "core/quant.h"

namespace orchard::comm {
namespace {

// _Float16 (GCC >= 12 on x86-64, Clang on arm64) lets the compiler use F16C / native half
// instructions where the target has them.
void sum_f16(_Float16* out, const _Float16* a, const _Float16* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

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
      sum_f16(static_cast<_Float16*>(out), static_cast<const _Float16*>(a), static_cast<const _Float16*>(b), count);
      return;
    case DType::BF16:
      sum_bf16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count);
      return;
  }
  ORCHARD_CHECK(false, "bad dtype {}", static_cast<int>(dtype));
}

}  // namespace orchard::comm
