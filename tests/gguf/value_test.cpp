// Value's typed accessors and constructors.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "model/gguf/gguf.h"

namespace orchard::model::gguf {
namespace {

TEST(GgufValue, IntegerAccessorsConvertWithinRange) {
  EXPECT_EQ(Value::u8(200).as_uint("k"), 200u);
  EXPECT_EQ(Value::u8(200).as_int("k"), 200);
  EXPECT_EQ(Value::i32(7).as_uint("k"), 7u);
  EXPECT_EQ(Value::i8(-3).as_int("k"), -3);
  EXPECT_EQ(Value::i64(std::numeric_limits<int64_t>::min()).as_int("k"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Value::u64(std::numeric_limits<uint64_t>::max()).as_uint("k"), std::numeric_limits<uint64_t>::max());
}

TEST(GgufValue, AccessorsRefuseLossyConversionsNamingTheKey) {
  try {
    (void)Value::i32(-1).as_uint("llama.block_count");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("[gguf] key 'llama.block_count' has type i32, expected a non-negative"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)Value::u64(std::numeric_limits<uint64_t>::max()).as_int("k"), FormatError);
  EXPECT_THROW((void)Value::u32(1).as_float("k"), FormatError);
  EXPECT_THROW((void)Value::u32(1).as_bool("k"), FormatError);
  EXPECT_THROW((void)Value::f32(1).as_int("k"), FormatError);
  EXPECT_THROW((void)Value::string("x").as_array("k"), FormatError);
  try {
    (void)Value::u32(1).as_string("general.name");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_STREQ(e.what(), "[gguf] key 'general.name' has type u32, expected string");
  }
}

TEST(GgufValue, FloatBoolStringArray) {
  EXPECT_EQ(Value::f32(1.5f).as_float("k"), 1.5);
  EXPECT_EQ(Value::f64(0.1).as_float("k"), 0.1);
  EXPECT_TRUE(Value::boolean(true).as_bool("k"));
  EXPECT_EQ(Value::string("hi").as_string("k"), "hi");
  Value array = Value::array(ValueType::I32, {Value::i32(1), Value::i32(2)});
  EXPECT_EQ(array.as_array("k").element_type, ValueType::I32);
  EXPECT_EQ(array.as_array("k").items.size(), 2u);
}

TEST(GgufValue, ArrayRefusesMixedItems) {
  EXPECT_THROW(Value::array(ValueType::I32, {Value::i32(1), Value::u32(2)}), InvariantError);
}

TEST(GgufValue, TypeNames) {
  EXPECT_EQ(value_type_name(ValueType::U8), "u8");
  EXPECT_EQ(value_type_name(ValueType::STRING), "string");
  EXPECT_EQ(value_type_name(ValueType::F64), "f64");
  EXPECT_EQ(value_type_name(static_cast<ValueType>(99)), "unknown");
}

}  // namespace
}  // namespace orchard::model::gguf
