#pragma once
// GGUF files (versions 2 and 3): the metadata value model shared by the reader and the writer.
#include <cstdint>
#include <string>
#include <string_view>
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

// One metadata value. `data` holds uint64_t for U8/U16/U32/U64, int64_t for I8/I16/I32/I64,
// double for F32/F64, bool for BOOL, std::string for STRING and Array for ARRAY; the Writer
// refuses a Value whose `data` doesn't match `type` or doesn't fit it (e.g. U8 holding 300).
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

  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string v);
  // Every item must have type `element_type` (InvariantError otherwise).
  static Value array(ValueType element_type, std::vector<Value> items);

  // Same type and same data, recursively; floats compare with == (so NaN != NaN).
  friend bool operator==(const Value& a, const Value& b);
};
bool operator==(const Array& a, const Array& b);

// "u8", "string", "array"...; "unknown" for a code outside the enum.
std::string_view value_type_name(ValueType type);

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;  // when the file has no general.alignment
constexpr std::string_view kAlignmentKey = "general.alignment";  // a u32, a power of two
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;      // nested arrays deeper than this are refused as corrupt

}  // namespace orchard::model::gguf
