#include "model/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace orchard::model {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view text, PreTokenizer kind) {
  Pieces out;
  for (std::string_view piece : pre_tokenize(text, kind)) out.emplace_back(piece);
  return out;
}

// Expected splits derived by hand from each pattern's alternation order (see pre_tokenizer.h).
TEST(PreTokenizer, Gpt2Pattern) {
  EXPECT_EQ(split("Hello world's 12345 ... \n\n  x", PreTokenizer::Gpt2),
            (Pieces{"Hello", " world", "'s", " 12345", " ...", " \n\n ", " x"}));
  EXPECT_EQ(split("DON'T don't we're", PreTokenizer::Gpt2), (Pieces{"DON", "'", "T", " don", "'t", " we", "'re"}));
  EXPECT_EQ(split("'hello", PreTokenizer::Gpt2), (Pieces{"'", "hello"}));
  EXPECT_EQ(split("a  ", PreTokenizer::Gpt2), (Pieces{"a", "  "}));
  EXPECT_EQ(split("a  b", PreTokenizer::Gpt2), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("x\ty", PreTokenizer::Gpt2), (Pieces{"x", "\t", "y"}));
  EXPECT_EQ(split("h\xC3\xA9llo w\xC3\xB6rld", PreTokenizer::Gpt2), (Pieces{"h\xC3\xA9llo", " w\xC3\xB6rld"}));
  EXPECT_EQ(split("hi\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99!", PreTokenizer::Gpt2), (Pieces{"hi", "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99!"}));
  EXPECT_EQ(split("e\xCC\x81t\xC3\xA9", PreTokenizer::Gpt2), (Pieces{"e", "\xCC\x81", "t\xC3\xA9"}));  // combining acute is not a letter
  EXPECT_EQ(split("", PreTokenizer::Gpt2), Pieces{});
}

TEST(PreTokenizer, Llama3Pattern) {
  EXPECT_EQ(split("Hello world's 12345 ... \n\n  x", PreTokenizer::Llama3),
            (Pieces{"Hello", " world", "'s", " ", "123", "45", " ...", " \n\n", " ", " x"}));
  EXPECT_EQ(split("DON'T we'RE", PreTokenizer::Llama3), (Pieces{"DON", "'T", " we", "'RE"}));
  EXPECT_EQ(split("'hello", PreTokenizer::Llama3), (Pieces{"'hello"}));
  EXPECT_EQ(split("a\r\n\r\nb", PreTokenizer::Llama3), (Pieces{"a", "\r\n\r\n", "b"}));
  EXPECT_EQ(split("x!!\n\ny", PreTokenizer::Llama3), (Pieces{"x", "!!\n\n", "y"}));
  EXPECT_EQ(split("\tfoo", PreTokenizer::Llama3), (Pieces{"\tfoo"}));
  EXPECT_EQ(split("\nfoo", PreTokenizer::Llama3), (Pieces{"\n", "foo"}));
  EXPECT_EQ(split("1234567", PreTokenizer::Llama3), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80", PreTokenizer::Llama3),
            (Pieces{"\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", " \xD0\xBC\xD0\xB8\xD1\x80"}));  // Привет мир
  EXPECT_EQ(split("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C", PreTokenizer::Llama3),
            (Pieces{"\xE4\xBD\xA0\xE5\xA5\xBD", "\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C"}));  // 你好，世界: the comma joins the word after it
}

TEST(PreTokenizer, Qwen2PatternSplitsSingleDigits) {
  EXPECT_EQ(split("Hello world's 12345 ... \n\n  x", PreTokenizer::Qwen2),
            (Pieces{"Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " ...", " \n\n", " ", " x"}));
  EXPECT_EQ(split("v2", PreTokenizer::Qwen2), (Pieces{"v", "2"}));
}

TEST(PreTokenizer, InvalidUtf8BytesAreSingleOtherCharacters) {
  EXPECT_EQ(split("a\xFF" "b", PreTokenizer::Gpt2), (Pieces{"a", "\xFF", "b"}));
  EXPECT_EQ(split("a\xFF" "b", PreTokenizer::Llama3), (Pieces{"a", "\xFF" "b"}));
  EXPECT_EQ(split("\xE2\x82 x", PreTokenizer::Gpt2), (Pieces{"\xE2\x82", " x"}));
}

TEST(PreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "Z", " ", "  ", "\n", "\r", "\t", "'", "'s", "'LL", "1", "42", ".", "!?",
                                  "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xCC\x81", "\xFF", "\x80", "\xE2\x82"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int parts = static_cast<int>(rng() % 12);
    for (int i = 0; i < parts; ++i) text += alphabet[rng() % std::size(alphabet)];
    for (PreTokenizer kind : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2}) {
      std::string joined;
      for (std::string_view piece : pre_tokenize(text, kind)) {
        ASSERT_FALSE(piece.empty());
        joined += piece;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

}  // namespace
}  // namespace orchard::model
