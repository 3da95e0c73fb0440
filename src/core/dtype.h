#pragma once
// Tensor element types with GGML/GGUF numbering, and their block layouts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace orchard::core {

// Numeric values are the GGUF on-disk codes (ggml_type); never renumber.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q8_0 = 8,
  Q4_K = 12,
  Q6_K = 14,
  Q8_K = 15,  // activations only: the partner type of the K-quants' dot products
  BF16 = 30,
};

struct TypeTraits {
  std::string_view name;   // as llama.cpp prints it: "f32", "q4_0", "q4_K"...
  int64_t block_elements;  // elements per block (1 for float types)
  size_t block_bytes;      // bytes per block
};

// Traits of a supported type; throws FormatError naming the code for anything else.
const TypeTraits& type_traits(TensorType type);
// nullopt when `code` is not a type Orchard reads.
std::optional<TensorType> tensor_type_from_code(uint32_t code);
std::string_view type_name(TensorType type);
// Bytes of a row of `elements` elements; throws FormatError when elements is not a whole
// number of blocks.
size_t row_bytes(TensorType type, int64_t elements);

}  // namespace orchard::core
