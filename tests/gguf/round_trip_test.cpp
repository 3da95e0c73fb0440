// Writer → Reader round trips: every value type, every tensor type, files on disk, version 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "gguf/gguf_bytes.h"
#include "model/gguf/reader.h"
#include "model/gguf/writer.h"

namespace orchard::model::gguf {
namespace {

using core::TensorType;

std::vector<std::pair<std::string, Value>> every_value_type() {
  return {
      {"t.u8", Value::u8(255)},
      {"t.i8", Value::i8(-128)},
      {"t.u16", Value::u16(65535)},
      {"t.i16", Value::i16(-32768)},
      {"t.u32", Value::u32(4000000000u)},
      {"t.i32", Value::i32(-2000000000)},
      {"t.f32", Value::f32(-1.25f)},
      {"t.bool.true", Value::boolean(true)},
      {"t.bool.false", Value::boolean(false)},
      {"t.string", Value::string("héllo wörld")},
      {"t.string.empty", Value::string("")},
      {"t.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", Value::i64(std::numeric_limits<int64_t>::min())},
      {"t.f64", Value::f64(0.1)},
      {"t.array.i32", Value::array(ValueType::I32, {Value::i32(1), Value::i32(-2), Value::i32(3)})},
      {"t.array.strings", Value::array(ValueType::STRING, {Value::string("a"), Value::string(""), Value::string("ccc")})},
      {"t.array.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})},
      {"t.array.f64", Value::array(ValueType::F64, {Value::f64(1e300), Value::f64(-0.0)})},
      {"t.array.empty", Value::array(ValueType::U64, {})},
      {"t.array.nested",
       Value::array(ValueType::ARRAY, {Value::array(ValueType::U8, {Value::u8(1), Value::u8(2)}),
                                       Value::array(ValueType::U8, {}),
                                       Value::array(ValueType::U8, {Value::u8(3)})})},
      {"t.array.nested.empty", Value::array(ValueType::ARRAY, {})},
      {"t.array.deep", Value::array(ValueType::ARRAY,
                                    {Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING,
                                                                                  {Value::string("deep")})})})},
  };
}

TEST(GgufRoundTrip, EveryValueTypeInOrder) {
  Writer writer;
  auto values = every_value_type();
  for (const auto& [key, value] : values) writer.set(key, value);
  std::vector<uint8_t> bytes = writer.to_bytes();
  Reader reader = Reader::parse(bytes);
  EXPECT_EQ(reader.version(), 3u);
  EXPECT_EQ(reader.alignment(), kDefaultAlignment);
  EXPECT_EQ(bytes.size() % kDefaultAlignment, 0u);
  ASSERT_EQ(reader.metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(reader.metadata()[i].first, values[i].first);
    EXPECT_EQ(reader.metadata()[i].second, values[i].second) << values[i].first;
    EXPECT_EQ(reader.get(values[i].first), values[i].second) << values[i].first;
  }
  EXPECT_EQ(reader.find("t.missing"), nullptr);
  EXPECT_TRUE(reader.tensors().empty());
}

TEST(GgufRoundTrip, SettingAKeyAgainReplacesItInPlace) {
  Writer writer;
  writer.set("a", Value::u32(1));
  writer.set("b", Value::u32(2));
  writer.set("a", Value::string("again"));
  std::vector<uint8_t> bytes = writer.to_bytes();
  Reader reader = Reader::parse(bytes);
  ASSERT_EQ(reader.metadata().size(), 2u);
  EXPECT_EQ(reader.metadata()[0].first, "a");
  EXPECT_EQ(reader.get("a").as_string("a"), "again");
  EXPECT_EQ(reader.metadata()[1].first, "b");
}

TEST(GgufRoundTrip, WriterRefusesValuesThatDontMatchTheirType) {
  Writer writer;
  EXPECT_THROW(writer.set("k", Value{ValueType::U8, uint64_t{300}}), InvariantError);
  EXPECT_THROW(writer.set("k", Value{ValueType::I8, uint64_t{1}}), InvariantError);
  EXPECT_THROW(writer.set("k", Value{ValueType::STRING, true}), InvariantError);
  EXPECT_THROW(writer.set("k", Value{ValueType::ARRAY, Array{ValueType::U32, {Value::u8(1)}}}), InvariantError);
  EXPECT_THROW(writer.set("general.alignment", Value::u32(48)), InvariantError);
  EXPECT_THROW(Writer(0), InvariantError);
  EXPECT_THROW(Writer(24), InvariantError);
}

struct TypeCase {
  TensorType type;
  std::vector<int64_t> shape;
};

// Every type the reader accepts, with shapes that are whole blocks and odd row counts so
// padding between tensors is exercised.
std::vector<TypeCase> every_tensor_type() {
  return {{TensorType::F32, {3, 5}},     {TensorType::F16, {7}},         {TensorType::BF16, {2, 3, 1, 2}},
          {TensorType::Q4_0, {64, 3}},   {TensorType::Q8_0, {32, 1, 5}}, {TensorType::Q4_K, {256, 2}},
          {TensorType::Q6_K, {512, 1}}};
}

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return bytes;
}

void expect_tensors(const Reader& reader, const std::vector<TypeCase>& cases, uint64_t alignment) {
  ASSERT_EQ(reader.tensors().size(), cases.size());
  const uint8_t* base = reader.tensors()[0].data - reader.tensors()[0].offset - reader.data_offset();
  EXPECT_EQ(reader.data_offset() % alignment, 0u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& info = reader.tensor(fmt::format("t{}", i));
    EXPECT_EQ(&info, &reader.tensors()[i]);
    EXPECT_EQ(info.type, cases[i].type);
    EXPECT_EQ(info.shape, cases[i].shape);
    int64_t elements = 1;
    for (int64_t d : cases[i].shape) elements *= d;
    EXPECT_EQ(info.elements(), elements);
    size_t size = core::row_bytes(info.type, info.shape[0]) * static_cast<size_t>(elements / info.shape[0]);
    EXPECT_EQ(info.size_bytes, size);
    EXPECT_EQ(info.offset % alignment, 0u);
    EXPECT_EQ(info.data, base + reader.data_offset() + info.offset);
    EXPECT_EQ(std::vector<uint8_t>(info.data, info.data + info.size_bytes), pattern(size, static_cast<uint8_t>(i)))
        << core::type_name(info.type);
  }
}

TEST(GgufRoundTrip, TensorsOfEveryTypeWithDefaultAndWideAlignment) {
  for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{1}}) {
    Writer writer(alignment);
    writer.set("general.name", Value::string("tiny"));
    auto cases = every_tensor_type();
    for (size_t i = 0; i < cases.size(); ++i) {
      size_t size = core::row_bytes(cases[i].type, cases[i].shape[0]);
      for (size_t d = 1; d < cases[i].shape.size(); ++d) size *= static_cast<size_t>(cases[i].shape[d]);
      writer.add_tensor(fmt::format("t{}", i), cases[i].type, cases[i].shape, pattern(size, static_cast<uint8_t>(i)));
    }
    std::vector<uint8_t> bytes = writer.to_bytes();
    Reader reader = Reader::parse(bytes);
    EXPECT_EQ(reader.alignment(), alignment);
    if (alignment != kDefaultAlignment) EXPECT_EQ(reader.get("general.alignment").as_uint("a"), alignment);
    else EXPECT_EQ(reader.find("general.alignment"), nullptr);
    expect_tensors(reader, cases, alignment);
    EXPECT_EQ(reader.find_tensor("nope"), nullptr);
  }
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / fmt::format("orchard-gguf-{}", ::getpid())) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  size_t entries() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path_), {}));
  }

 private:
  std::filesystem::path path_;
};

TEST(GgufRoundTrip, LazyTensorsAreProducedInOrderAndWrittenToDisk) {
  TempDir dir;
  Writer writer;
  writer.set("general.architecture", Value::string("llama"));
  auto cases = every_tensor_type();
  std::vector<size_t> produced;
  for (size_t i = 0; i < cases.size(); ++i) {
    size_t size = core::row_bytes(cases[i].type, cases[i].shape[0]);
    for (size_t d = 1; d < cases[i].shape.size(); ++d) size *= static_cast<size_t>(cases[i].shape[d]);
    writer.add_tensor_lazy(fmt::format("t{}", i), cases[i].type, cases[i].shape, [&produced, i, size] {
      produced.push_back(i);
      return pattern(size, static_cast<uint8_t>(i));
    });
  }
  EXPECT_TRUE(produced.empty());
  std::string path = dir.file("model.gguf");
  writer.write(path);
  EXPECT_EQ(produced, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(dir.entries(), 1u);  // no temporary left behind

  Reader opened = Reader::open(path);
  Reader reader = std::move(opened);  // the mapping moves with the reader
  EXPECT_EQ(reader.path(), path);
  EXPECT_EQ(reader.file_size(), std::filesystem::file_size(path));
  EXPECT_EQ(reader.get("general.architecture").as_string("a"), "llama");
  expect_tensors(reader, cases, kDefaultAlignment);
  EXPECT_EQ(writer.to_bytes(), std::vector<uint8_t>(reader.tensors()[0].data - reader.data_offset(),
                                                    reader.tensors()[0].data - reader.data_offset() + reader.file_size()));
}

TEST(GgufRoundTrip, WrongProducedSizeFailsAndLeavesTheOldFile) {
  TempDir dir;
  std::string path = dir.file("model.gguf");
  Writer good;
  good.set("v", Value::u32(1));
  good.write(path);

  Writer bad;
  bad.add_tensor_lazy("blk.0.attn_q.weight", TensorType::F32, {4}, [] { return std::vector<uint8_t>(15); });
  try {
    bad.write(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.attn_q.weight' returned 15 bytes, expected 16"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(dir.entries(), 1u);
  EXPECT_EQ(Reader::open(path).get("v").as_uint("v"), 1u);
}

TEST(GgufRoundTrip, AddTensorChecksItsArguments) {
  Writer writer;
  EXPECT_THROW(writer.add_tensor("a", TensorType::F32, {4}, std::vector<uint8_t>(15)), InvariantError);
  EXPECT_THROW(writer.add_tensor("b", TensorType::F32, {}, {}), InvariantError);
  EXPECT_THROW(writer.add_tensor("c", TensorType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), InvariantError);
  EXPECT_THROW(writer.add_tensor("d", TensorType::F32, {0}, {}), InvariantError);
  EXPECT_THROW(writer.add_tensor("e", TensorType::Q4_0, {16}, std::vector<uint8_t>(9)), InvariantError);
  writer.add_tensor("f", TensorType::F32, {1}, std::vector<uint8_t>(4));
  EXPECT_THROW(writer.add_tensor("f", TensorType::F32, {1}, std::vector<uint8_t>(4)), InvariantError);
}

TEST(GgufRoundTrip, ReadsAHandBuiltVersion2File) {
  test::Bytes b;
  b.header(2, 3, 2);
  b.str("general.architecture").type(ValueType::STRING).str("llama");
  b.str("llama.context_length").type(ValueType::U32).u32(4096);
  b.str("tokenizer.ggml.tokens").type(ValueType::ARRAY).type(ValueType::STRING).u64(2).str("<s>").str("</s>");
  b.tensor("token_embd.weight", {4, 2}, 0, 0);
  b.tensor("output_norm.weight", {4}, 1, 32);
  b.pad_to(32);
  size_t data_start = b.size();
  for (int i = 0; i < 8; ++i) b.put<float>(static_cast<float>(i));
  b.pad_to(32);
  b.put<uint16_t>(0x3c00).put<uint16_t>(0x4000).put<uint16_t>(0).put<uint16_t>(0xbc00);
  Reader reader = Reader::parse(b.data(), "v2.gguf");
  EXPECT_EQ(reader.version(), 2u);
  EXPECT_EQ(reader.data_offset(), data_start);
  EXPECT_EQ(reader.get("general.architecture").as_string("a"), "llama");
  EXPECT_EQ(reader.get("llama.context_length").as_uint("c"), 4096u);
  EXPECT_EQ(reader.get("tokenizer.ggml.tokens").as_array("t").items[1].as_string("t"), "</s>");
  const TensorInfo& embd = reader.tensor("token_embd.weight");
  EXPECT_EQ(embd.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(embd.data, b.data().data() + data_start);
  float seventh;
  std::memcpy(&seventh, embd.data + 7 * 4, 4);
  EXPECT_EQ(seventh, 7.0f);
  const TensorInfo& norm = reader.tensor("output_norm.weight");
  EXPECT_EQ(norm.type, TensorType::F16);
  EXPECT_EQ(norm.size_bytes, 8u);
  EXPECT_EQ(norm.data, b.data().data() + data_start + 32);
}

TEST(GgufRoundTrip, OpenFailuresAreErrorsAndEmptyFilesAreTruncated) {
  TempDir dir;
  try {
    Reader::open(dir.file("absent.gguf"));
    FAIL();
  } catch (const FormatError&) {
    FAIL() << "a missing file is not a format error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  std::string empty = dir.file("empty.gguf");
  std::ofstream(empty).close();
  try {
    Reader::open(empty);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("empty.gguf: truncated in the magic"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace orchard::model::gguf
