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

// o200k splits words where the case changes; every expected split here was derived by hand from the
// pattern (pre_tokenizer.h) and agrees with Python's `regex` module running the original pattern.
TEST(PreTokenizer, Gpt4oPatternSplitsAtCaseChanges) {
  const auto g = [](std::string_view text) { return split(text, PreTokenizer::Gpt4o); };
  EXPECT_EQ(g("HelloWorld"), (Pieces{"Hello", "World"}));
  EXPECT_EQ(g("camelCaseHTTPServer"), (Pieces{"camel", "Case", "HTTPServer"}));  // upper* takes "HTTPS"
  EXPECT_EQ(g("ΑθΗνα"), (Pieces{"Αθ", "Ηνα"}));
  EXPECT_EQ(g("ǅemal"), (Pieces{"ǅemal"}));  // title case counts as upper
  EXPECT_EQ(g("Émile ÉCOLE café"), (Pieces{"Émile", " ÉCOLE", " café"}));
}

TEST(PreTokenizer, Gpt4oPatternKeepsContractionsWithTheirWord) {
  const auto g = [](std::string_view text) { return split(text, PreTokenizer::Gpt4o); };
  EXPECT_EQ(g("HELLO'S world"), (Pieces{"HELLO'S", " world"}));
  EXPECT_EQ(g("don't WE'RE They'll"), (Pieces{"don't", " WE'RE", " They'll"}));
  EXPECT_EQ(g("'s 'S x"), (Pieces{"'s", " '", "S", " x"}));  // a contraction only follows a word
}

TEST(PreTokenizer, Gpt4oPatternNumbersMarksAndScripts) {
  const auto g = [](std::string_view text) { return split(text, PreTokenizer::Gpt4o); };
  EXPECT_EQ(g("1234567 v2.0"), (Pieces{"123", "456", "7", " v", "2", ".", "0"}));
  EXPECT_EQ(g("你好，世界"), (Pieces{"你好", "，世界"}));  // the full-width comma prefixes the next word
  // Marks belong to both cases: a decomposed é stays in its word, but in "ÉCOLE" written with a
  // combining accent the regex backtracks to the mark as the only lower character.
  EXPECT_EQ(g("e\u0301cole E\u0301COLE"), (Pieces{"e\u0301cole", " E\u0301", "COLE"}));
  EXPECT_EQ(g("\u0301abc"), (Pieces{"\u0301abc"}));
  EXPECT_EQ(g("x\u0301Y"), (Pieces{"x\u0301", "Y"}));
  EXPECT_EQ(g("हिंदी"), (Pieces{"हिंदी"}));  // vowel signs (marks) stay with their letters
}

TEST(PreTokenizer, Gpt4oPatternWhitespaceAndPunctuation) {
  const auto g = [](std::string_view text) { return split(text, PreTokenizer::Gpt4o); };
  EXPECT_EQ(g("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(g("foo\n\nbar"), (Pieces{"foo", "\n\n", "bar"}));
  EXPECT_EQ(g("x  \n  y"), (Pieces{"x", "  \n", " ", " y"}));
  EXPECT_EQ(g("\tfoo"), (Pieces{"\tfoo"}));
  EXPECT_EQ(g("\nfoo"), (Pieces{"\n", "foo"}));
  EXPECT_EQ(g("x !!"), (Pieces{"x", " !!"}));
  EXPECT_EQ(g("});\n\n/**"), (Pieces{"});\n\n/", "**"}));  // newlines and slashes end a punctuation run
  EXPECT_EQ(g("a//b\n"), (Pieces{"a", "//", "b", "\n"}));
  EXPECT_EQ(g("trailing  "), (Pieces{"trailing", "  "}));
  EXPECT_EQ(g(""), Pieces{});
}

TEST(PreTokenizer, InvalidUtf8BytesAreSingleOtherCharacters) {
  EXPECT_EQ(split("a\xFF" "b", PreTokenizer::Gpt2), (Pieces{"a", "\xFF", "b"}));
  EXPECT_EQ(split("a\xFF" "b", PreTokenizer::Llama3), (Pieces{"a", "\xFF" "b"}));
  EXPECT_EQ(split("\xE2\x82 x", PreTokenizer::Gpt2), (Pieces{"\xE2\x82", " x"}));
  EXPECT_EQ(split("a\xFF" "B", PreTokenizer::Gpt4o), (Pieces{"a", "\xFF" "B"}));
}

TEST(PreTokenizer, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "Z", " ", "  ", "\n", "\r", "\t", "'", "'s", "'LL", "1", "42", ".", "!?",
                                  "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xCC\x81", "\xFF", "\x80", "\xE2\x82",
                                  "Q", "\xC3\x89", "/", "\xC7\x85"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int parts = static_cast<int>(rng() % 12);
    for (int i = 0; i < parts; ++i) text += alphabet[rng() % std::size(alphabet)];
    for (PreTokenizer kind : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Gpt4o}) {
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
