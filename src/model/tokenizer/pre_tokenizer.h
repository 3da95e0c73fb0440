#pragma once
// Splits text into the pieces byte-level BPE merges within, as the reference tokenizers do with
// a regex. Written by hand because std::regex has no \p{L}/\p{N}; each splitter follows its
// regex's alternation order and backtracking exactly (see pre_tokenizer.cpp), with categories
// from unicode.h. Invalid UTF-8 bytes are single characters of category Other.
#include <string_view>
#include <vector>

namespace orchard::model {

enum class PreTokenizer {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Llama3's pattern with \p{N} (single digits) in place of \p{N}{1,3}.
  Qwen2,
  // o200k (GPT-4o, gpt-oss): words split at case changes, contractions kept with their word.
  // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  // \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Gpt4o,
};

// The pieces, in order; their concatenation is `text`. Views into `text`.
std::vector<std::string_view> pre_tokenize(std::string_view text, PreTokenizer kind);

}  // namespace orchard::model
