// Deterministic mutation testing: corrupted variants of a valid file either parse or throw
// FormatError, never anything else, never a crash or out-of-bounds read (run under ASan with
// ORCHARD_SANITIZE=ON to check the latter).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "model/gguf/reader.h"
#include "model/gguf/writer.h"

namespace orchard::model::gguf {
namespace {

using core::TensorType;

// A small file touching every parser path: scalars, strings, nested and empty arrays, a custom
// alignment and tensors of block and float types.
std::vector<uint8_t> sample_file() {
  Writer writer(64);
  writer.set("general.architecture", Value::string("llama"));
  writer.set("llama.block_count", Value::u32(2));
  writer.set("llama.rope.freq_base", Value::f32(10000.0f));
  writer.set("flag", Value::boolean(true));
  writer.set("i64", Value::i64(-5));
  writer.set("tokens", Value::array(ValueType::STRING, {Value::string("<s>"), Value::string("hi")}));
  writer.set("scores", Value::array(ValueType::F32, {Value::f32(0.5f), Value::f32(-1.0f)}));
  writer.set("nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::U16, {Value::u16(7)}),
                                                       Value::array(ValueType::BOOL, {})}));
  writer.add_tensor("a", TensorType::F32, {3, 2}, std::vector<uint8_t>(24, 1));
  writer.add_tensor("b", TensorType::Q4_0, {32}, std::vector<uint8_t>(18, 2));
  writer.add_tensor("c", TensorType::F16, {5}, std::vector<uint8_t>(10, 3));
  return writer.to_bytes();
}

// Touches everything a successful parse hands out, so ASan sees any pointer past the buffer.
uint64_t walk(const Value& value) {
  uint64_t sum = static_cast<uint64_t>(value.type);
  if (const auto* s = std::get_if<std::string>(&value.data)) sum += s->size();
  if (const auto* a = std::get_if<Array>(&value.data))
    for (const Value& item : a->items) sum += walk(item);
  return sum;
}

uint64_t walk(const Reader& reader) {
  uint64_t sum = 0;
  for (const auto& [key, value] : reader.metadata()) sum += key.size() + walk(value);
  for (const TensorInfo& info : reader.tensors())
    for (uint64_t i = 0; i < info.size_bytes; ++i) sum += info.data[i];
  return sum;
}

// Parses a copy sized exactly to the mutated bytes, so reading one byte too far is caught.
void expect_parses_or_format_error(const std::vector<uint8_t>& bytes, const std::string& what) {
  std::vector<uint8_t> exact(bytes);
  try {
    Reader reader = Reader::parse(exact, what);
    walk(reader);
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[gguf] " + what + ": ", 0), 0u) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw something other than FormatError: " << e.what();
  }
}

TEST(GgufMutation, SampleFileIsValid) {
  std::vector<uint8_t> bytes = sample_file();
  Reader reader = Reader::parse(bytes);
  EXPECT_EQ(reader.tensors().size(), 3u);
  EXPECT_EQ(reader.alignment(), 64u);
}

TEST(GgufMutation, EveryTruncation) {
  std::vector<uint8_t> bytes = sample_file();
  for (size_t length = 0; length < bytes.size(); ++length) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(length));
    expect_parses_or_format_error(cut, fmt::format("cut{}", length));
  }
}

TEST(GgufMutation, SeededRandomByteFlips) {
  const std::vector<uint8_t> original = sample_file();
  std::mt19937_64 rng(20240601);
  for (int round = 0; round < 4000; ++round) {
    std::vector<uint8_t> bytes = original;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % bytes.size();
      if (rng() % 2) bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      else bytes[at] = static_cast<uint8_t>(rng());
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    expect_parses_or_format_error(bytes, fmt::format("flip{}", round));
  }
}

// Every 4- and 8-byte window (counts, lengths, dims, offsets, type codes all live in such
// windows) overwritten with values that break size arithmetic.
TEST(GgufMutation, CountInflationAtEveryOffset) {
  const std::vector<uint8_t> original = sample_file();
  const uint64_t size = original.size();
  const uint64_t values64[] = {~uint64_t{0}, uint64_t{1} << 63, uint64_t{1} << 32, size, size + 1, size / 2, 0x7fffffffffffffff};
  const uint32_t values32[] = {~uint32_t{0}, 1u << 31, 5, 0, 13, 99};
  for (size_t at = 0; at + 4 <= size; ++at) {
    for (uint32_t v : values32) {
      std::vector<uint8_t> bytes = original;
      std::memcpy(bytes.data() + at, &v, 4);
      expect_parses_or_format_error(bytes, fmt::format("u32@{}={}", at, v));
    }
    if (at + 8 > size) continue;
    for (uint64_t v : values64) {
      std::vector<uint8_t> bytes = original;
      std::memcpy(bytes.data() + at, &v, 8);
      expect_parses_or_format_error(bytes, fmt::format("u64@{}={}", at, v));
    }
  }
}

}  // namespace
}  // namespace orchard::model::gguf
