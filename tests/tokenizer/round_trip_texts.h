#pragma once
// Texts for round-trip tests: fixed edge cases plus random strings of valid UTF-8.
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/unicode.h"

namespace orchard::model::test {

inline std::vector<std::string> round_trip_texts(int random_count, uint32_t seed) {
  std::vector<std::string> texts = {
      "", " ", "  ", "\n", "\n\n\n", "\t", " \t\n ", "Hello world", " Hello world", "Hello World!",
      "Hello, world! It's 2024-03-15; we'll see.", "the orchard sat on a low hill above the river",
      "   leading and trailing   ", "line one\nline two\r\nline three\n", "12345 67 8.9 1,000,000",
      "caf\xC3\xA9 na\xC3\xAFve fa\xC3\xA7" "ade", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80!",
      "\xCE\x9A\xCE\xB1\xCE\xBB\xCE\xB7\xCE\xBC\xCE\xAD\xCF\x81\xCE\xB1", "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",
      "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF", "\xEC\x95\x88\xEB\x85\x95\xED\x95\x98\xEC\x84\xB8\xEC\x9A\x94",
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7", "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D", "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
      "e\xCC\x81\xCC\x82", "\xF0\x9F\xA6\x99 llama \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
      "int main() { return 0; }\n", "DON'T you're I'M", "<s> </s> <unk> <|endoftext|> <0x41>", "\xF4\x8F\xBF\xBF\xEF\xBF\xBF\x7F\x01",
  };
  // Codepoint ranges to draw from: ASCII (often), Latin-1, Greek, Cyrillic, Arabic, Devanagari,
  // combining marks, CJK, Hangul, emoji, supplementary planes.
  const std::pair<char32_t, char32_t> ranges[] = {{0x20, 0x7E}, {0x20, 0x7E}, {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x2FF},
                                                  {0x370, 0x3FF}, {0x400, 0x4FF}, {0x600, 0x6FF}, {0x900, 0x97F},
                                                  {0x300, 0x36F}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF},
                                                  {0x10000, 0x10FFFF}, {0x1, 0x1F}};
  std::mt19937 rng(seed);
  for (int i = 0; i < random_count; ++i) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int k = 0; k < length; ++k) {
      const auto& [lo, hi] = ranges[rng() % std::size(ranges)];
      char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
      // U+2581 is not in any range: SentencePiece reads it as a space, so it can't round-trip.
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      unicode::append_utf8(text, cp);
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace orchard::model::test
