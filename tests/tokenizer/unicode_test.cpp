#include "model/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <set>

namespace orchard::model::unicode {
namespace {

TEST(Utf8, DecodesOneToFourByteSequences) {
  struct Case {
    std::string text;
    char32_t codepoint;
    uint32_t length;
  };
  for (const Case& c : {Case{"A", 0x41, 1}, Case{"\xC3\xA9", 0xE9, 2}, Case{"\xE2\x82\xAC", 0x20AC, 3},
                        Case{"\xF0\x9F\xA6\x99", 0x1F999, 4}, Case{"\xF4\x8F\xBF\xBF", 0x10FFFF, 4}}) {
    const Decoded d = decode_utf8(c.text, 0);
    EXPECT_TRUE(d.valid) << c.text;
    EXPECT_EQ(d.codepoint, c.codepoint);
    EXPECT_EQ(d.length, c.length);
    std::string encoded;
    append_utf8(encoded, c.codepoint);
    EXPECT_EQ(encoded, c.text);
  }
}

TEST(Utf8, RejectsInvalidSequencesOneByteAtATime) {
  for (const std::string bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                "\xF5\x80\x80\x80", "\xFF", "\xE2\x82", "\xC3", "\xE2\x28\xA1"}) {
    const Decoded d = decode_utf8(bad, 0);
    EXPECT_FALSE(d.valid) << testing::PrintToString(bad);
    EXPECT_EQ(d.length, 1u);
    EXPECT_FALSE(is_valid_utf8(bad));
  }
  EXPECT_TRUE(is_valid_utf8("plain, caf\xC3\xA9, \xE4\xB8\xAD, \xF0\x9F\x98\x80"));
}

TEST(Category, ClassifiesLettersNumbersWhitespaceAcrossScripts) {
  for (char32_t letter : {U'a', U'Z', U'é', U'ß', U'Ω', U'λ', U'Ж', U'я', U'ب', U'ש', U'न', U'한', U'ᄀ', U'あ', U'カ',
                          U'中', U'文', U'\U00020000', U'ａ', U'ǅ', U'ก', U'ა', U'\U0001E900', U'ᏸ'}) {
    EXPECT_TRUE(is_letter(category(letter))) << std::hex << static_cast<uint32_t>(letter);
  }
  for (char32_t number : {U'0', U'9', U'²', U'½', U'٣', U'۵', U'५', U'３', U'Ⅻ', U'①', U'〇', U'\U0001D7CE'}) {
    EXPECT_EQ(category(number), Category::Number) << std::hex << static_cast<uint32_t>(number);
  }
  for (char32_t space : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2003', U'\u3000', U'\u2028'}) {
    EXPECT_EQ(category(space), Category::Whitespace) << std::hex << static_cast<uint32_t>(space);
  }
  // Punctuation, symbols, emoji, joiners and unassigned codepoints are "other"; marks are their
  // own category, and neither is a letter.
  for (char32_t other : {U'!', U'\'', U'€', U'\U0001F999', U'\u200D', U'。', U'\u2581', U'\0', U'\u0378', U'\U0010FFFF'}) {
    EXPECT_EQ(category(other), Category::Other) << std::hex << static_cast<uint32_t>(other);
  }
  for (char32_t mark : {U'\u0301', U'\u093F', U'\u0E31', U'\u20DD', U'\uFE0F'}) {
    EXPECT_EQ(category(mark), Category::Mark) << std::hex << static_cast<uint32_t>(mark);
    EXPECT_FALSE(is_letter(category(mark)));
  }
}

// Values from UnicodeData.txt's general category field, for letters the o200k split tells apart.
TEST(Category, TellsLettersApartByCase) {
  for (char32_t upper : {U'A', U'Z', U'É', U'Ω', U'Ж', U'Ա', U'Ა', U'Ꭰ', U'\U0001E900', U'ǅ', U'ᾈ'}) {  // Lu, Lt
    EXPECT_EQ(category(upper), Category::Upper) << std::hex << static_cast<uint32_t>(upper);
  }
  for (char32_t lower : {U'a', U'z', U'é', U'ß', U'ω', U'ж', U'ա', U'ა', U'ᏸ', U'\U0001E922', U'ſ'}) {  // Ll
    EXPECT_EQ(category(lower), Category::Lower) << std::hex << static_cast<uint32_t>(lower);
  }
  for (char32_t caseless : {U'中', U'あ', U'한', U'ب', U'ש', U'न', U'ก', U'ʰ', U'々', U'ー', U'ª'}) {  // Lo, Lm
    EXPECT_EQ(category(caseless), Category::Caseless) << std::hex << static_cast<uint32_t>(caseless);
  }
}

TEST(ByteToUnicode, IsGpt2sReversibleMapping) {
  const auto& table = byte_to_unicode();
  EXPECT_EQ(table['A'], "A");
  EXPECT_EQ(table['!'], "!");
  EXPECT_EQ(table[' '], "\xC4\xA0");    // Ġ U+0120
  EXPECT_EQ(table['\n'], "\xC4\x8A");   // Ċ U+010A
  EXPECT_EQ(table[0x00], "\xC4\x80");   // Ā U+0100
  EXPECT_EQ(table[0x7F], "\xC4\xA1");   // ġ U+0121
  EXPECT_EQ(table[0xAD], "\xC5\x83");   // Ń U+0143, the last one
  EXPECT_EQ(table[0xFF], "\xC3\xBF");   // ÿ maps to itself
  std::set<std::string> distinct(table.begin(), table.end());
  EXPECT_EQ(distinct.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const Decoded d = decode_utf8(table[b], 0);
    ASSERT_TRUE(d.valid);
    EXPECT_EQ(unicode_to_byte(d.codepoint), b);
  }
  EXPECT_EQ(unicode_to_byte(0x20), -1);  // a space is never a mapped character
  EXPECT_EQ(unicode_to_byte(0x144), -1);
}

}  // namespace
}  // namespace orchard::model::unicode
