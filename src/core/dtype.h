#pragma once
// Tensor element types with GGML/GGUF numbering, and their block layouts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace orchard::core {

// Numeric values are the GGUF on-disk codes (ggml_type); never renumber.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activations only: the partner type of the K-quants' dot products
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
};

struct TypeTraits {
  std::string_view name;   // as llama.cpp prints it: "f32", "q4_0", "q4_K"...
  int64_t block_elements;  // elements per block (1 for float types)
  size_t block_bytes;      // bytes per block
};

// Traits of a supported type; throws FormatError naming the code and the supported types for
// anything else.
const TypeTraits& type_traits(TensorType type);
// nullopt when `code` is not a type Orchard reads.
std::optional<TensorType> tensor_type_from_code(uint32_t code);
// The weight types Orchard reads, as "f32 (0), f16 (1), ...", for error messages.
std::string supported_types_list();
std::string_view type_name(TensorType type);
// Bytes of a row of `elements` elements; throws FormatError when elements is not a whole
// number of blocks.
size_t row_bytes(TensorType type, int64_t elements);

}  // namespace orchard::core
