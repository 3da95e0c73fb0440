// Writes a file for an external GGUF reader to check (tests/gguf/interop_check.sh); skipped
// unless ORCHARD_GGUF_INTEROP_FILE names where to write it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "model/gguf/writer.h"

namespace orchard::model::gguf {
namespace {

using core::TensorType;

TEST(GgufInterop, WriteFileForExternalReader) {
  const char* path = std::getenv("ORCHARD_GGUF_INTEROP_FILE");
  if (!path) GTEST_SKIP() << "set ORCHARD_GGUF_INTEROP_FILE to write the interop file";
  // The checker (interop_check.sh) expects exactly these keys, values and tensors.
  Writer writer(64);
  writer.set("general.architecture", Value::string("llama"));
  writer.set("general.name", Value::string("orchard-interop"));
  writer.set("llama.block_count", Value::u32(2));
  writer.set("llama.rope.freq_base", Value::f32(10000.0f));
  writer.set("test.i8", Value::i8(-7));
  writer.set("test.u64", Value::u64(1ull << 40));
  writer.set("test.f64", Value::f64(0.25));
  writer.set("test.bool", Value::boolean(true));
  writer.set("tokenizer.ggml.tokens",
             Value::array(ValueType::STRING, {Value::string("<s>"), Value::string("</s>"), Value::string("hé")}));
  writer.set("tokenizer.ggml.scores", Value::array(ValueType::F32, {Value::f32(0), Value::f32(-1), Value::f32(-2.5f)}));
  writer.set("test.empty", Value::array(ValueType::I32, {}));
  std::vector<uint8_t> f32(3 * 2 * 4);
  for (size_t i = 0; i < 6; ++i) {
    float v = static_cast<float>(i) + 0.5f;
    std::memcpy(f32.data() + i * 4, &v, 4);
  }
  writer.add_tensor("token_embd.weight", TensorType::F32, {3, 2}, f32);
  writer.add_tensor("blk.0.attn_q.weight", TensorType::Q4_0, {64, 2}, std::vector<uint8_t>(2 * 2 * 18, 0x11));
  writer.add_tensor("blk.0.ffn_down.weight", TensorType::Q6_K, {256}, std::vector<uint8_t>(210, 0x22));
  writer.add_tensor_lazy("output_norm.weight", TensorType::F16, {5},
                         [] { return std::vector<uint8_t>{0, 0x3c, 0, 0x40, 0, 0, 0, 0xbc, 0, 0x3c}; });
  writer.add_tensor("blk.0.attn_k.weight", TensorType::Q8_0, {32, 1, 3}, std::vector<uint8_t>(3 * 34, 0x33));
  writer.add_tensor("blk.0.ffn_up.weight", TensorType::Q4_K, {256, 2}, std::vector<uint8_t>(2 * 144, 0x44));
  writer.add_tensor("blk.0.attn_v.weight", TensorType::BF16, {4}, std::vector<uint8_t>(8, 0x55));
  writer.write(path);
}

}  // namespace
}  // namespace orchard::model::gguf
