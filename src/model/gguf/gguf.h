#pragma once
// GGUF files (versions 2 and 3): the metadata value model shared by the reader and the writer.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace orchard::model::gguf {

// GGUF metadata value type codes, as on disk.
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct Value;
// A typed array; `element_type` says what the items are even when the array is empty.
struct Array {
  ValueType element_type = ValueType::U8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  // Typed accessors; each throws FormatError naming `what` (the key) and the actual type when
  // the value isn't convertible without loss (any integer type to int64/uint64 in range; F32/F64
  // to double).
  uint64_t as_uint(std::string_view what) const;
  int64_t as_int(std::string_view what) const;
  double as_float(std::string_view what) const;
  bool as_bool(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const Array& as_array(std::string_view what) const;

  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value array(ValueType element_type, std::vector<Value> items);
};

std::string_view value_type_name(ValueType type);

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;

}  // namespace orchard::model::gguf
