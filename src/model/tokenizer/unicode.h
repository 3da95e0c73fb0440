#pragma once
// The small part of Unicode the tokenizers need: strict UTF-8 decoding, the general-category
// classes the pre-tokenizer regexes use (\p{Lu}, \p{Ll}, \p{L}, \p{M}, \p{N}, \s), and GPT-2's
// byte-to-unicode mapping.
//
// Categories come from a table generated from the Unicode Character Database
// (scripts/gen_unicode_tables.py, unicode_tables.inc), so every script is covered as of that
// Unicode version; codepoints unassigned in it are Other.
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

// General categories, merged where no pre-tokenizer regex tells them apart. \s is the
// White_Space property (what \s means in the regex engines the reference tokenizers use).
enum class Category : uint8_t {
  Upper,       // Lu, Lt
  Lower,       // Ll
  Caseless,    // Lm, Lo: letters without case (CJK, Arabic, Hebrew, modifier letters)
  Mark,        // Mn, Mc, Me: combining marks, which \p{L} does not include
  Number,      // Nd, Nl, No
  Whitespace,  // White_Space
  Other,       // punctuation, symbols, emoji, controls, unassigned
};
Category category(char32_t codepoint);
constexpr bool is_letter(Category c) { return c == Category::Upper || c == Category::Lower || c == Category::Caseless; }

// GPT-2's reversible mapping of the 256 byte values onto printable codepoints (printable
// Latin-1 bytes map to themselves, the rest to U+0100 onwards, in byte order).
const std::array<std::string, 256>& byte_to_unicode();
// The byte a mapped codepoint stands for, or -1 when `codepoint` is not in the mapping.
int unicode_to_byte(char32_t codepoint);

}  // namespace orchard::model::unicode
