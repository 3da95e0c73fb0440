#include "model/tokenizer/pre_tokenizer.h"

#include "model/tokenizer/unicode.h"

namespace orchard::model {
namespace {

using unicode::Category;

// \p{L}, \p{N}, \s and the rest ([^\s\p{L}\p{N}], which includes combining marks): all that the
// Gpt2, Llama3 and Qwen2 regexes look at.
enum class Class : uint8_t { Letter, Number, Whitespace, Other };

Class class_of(Category category) {
  if (unicode::is_letter(category)) return Class::Letter;
  if (category == Category::Number) return Class::Number;
  if (category == Category::Whitespace) return Class::Whitespace;
  return Class::Other;
}

struct Char {
  size_t offset;  // byte offset in the text
  char32_t codepoint;
  Category category;
  Class cls;
};

// The text as characters, plus a sentinel whose offset is the text's end. An invalid byte is one
// character of category Other, so any input splits deterministically.
std::vector<Char> decode_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Decoded d = unicode::decode_utf8(text, pos);
    const Category category = d.valid ? unicode::category(d.codepoint) : Category::Other;
    chars.push_back({pos, d.codepoint, category, class_of(category)});
    pos += d.length;
  }
  chars.push_back({text.size(), 0, Category::Other, Class::Other});
  return chars;
}

class Splitter {
 public:
  Splitter(std::string_view text, PreTokenizer kind) : kind_(kind), chars_(decode_chars(text)), n_(chars_.size() - 1) {}

  std::vector<std::string_view> split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i < n_;) {
      const size_t end = kind_ == PreTokenizer::Gpt2    ? match_gpt2(i)
                         : kind_ == PreTokenizer::Gpt4o ? match_gpt4o(i)
                                                        : match_llama3(i);
      pieces.push_back(text.substr(chars_[i].offset, chars_[end].offset - chars_[i].offset));
      i = end;
    }
    return pieces;
  }

 private:
  bool is(size_t i, Class cls) const { return i < n_ && chars_[i].cls == cls; }
  bool is_newline(size_t i) const { return i < n_ && (chars_[i].codepoint == '\r' || chars_[i].codepoint == '\n'); }
  bool is_space(size_t i) const { return i < n_ && chars_[i].codepoint == ' '; }
  size_t run(size_t i, Class cls) const {
    while (is(i, cls)) ++i;
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
    const size_t j = run(i, Class::Whitespace);
    if (j == n_) return j;
    return j - 1 > i ? j - 1 : i + 1;
  }

  size_t match_gpt2(size_t i) const {
    if (const size_t end = match_contraction(i, false)) return end;
    // ` ?X+` for X in letters, numbers, other: a space joins the run that follows it.
    const size_t start = is_space(i) && i + 1 < n_ && !is(i + 1, Class::Whitespace) ? i + 1 : i;
    const Class cls = chars_[start].cls;
    if (cls != Class::Whitespace) return run(start, cls);
    return match_whitespace(i);
  }

  size_t match_llama3(size_t i) const {
    if (const size_t end = match_contraction(i, true)) return end;
    const Class cls = chars_[i].cls;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (cls == Class::Letter) return run(i, Class::Letter);
    if (cls != Class::Number && !is_newline(i) && is(i + 1, Class::Letter)) {
      return run(i + 1, Class::Letter);
    }
    // \p{N}{1,3} (Qwen2: \p{N})
    if (cls == Class::Number) {
      const size_t limit = kind_ == PreTokenizer::Qwen2 ? 1 : 3;
      size_t end = i;
      while (end - i < limit && is(end, Class::Number)) ++end;
      return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t start = is_space(i) && is(i + 1, Class::Other) ? i + 1 : i;
    if (is(start, Class::Other)) {
      size_t end = run(start, Class::Other);
      while (is_newline(end)) ++end;
      return end;
    }
    return match_newlines_or_whitespace(i);
  }

  // \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace character i. \s*[\r\n]+ takes the whitespace run
  // up to and including its last newline.
  size_t match_newlines_or_whitespace(size_t i) const {
    const size_t j = run(i, Class::Whitespace);
    for (size_t k = j; k > i; --k) {
      if (is_newline(k - 1)) return k;
    }
    return match_whitespace(i);
  }

  // o200k's words: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] ("upper") and [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  // ("lower") overlap in the caseless letters and the marks, which is what makes backtracking
  // matter below.
  bool is_upper(size_t i) const {
    return i < n_ && (chars_[i].category == Category::Upper || chars_[i].category == Category::Caseless ||
                      chars_[i].category == Category::Mark);
  }
  bool is_lower(size_t i) const {
    return i < n_ && (chars_[i].category == Category::Lower || chars_[i].category == Category::Caseless ||
                      chars_[i].category == Category::Mark);
  }
  size_t with_contraction(size_t end) const {
    const size_t contraction = match_contraction(end, true);
    return contraction ? contraction : end;
  }

  // upper*lower+ contraction? from s; 0 when it cannot match. upper* first takes its whole run;
  // when no lower character follows, the regex gives back characters of the run until the one
  // given back is also lower (caseless or a mark), which then is the whole lower+ part.
  size_t match_upper_lower(size_t s) const {
    size_t k = s;
    while (is_upper(k)) ++k;
    if (!is_lower(k)) {
      while (k > s && !is_lower(k - 1)) --k;
      if (k == s) return 0;
      return with_contraction(k);
    }
    while (is_lower(k)) ++k;
    return with_contraction(k);
  }

  // upper+lower*contraction? from s; 0 when s is not upper.
  size_t match_upper_run(size_t s) const {
    if (!is_upper(s)) return 0;
    size_t k = s;
    while (is_upper(k)) ++k;
    while (is_lower(k)) ++k;
    return with_contraction(k);
  }

  size_t match_gpt4o(size_t i) const {
    // The two word alternatives, each with its optional [^\r\n\p{L}\p{N}] prefix tried first.
    const bool prefix = i + 1 < n_ && !is_newline(i) && !is(i, Class::Letter) && !is(i, Class::Number);
    if (prefix) {
      if (const size_t end = match_upper_lower(i + 1)) return end;
    }
    if (const size_t end = match_upper_lower(i)) return end;
    if (prefix) {
      if (const size_t end = match_upper_run(i + 1)) return end;
    }
    if (const size_t end = match_upper_run(i)) return end;
    // \p{N}{1,3}
    if (is(i, Class::Number)) {
      size_t end = i;
      while (end - i < 3 && is(end, Class::Number)) ++end;
      return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
    const size_t start = is_space(i) && is(i + 1, Class::Other) ? i + 1 : i;
    if (is(start, Class::Other)) {
      size_t end = run(start, Class::Other);
      while (is_newline(end) || (end < n_ && chars_[end].codepoint == '/')) ++end;
      return end;
    }
    return match_newlines_or_whitespace(i);
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
