#include <gtest/gtest.h>

#include "model/tokenizer/vocab_builder.h"
#include "round_trip_texts.h"
#include "test_vocab.h"

namespace orchard::model {
namespace {

using Ids = std::vector<TokenId>;

TEST(StreamDecoder, EmitsOnlyCompleteCharactersAndMatchesDecode) {
  for (VocabStyle style : {VocabStyle::SentencePiece, VocabStyle::Llama3Bpe, VocabStyle::Qwen2Bpe}) {
    // A small vocabulary, so many characters split over byte tokens.
    const Tokenizer t = Tokenizer::from_vocab(build_vocab(style, 600));
    for (const std::string& text : test::round_trip_texts(150, 5)) {
      const Ids ids = t.encode(text, true, false);
      Tokenizer::StreamDecoder stream(t);
      std::string streamed;
      for (TokenId id : ids) {
        const std::string piece = stream.push(id);
        ASSERT_TRUE(unicode::is_valid_utf8(piece)) << testing::PrintToString(piece);
        streamed += piece;
      }
      streamed += stream.finish();
      ASSERT_EQ(streamed, t.decode(ids));
      ASSERT_EQ(streamed, text);
    }
  }
}

TEST(StreamDecoder, HoldsBackThenCompletesAMultiByteCharacter) {
  const Tokenizer t = Tokenizer::from_vocab(test::spm_vocab({{"\xE2\x96\x81", 0}, {"x", 0}}));
  Tokenizer::StreamDecoder stream(t);
  EXPECT_EQ(stream.push(test::spm_byte(0xE2)), "");
  EXPECT_EQ(stream.push(test::spm_byte(0x82)), "");
  EXPECT_EQ(stream.push(test::spm_byte(0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(stream.finish(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer t = Tokenizer::from_vocab(test::spm_vocab({{"\xE2\x96\x81", 0}, {"x", 0}}));
  const std::string kFffd = "\xEF\xBF\xBD";
  Tokenizer::StreamDecoder stream(t);
  EXPECT_EQ(stream.push(test::spm_byte(0xFF)), kFffd);
  EXPECT_EQ(stream.push(test::spm_byte(0xE2)), "");
  // "x" cannot continue the held-back lead byte: that byte is replaced, "x" follows.
  EXPECT_EQ(stream.push(t.encode("x", false).back()), kFffd + "x");
  EXPECT_EQ(stream.push(test::spm_byte(0xF0)), "");
  EXPECT_EQ(stream.push(test::spm_byte(0x9F)), "");
  EXPECT_EQ(stream.finish(), kFffd + kFffd);
}

TEST(StreamDecoder, DropsTheSentencePiecePrefixSpaceOnce) {
  const std::string kSpace = "\xE2\x96\x81";
  const VocabData v = test::spm_vocab({{kSpace, -9}, {"a", -9}, {kSpace + "a", -1}});
  const Tokenizer t = Tokenizer::from_vocab(v);
  Tokenizer::StreamDecoder stream(t);
  EXPECT_EQ(stream.push(1), "");  // BOS
  EXPECT_EQ(stream.push(test::id_of(v, kSpace + "a")), "a");
  EXPECT_EQ(stream.push(test::id_of(v, kSpace + "a")), " a");
}

}  // namespace
}  // namespace orchard::model
