#include "model/gguf/gguf.h"

#include <limits>

#include "core/error.h"

namespace orchard::model::gguf {
namespace {

[[noreturn]] void wrong_type(std::string_view what, ValueType actual, std::string_view expected) {
  throw FormatError(error_message("gguf", "key '{}' has type {}, expected {}", what, value_type_name(actual), expected));
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

uint64_t Value::as_uint(std::string_view what) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data); i && *i >= 0) return static_cast<uint64_t>(*i);
  wrong_type(what, type, std::holds_alternative<int64_t>(data) ? "a non-negative integer" : "an integer");
}

int64_t Value::as_int(std::string_view what) const {
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data);
      u && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(*u);
  wrong_type(what, type, std::holds_alternative<uint64_t>(data) ? "an integer below 2^63" : "an integer");
}

double Value::as_float(std::string_view what) const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  wrong_type(what, type, "f32 or f64");
}

bool Value::as_bool(std::string_view what) const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  wrong_type(what, type, "bool");
}

const std::string& Value::as_string(std::string_view what) const {
  if (const auto* s = std::get_if<std::string>(&data)) return *s;
  wrong_type(what, type, "string");
}

const Array& Value::as_array(std::string_view what) const {
  if (const auto* a = std::get_if<Array>(&data)) return *a;
  wrong_type(what, type, "array");
}

Value Value::u8(uint8_t v) { return {ValueType::U8, uint64_t{v}}; }
Value Value::i8(int8_t v) { return {ValueType::I8, int64_t{v}}; }
Value Value::u16(uint16_t v) { return {ValueType::U16, uint64_t{v}}; }
Value Value::i16(int16_t v) { return {ValueType::I16, int64_t{v}}; }
Value Value::u32(uint32_t v) { return {ValueType::U32, uint64_t{v}}; }
Value Value::i32(int32_t v) { return {ValueType::I32, int64_t{v}}; }
Value Value::u64(uint64_t v) { return {ValueType::U64, v}; }
Value Value::i64(int64_t v) { return {ValueType::I64, v}; }
Value Value::f32(float v) { return {ValueType::F32, double{v}}; }
Value Value::f64(double v) { return {ValueType::F64, v}; }
Value Value::boolean(bool v) { return {ValueType::BOOL, v}; }
Value Value::string(std::string v) { return {ValueType::STRING, std::move(v)}; }

Value Value::array(ValueType element_type, std::vector<Value> items) {
  for (const Value& item : items)
    ORCHARD_CHECK(item.type == element_type, "array of {} given an item of type {}", value_type_name(element_type),
                  value_type_name(item.type));
  return {ValueType::ARRAY, Array{element_type, std::move(items)}};
}

bool operator==(const Array& a, const Array& b) {
  return a.element_type == b.element_type && a.items == b.items;
}

bool operator==(const Value& a, const Value& b) { return a.type == b.type && a.data == b.data; }

}  // namespace orchard::model::gguf
