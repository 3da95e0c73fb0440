// Each kind of malformed file gives a FormatError that names the problem and what was expected.
#include <gtest/gtest.h>

#include <initializer_list>

#include "core/error.h"
#include "gguf/gguf_bytes.h"
#include "model/gguf/reader.h"
#include "model/gguf/writer.h"

namespace orchard::model::gguf {
namespace {

using test::Bytes;

void expect_error(const std::vector<uint8_t>& bytes, std::initializer_list<std::string_view> words) {
  try {
    Reader::parse(bytes, "bad.gguf");
    ADD_FAILURE() << "parsed without error";
  } catch (const FormatError& e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind("[gguf] bad.gguf: ", 0), 0u) << message;
    for (std::string_view word : words) EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' not in: " << message;
  }
}

// One f32 tensor 'w' of `dims` at `offset`, with `data_bytes` bytes of data after the padding.
Bytes one_tensor(std::vector<uint64_t> dims, uint32_t type_code, uint64_t offset, size_t data_bytes) {
  Bytes b;
  b.header(1, 0).tensor("w", std::move(dims), type_code, offset).pad_to(32).zeros(data_bytes);
  return b;
}

TEST(GgufCorruption, BadMagicShowsTheBytes) {
  Bytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  expect_error(b.data(), {"bad magic 'GGML' (47 47 4d 4c)", "expected 'GGUF'"});
  Bytes elf;
  elf.raw("\x7f" "ELF").zeros(20);
  expect_error(elf.data(), {"bad magic '\\x7fELF' (7f 45 4c 46)"});
}

TEST(GgufCorruption, UnsupportedVersions) {
  Bytes v1;
  v1.header(0, 0, 1);
  expect_error(v1.data(), {"unsupported version 1", "expected version 2 or 3"});
  Bytes v4;
  v4.header(0, 0, 4);
  expect_error(v4.data(), {"unsupported version 4", "expected version 2 or 3"});
  Bytes big;
  big.header(0, 0, 0x03000000);
  expect_error(big.data(), {"big-endian"});
}

TEST(GgufCorruption, TruncationSaysWhereAndAtWhichByte) {
  expect_error({}, {"truncated in the magic of the header at byte 0", "expected 4 more bytes", "ends at byte 0"});
  Bytes header;
  header.u32(kMagic).u32(3).u64(0).u32(0);
  expect_error(header.data(), {"truncated in the metadata kv count of the header at byte 16", "expected 8 more bytes"});
  Bytes value;
  value.header(0, 1).str("general.name").type(ValueType::U64).u32(7);
  expect_error(value.data(), {"truncated in the value of key 'general.name' at byte 48", "expected 8 more bytes"});
  Bytes element;
  element.header(0, 1).str("a").type(ValueType::ARRAY).type(ValueType::STRING).u64(2).str("abc").u32(0).u8(0);
  expect_error(element.data(), {"truncated in the value of key 'a' (array element 1)"});
  Bytes info;
  info.header(1, 0).str("blk.0.w").u32(2).u64(4).u32(0).u8(0);
  expect_error(info.data(), {"truncated in the dimensions of tensor 'blk.0.w'"});
}

TEST(GgufCorruption, StringLengthPastTheEnd) {
  Bytes b;
  b.header(0, 1).str("general.name").type(ValueType::STRING).u64(1000).raw("abc");
  expect_error(b.data(), {"string length 1000", "key 'general.name'", "past the end", "expected at most 3 bytes"});
  Bytes key;
  key.header(0, 1).u64(77).raw("abcde");
  expect_error(key.data(), {"string length 77 in the key of key-value pair #0 at byte 24", "expected at most 5 bytes"});
}

TEST(GgufCorruption, AbsurdCountsAreRefusedBeforeAllocating) {
  Bytes kvs;
  kvs.header(0, uint64_t{1} << 60);
  expect_error(kvs.data(), {"absurd metadata kv count 1152921504606846976", "only 0 bytes remain"});
  Bytes tensors;
  tensors.header(~uint64_t{0}, 0).zeros(64);
  expect_error(tensors.data(), {"absurd tensor count 18446744073709551615", "expected at most 2 items"});
  Bytes array;
  array.header(0, 1).str("tokenizer.ggml.tokens").type(ValueType::ARRAY).type(ValueType::STRING).u64(uint64_t{1} << 62);
  expect_error(array.data(), {"absurd array length 4611686018427387904", "key 'tokenizer.ggml.tokens'"});
}

TEST(GgufCorruption, BadDimensions) {
  expect_error(one_tensor({1, 1, 1, 1, 1}, 0, 0, 4).data(), {"tensor 'w' has 5 dimensions, expected 1 to 4"});
  expect_error(one_tensor({}, 0, 0, 4).data(), {"tensor 'w' has 0 dimensions"});
  expect_error(one_tensor({4, 0}, 0, 0, 16).data(), {"tensor 'w' has dimension 1 = 0, expected a positive size"});
  expect_error(one_tensor({~uint64_t{0}}, 0, 0, 16).data(), {"dimension 0 = -1"});
  expect_error(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 16).data(),
               {"tensor 'w' element count overflows at dimension 1"});
}

TEST(GgufCorruption, UnknownTensorTypeNamesTensorAndCode) {
  expect_error(one_tensor({4}, 99, 0, 16).data(), {"tensor 'w'", "type code 99", "expected one of f32 (0)", "iq4_xs (23)"});
  expect_error(one_tensor({256}, 15, 0, 292).data(), {"type code 15"});  // q8_K: activations only
}

TEST(GgufCorruption, ShapeNotAWholeNumberOfBlocks) {
  expect_error(one_tensor({33, 2}, 2, 0, 64).data(),
               {"tensor 'w' of type q4_0 has 33 elements in dimension 0", "multiple of the block size 32"});
}

TEST(GgufCorruption, MisalignedOffset) {
  expect_error(one_tensor({4}, 0, 4, 64).data(), {"tensor 'w' data offset 4 is misaligned", "alignment 32"});
}

TEST(GgufCorruption, DataPastTheEndGivesBytesAndMiB) {
  Bytes b = one_tensor({1024, 1024}, 0, 0, 1000);
  expect_error(b.data(), {"tensor 'w' data ends at byte 4194400 (4.00 MiB) past the end of the file",
                          "expected at most 1096 bytes (0.00 MiB)"});
  expect_error(one_tensor({4}, 0, ~uint64_t{0} & ~uint64_t{31}, 16).data(), {"tensor 'w' data ends at byte"});
  Bytes no_data;
  no_data.header(1, 0).tensor("w", {4}, 0, 0);
  expect_error(no_data.data(), {"truncated before the data section"});
}

TEST(GgufCorruption, OverlappingTensors) {
  Bytes b;
  b.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).pad_to(32).zeros(64);
  expect_error(b.data(), {"tensors 'a' (data bytes 0..64) and 'b' (from data byte 32) overlap"});
}

TEST(GgufCorruption, DuplicateNamesAndKeys) {
  Bytes tensors;
  tensors.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(64);
  expect_error(tensors.data(), {"duplicate tensor name 'w'"});
  Bytes keys;
  keys.header(0, 2).str("k").type(ValueType::U8).u8(1).str("k").type(ValueType::U8).u8(2);
  expect_error(keys.data(), {"duplicate key 'k'"});
}

TEST(GgufCorruption, BadAlignment) {
  for (uint32_t alignment : {0u, 48u}) {
    Bytes b;
    b.header(0, 1).str("general.alignment").type(ValueType::U32).u32(alignment);
    expect_error(b.data(), {fmt::format("bad alignment {} in key 'general.alignment'", alignment), "power of two"});
  }
  Bytes wrong_type;
  wrong_type.header(0, 1).str("general.alignment").type(ValueType::U64).u64(32);
  expect_error(wrong_type.data(), {"key 'general.alignment' has type u64, expected u32"});
}

TEST(GgufCorruption, InvalidBoolByte) {
  Bytes b;
  b.header(0, 1).str("flag").type(ValueType::BOOL).u8(2);
  expect_error(b.data(), {"invalid bool byte 0x02 in key 'flag' at byte 40", "expected 0 or 1"});
}

TEST(GgufCorruption, UnknownValueType) {
  Bytes b;
  b.header(0, 1).str("k").u32(13).u32(0);
  expect_error(b.data(), {"unknown value type 13 in the value type of key 'k'", "expected 0..12"});
  Bytes element;
  element.header(0, 1).str("k").type(ValueType::ARRAY).u32(42).u64(0);
  expect_error(element.data(), {"unknown value type 42 in the array element type of key 'k'"});
}

TEST(GgufCorruption, ArraysNestedTooDeep) {
  Bytes b;
  b.header(0, 1).str("k").type(ValueType::ARRAY);
  for (int i = 0; i < 100; ++i) b.type(ValueType::ARRAY).u64(1);
  expect_error(b.data(), {"arrays nested deeper than 16 levels in key 'k'"});
}

TEST(GgufCorruption, MissingKeyAndTensorLookups) {
  Writer writer;
  writer.set("a", Value::u32(1));
  std::vector<uint8_t> bytes = writer.to_bytes();
  Reader reader = Reader::parse(bytes, "ok.gguf");
  EXPECT_THROW(
      {
        try {
          reader.get("llama.block_count");
        } catch (const FormatError& e) {
          EXPECT_STREQ(e.what(), "[gguf] ok.gguf: missing key 'llama.block_count', expected it in the metadata");
          throw;
        }
      },
      FormatError);
  EXPECT_THROW(reader.tensor("output.weight"), FormatError);
}

}  // namespace
}  // namespace orchard::model::gguf
