#include "model/tokenizer/unicode.h"

#include <algorithm>
#include <span>

namespace orchard::model::unicode {
namespace {

// Every codepoint that is not Other, as generated from the Unicode Character Database (see
// unicode_tables.inc), so the case-sensitive split of o200k ("gpt-4o") sees the same letters,
// marks and numbers as the reference regex engines.
struct CategoryRange {
  char32_t first;
  char32_t last;  // inclusive
  Category category;
};

constexpr Category kUpper = Category::Upper;
constexpr Category kLower = Category::Lower;
constexpr Category kCaseless = Category::Caseless;
constexpr Category kMark = Category::Mark;
constexpr Category kNumber = Category::Number;
constexpr Category kWhitespace = Category::Whitespace;

constexpr CategoryRange kCategories[] = {
#include "model/tokenizer/unicode_tables.inc"
};

Category lookup(char32_t codepoint) {
  const std::span<const CategoryRange> ranges(kCategories);
  auto it = std::upper_bound(ranges.begin(), ranges.end(), codepoint,
                             [](char32_t cp, const CategoryRange& r) { return cp < r.first; });
  if (it == ranges.begin() || codepoint > std::prev(it)->last) return Category::Other;
  return std::prev(it)->category;
}

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

Decoded decode_utf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {lead, 1, true};
  uint32_t length = 0;
  char32_t codepoint = 0;
  char32_t minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, codepoint = lead & 0x1F, minimum = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, codepoint = lead & 0x0F, minimum = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, codepoint = lead & 0x07, minimum = 0x10000;
  } else {
    return {};
  }
  if (pos + length > text.size()) return {};
  for (uint32_t i = 1; i < length; ++i) {
    if (!is_continuation(byte(i))) return {};
    codepoint = (codepoint << 6) | (byte(i) & 0x3F);
  }
  if (codepoint < minimum || codepoint > 0x10FFFF || (codepoint >= 0xD800 && codepoint <= 0xDFFF)) {
    return {};
  }
  return {codepoint, length, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Decoded d = decode_utf8(text, pos);
    if (!d.valid) return false;
    pos += d.length;
  }
  return true;
}

Category category(char32_t cp) {
  // ASCII first: it is most of what tokenizers see.
  if (cp < 0x80) {
    if (cp >= 'a' && cp <= 'z') return Category::Lower;
    if (cp >= 'A' && cp <= 'Z') return Category::Upper;
    if (cp >= '0' && cp <= '9') return Category::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return Category::Whitespace;
    return Category::Other;
  }
  return lookup(cp);
}

namespace {

struct ByteMapping {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 0x144> from_unicode{};  // every mapped codepoint is below U+0144
};

const ByteMapping& byte_mapping() {
  static const ByteMapping mapping = [] {
    ByteMapping m;
    m.from_unicode.fill(-1);
    char32_t next_unprintable = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_unprintable++;
      m.from_unicode[cp] = static_cast<int16_t>(b);
      append_utf8(m.to_unicode[b], cp);
    }
    return m;
  }();
  return mapping;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return byte_mapping().to_unicode; }

int unicode_to_byte(char32_t codepoint) {
  const auto& table = byte_mapping().from_unicode;
  return codepoint < table.size() ? table[codepoint] : -1;
}

}  // namespace orchard::model::unicode
