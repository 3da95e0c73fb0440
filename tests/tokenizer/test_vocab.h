#pragma once
// Small handcrafted vocabularies for tests whose expected ids are derived by hand.
#include <algorithm>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace orchard::model::test {

constexpr TokenId kFirstSpmPiece = 3 + 256;  // after <unk> <s> </s> and <0x00>..<0xFF>

inline TokenId spm_byte(unsigned char b) { return 3 + b; }

// <unk> <s> </s>, the byte tokens, then `pieces` (text, score) from id kFirstSpmPiece on.
inline VocabData spm_vocab(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabData v;
  v.model = "llama";
  const auto add = [&](std::string text, float score, TokenKind kind) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  };
  add("<unk>", 0, TokenKind::Unknown);
  add("<s>", 0, TokenKind::Control);
  add("</s>", 0, TokenKind::Control);
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, TokenKind::Byte);
  }
  for (const auto& [text, score] : pieces) add(text, score, TokenKind::Normal);
  v.unknown = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

// Token b (0..255) is byte b's mapped character; then each merge's result, in merge order.
inline VocabData bpe_vocab(const std::vector<std::string>& merges, std::string pre) {
  VocabData v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  const auto& alphabet = unicode::byte_to_unicode();
  v.tokens.assign(alphabet.begin(), alphabet.end());
  for (const std::string& merge : merges) {
    std::string result = merge;
    result.erase(result.find(' '), 1);
    if (std::find(v.tokens.begin(), v.tokens.end(), result) == v.tokens.end()) v.tokens.push_back(result);
    v.merges.push_back(merge);
  }
  return v;
}

inline TokenId id_of(const VocabData& v, const std::string& text) {
  const auto it = std::find(v.tokens.begin(), v.tokens.end(), text);
  return it == v.tokens.end() ? -1 : static_cast<TokenId>(it - v.tokens.begin());
}

}  // namespace orchard::model::test
