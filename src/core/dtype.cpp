#include "core/dtype.h"

#include "core/error.h"
#include "core/quant.h"

namespace orchard::core {
namespace {

constexpr TypeTraits kF32{"f32", 1, 4};
constexpr TypeTraits kF16{"f16", 1, 2};
constexpr TypeTraits kBF16{"bf16", 1, 2};
constexpr TypeTraits kQ4_0{"q4_0", kQK4_0, sizeof(BlockQ4_0)};
constexpr TypeTraits kQ8_0{"q8_0", kQK8_0, sizeof(BlockQ8_0)};
constexpr TypeTraits kQ4_K{"q4_K", kQK_K, sizeof(BlockQ4_K)};
constexpr TypeTraits kQ6_K{"q6_K", kQK_K, sizeof(BlockQ6_K)};
constexpr TypeTraits kQ8_K{"q8_K", kQK_K, sizeof(BlockQ8_K)};

const TypeTraits* find_traits(TensorType type) {
  switch (type) {
    case TensorType::F32: return &kF32;
    case TensorType::F16: return &kF16;
    case TensorType::BF16: return &kBF16;
    case TensorType::Q4_0: return &kQ4_0;
    case TensorType::Q8_0: return &kQ8_0;
    case TensorType::Q4_K: return &kQ4_K;
    case TensorType::Q6_K: return &kQ6_K;
    case TensorType::Q8_K: return &kQ8_K;
  }
  return nullptr;
}

}  // namespace

const TypeTraits& type_traits(TensorType type) {
  const TypeTraits* traits = find_traits(type);
  if (!traits) throw FormatError(error_message("dtype", "unsupported tensor type code {}", static_cast<uint32_t>(type)));
  return *traits;
}

std::optional<TensorType> tensor_type_from_code(uint32_t code) {
  auto type = static_cast<TensorType>(code);
  if (!find_traits(type) || type == TensorType::Q8_K) return std::nullopt;
  return type;
}

std::string_view type_name(TensorType type) { return type_traits(type).name; }

size_t row_bytes(TensorType type, int64_t elements) {
  const TypeTraits& traits = type_traits(type);
  if (elements < 0 || elements % traits.block_elements != 0)
    throw FormatError(error_message("dtype", "a {} row needs a multiple of {} elements, got {}", traits.name,
                                    traits.block_elements, elements));
  return static_cast<size_t>(elements / traits.block_elements) * traits.block_bytes;
}

}  // namespace orchard::core
