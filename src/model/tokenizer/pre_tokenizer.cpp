#include "model/tokenizer/pre_tokenizer.h"

#include "model/tokenizer/unicode.h"

namespace orchard::model {
namespace {

using unicode::Category;

struct Char {
  size_t offset;  // byte offset in the text
  char32_t codepoint;
  Category category;
};

// The text as characters, plus a sentinel whose offset is the text's end. An invalid byte is one
// character of category Other, so any input splits deterministically.
std::vector<Char> decode_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Decoded d = unicode::decode_utf8(text, pos);
    chars.push_back({pos, d.codepoint, d.valid ? unicode::category(d.codepoint) : Category::Other});
    pos += d.length;
  }
  chars.push_back({text.size(), 0, Category::Other});
  return chars;
}

class Splitter {
 public:
  Splitter(std::string_view text, PreTokenizer kind) : kind_(kind), chars_(decode_chars(text)), n_(chars_.size() - 1) {}

  std::vector<std::string_view> split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < n_;) {
      const size_t end = kind_ == PreTokenizer::Gpt2 ? match_gpt2(i) : match_llama3(i);
      pieces.push_back(text.substr(chars_[i].offset, chars_[end].offset - chars_[i].offset));
      i = end;
    }
    return pieces;
  }

 private:
  bool is(size_t i, Category category) const { return i < n_ && chars_[i].category == category; }
  bool is_newline(size_t i) const { return i < n_ && (chars_[i].codepoint == '\r' || chars_[i].codepoint == '\n'); }
  bool is_space(size_t i) const { return i < n_ && chars_[i].codepoint == ' ' && chars_[i].category == Category::Whitespace; }
  size_t run(size_t i, Category category) const {
    while (is(i, category)) ++i;
    return i;
  }
  char32_t lower_ascii(size_t i) const {
    const char32_t cp = i < n_ ? chars_[i].codepoint : 0;
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  }

  // 's 't 're 've 'm 'll 'd at i; returns the end or 0 when none matches.
  size_t match_contraction(size_t i, bool ignore_case) const {
    if (i >= n_ || chars_[i].codepoint != '\'') return 0;
    const auto at = [&](size_t k) { return ignore_case ? lower_ascii(k) : (k < n_ ? chars_[k].codepoint : 0); };
    const char32_t a = at(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const char32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace character i: a whitespace run gives up its last character to
  // the word that follows, unless the run is one character or ends the text.
  size_t match_whitespace(size_t i) const {
    const size_t j = run(i, Category::Whitespace);
    if (j == n_) return j;
    return j - 1 > i ? j - 1 : i + 1;
  }

  size_t match_gpt2(size_t i) const {
    if (const size_t end = match_contraction(i, false)) return end;
    // ` ?X+` for X in letters, numbers, other: a space joins the run that follows it.
    const size_t start = is_space(i) && i + 1 < n_ && !is(i + 1, Category::Whitespace) ? i + 1 : i;
    const Category category = chars_[start].category;
    if (category != Category::Whitespace) return run(start, category);
    return match_whitespace(i);
  }

  size_t match_llama3(size_t i) const {
    if (const size_t end = match_contraction(i, true)) return end;
    const Category category = chars_[i].category;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (category == Category::Letter) return run(i, Category::Letter);
    if (category != Category::Number && !is_newline(i) && is(i + 1, Category::Letter)) {
      return run(i + 1, Category::Letter);
    }
    // \p{N}{1,3} (Qwen2: \p{N})
    if (category == Category::Number) {
      const size_t limit = kind_ == PreTokenizer::Qwen2 ? 1 : 3;
      size_t end = i;
      while (end - i < limit && is(end, Category::Number)) ++end;
      return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t start = is_space(i) && is(i + 1, Category::Other) ? i + 1 : i;
    if (chars_[start].category == Category::Other) {
      size_t end = run(start, Category::Other);
      while (is_newline(end)) ++end;
      return end;
    }
    // \s*[\r\n]+: the whitespace run up to and including its last newline.
    const size_t j = run(i, Category::Whitespace);
    for (size_t k = j; k > i; --k) {
      if (is_newline(k - 1)) return k;
    }
    return match_whitespace(i);
  }

  PreTokenizer kind_;
  std::vector<Char> chars_;
  size_t n_;  // characters, without the sentinel
};

}  // namespace

std::vector<std::string_view> pre_tokenize(std::string_view text, PreTokenizer kind) {
  return Splitter(text, kind).split(text);
}

}  // namespace orchard::model
