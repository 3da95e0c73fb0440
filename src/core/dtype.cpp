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
constexpr TypeTraits kQ4_1{"q4_1", kQK32, sizeof(BlockQ4_1)};
constexpr TypeTraits kQ5_0{"q5_0", kQK32, sizeof(BlockQ5_0)};
constexpr TypeTraits kQ5_1{"q5_1", kQK32, sizeof(BlockQ5_1)};
constexpr TypeTraits kQ2_K{"q2_K", kQK_K, sizeof(BlockQ2_K)};
constexpr TypeTraits kQ3_K{"q3_K", kQK_K, sizeof(BlockQ3_K)};
constexpr TypeTraits kQ5_K{"q5_K", kQK_K, sizeof(BlockQ5_K)};
constexpr TypeTraits kIQ4_NL{"iq4_nl", kQK32, sizeof(BlockIQ4_NL)};
constexpr TypeTraits kIQ4_XS{"iq4_xs", kQK_K, sizeof(BlockIQ4_XS)};
constexpr TypeTraits kMXFP4{"mxfp4", kQK32, sizeof(BlockMXFP4)};

// Weight types in code order, for listing them.
constexpr TensorType kWeightTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::Q4_0,   TensorType::Q4_1,   TensorType::Q5_0,
    TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K,   TensorType::Q3_K,   TensorType::Q4_K,
    TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::BF16,
    TensorType::MXFP4,
};

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
    case TensorType::Q4_1: return &kQ4_1;
    case TensorType::Q5_0: return &kQ5_0;
    case TensorType::Q5_1: return &kQ5_1;
    case TensorType::Q2_K: return &kQ2_K;
    case TensorType::Q3_K: return &kQ3_K;
    case TensorType::Q5_K: return &kQ5_K;
    case TensorType::IQ4_NL: return &kIQ4_NL;
    case TensorType::IQ4_XS: return &kIQ4_XS;
    case TensorType::MXFP4: return &kMXFP4;
  }
  return nullptr;
}

}  // namespace

const TypeTraits& type_traits(TensorType type) {
  const TypeTraits* traits = find_traits(type);
  if (!traits)
    throw FormatError(error_message("dtype", "unsupported tensor type code {}, expected one of {}",
                                    static_cast<uint32_t>(type), supported_types_list()));
  return *traits;
}

std::optional<TensorType> tensor_type_from_code(uint32_t code) {
  auto type = static_cast<TensorType>(code);
  if (!find_traits(type) || type == TensorType::Q8_K) return std::nullopt;
  return type;
}

std::string supported_types_list() {
  std::string list;
  for (TensorType type : kWeightTypes) {
    if (!list.empty()) list += ", ";
    list += fmt::format("{} ({})", find_traits(type)->name, static_cast<uint32_t>(type));
  }
  return list;
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
