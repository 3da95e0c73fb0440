#include "comm/reduce.h"

#include <cstdint>
#include <cstring>

namespace orchard::comm {
namespace {

// _Float16 (GCC >= 12 on x86-64, Clang on arm64) lets the compiler use F16C / native half
// instructions where the target has them.
void sum_f16(_Float16* out, const _Float16* a, const _Float16* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

inline float bf16_load(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t bf16_store(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

void sum_bf16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_store(bf16_load(a[i]) + bf16_load(b[i]));
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
