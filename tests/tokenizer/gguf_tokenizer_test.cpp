// The tokenizer.ggml.* keys through a real GGUF round trip: write_vocab, Writer, Reader,
// Tokenizer::from_gguf.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gguf/reader.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/vocab_builder.h"

namespace orchard::model {
namespace {

using gguf::Value;
using gguf::ValueType;

struct File {
  std::vector<uint8_t> bytes;
  gguf::Reader reader;
};

File written(const gguf::Writer& writer) {
  std::vector<uint8_t> bytes = writer.to_bytes();
  gguf::Reader reader = gguf::Reader::parse(bytes);
  return {std::move(bytes), std::move(reader)};
}

TEST(GgufTokenizer, WriteVocabReadsBackAsTheSameTokenizer) {
  const std::string text = "<|im_start|>The orchard, 1234 caf\xC3\xA9 \xF0\x9F\xA6\x99\n\n  end<|eot_id|>";
  for (VocabStyle style : {VocabStyle::SentencePiece, VocabStyle::Llama3Bpe, VocabStyle::Qwen2Bpe, VocabStyle::Gpt4oBpe}) {
    gguf::Writer writer;
    write_vocab(writer, style, 4000);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const gguf::Reader reader = gguf::Reader::parse(bytes);
    EXPECT_TRUE(reader.tensors().empty());  // vocab-only
    const Tokenizer from_file = Tokenizer::from_gguf(reader);
    const Tokenizer direct = Tokenizer::from_vocab(build_vocab(style, 4000));
    EXPECT_EQ(from_file.vocab_size(), 4000);
    EXPECT_EQ(from_file.model_name(), direct.model_name());
    EXPECT_EQ(from_file.pre_tokenizer(), direct.pre_tokenizer());
    EXPECT_EQ(from_file.bos(), direct.bos());
    EXPECT_EQ(from_file.eos(), direct.eos());
    EXPECT_EQ(from_file.adds_bos(), direct.adds_bos());
    EXPECT_EQ(from_file.encode(text, true), direct.encode(text, true));
    EXPECT_EQ(from_file.decode(from_file.encode(text, false, false)), text);
    for (TokenId id = 0; id < 4000; id += 97) EXPECT_EQ(from_file.token_kind(id), direct.token_kind(id));
  }
}

gguf::Writer minimal_spm() {
  gguf::Writer writer;
  writer.set("tokenizer.ggml.model", Value::string("llama"));
  std::vector<Value> tokens;
  for (const char* t : {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "\xE2\x96\x81" "a"}) tokens.push_back(Value::string(t));
  writer.set("tokenizer.ggml.tokens", Value::array(ValueType::STRING, std::move(tokens)));
  return writer;
}

TEST(GgufTokenizer, OptionalKeysTakeLlamaCppDefaults) {
  const File file = written(minimal_spm());
  const Tokenizer t = Tokenizer::from_gguf(file.reader);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.adds_bos());
  EXPECT_EQ(t.token_kind(4), TokenKind::Normal);
  EXPECT_EQ(t.decode(t.encode("a a", false)), "a a");
}

TEST(GgufTokenizer, ErrorsNameTheKey) {
  const auto message = [](const gguf::Writer& writer) -> std::string {
    const File file = written(writer);
    try {
      Tokenizer::from_gguf(file.reader);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "no error";
  };
  gguf::Writer no_model;
  no_model.set("tokenizer.ggml.tokens", Value::array(ValueType::STRING, {Value::string("a")}));
  EXPECT_NE(message(no_model).find("tokenizer.ggml.model"), std::string::npos) << message(no_model);

  gguf::Writer bert = minimal_spm();
  bert.set("tokenizer.ggml.model", Value::string("bert"));
  EXPECT_NE(message(bert).find("supported: llama, gpt2"), std::string::npos) << message(bert);

  gguf::Writer gpt2_without_merges = minimal_spm();
  gpt2_without_merges.set("tokenizer.ggml.model", Value::string("gpt2"));
  EXPECT_NE(message(gpt2_without_merges).find("tokenizer.ggml.merges"), std::string::npos);

  gguf::Writer short_scores = minimal_spm();
  short_scores.set("tokenizer.ggml.scores", Value::array(ValueType::F32, {Value::f32(0)}));
  EXPECT_NE(message(short_scores).find("tokenizer.ggml.scores"), std::string::npos);

  gguf::Writer bad_type = minimal_spm();
  bad_type.set("tokenizer.ggml.token_type", Value::array(ValueType::I32, std::vector<Value>(6, Value::i32(9))));
  EXPECT_NE(message(bad_type).find("token_type"), std::string::npos);

  gguf::Writer bad_bos = minimal_spm();
  bad_bos.set("tokenizer.ggml.bos_token_id", Value::u32(99));
  EXPECT_NE(message(bad_bos).find("bos_token_id"), std::string::npos);

  gguf::Writer wrong_type = minimal_spm();
  wrong_type.set("tokenizer.ggml.tokens", Value::string("not an array"));
  EXPECT_NE(message(wrong_type).find("tokenizer.ggml.tokens"), std::string::npos);
}

}  // namespace
}  // namespace orchard::model
