#pragma once
// The small part of Unicode the tokenizers need: strict UTF-8 decoding, the general-category
// classes the pre-tokenizer regexes use (\p{L}, \p{N}, \s), and GPT-2's byte-to-unicode mapping.
//
// Category coverage (tables in unicode.cpp): letters and numbers of Latin (with Latin-1,
// Extended-A/B/C/D/E, IPA, Latin Extended Additional, full-width forms), Greek (and Greek
// Extended), Cyrillic, Armenian, Hebrew, Arabic (with presentation forms), Devanagari and the
// other main Indic scripts' letter blocks, Thai, Georgian, Hangul (Jamo, compatibility Jamo,
// syllables), Hiragana, Katakana, Bopomofo, CJK unified ideographs (BMP, extensions A-G) and
// compatibility ideographs. Numbers cover ASCII digits, superscripts/subscripts, vulgar
// fractions, Roman numerals, circled numbers, and the decimal digits of the scripts above.
// Combining marks (\p{M}) and everything not listed (symbols, emoji, punctuation, unlisted
// scripts) classify as Other, which is what [^\s\p{L}\p{N}] matches.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace orchard::model::unicode {

constexpr char32_t kReplacement = 0xFFFD;

struct Decoded {
  char32_t codepoint = kReplacement;
  uint32_t length = 1;  // bytes consumed, always >= 1 so a scan always advances
  bool valid = false;   // false: an invalid or truncated sequence; one byte is consumed
};

// Decodes the UTF-8 sequence starting at text[pos] (pos < text.size()). Rejects overlong forms,
// surrogates and values past U+10FFFF.
Decoded decode_utf8(std::string_view text, size_t pos);
void append_utf8(std::string& out, char32_t codepoint);
// Whether `text` is entirely valid UTF-8.
bool is_valid_utf8(std::string_view text);

enum class Category : uint8_t { Letter, Number, Whitespace, Other };
Category category(char32_t codepoint);

// GPT-2's reversible mapping of the 256 byte values onto printable codepoints (printable
// Latin-1 bytes map to themselves, the rest to U+0100 onwards, in byte order).
const std::array<std::string, 256>& byte_to_unicode();
// The byte a mapped codepoint stands for, or -1 when `codepoint` is not in the mapping.
int unicode_to_byte(char32_t codepoint);

}  // namespace orchard::model::unicode
