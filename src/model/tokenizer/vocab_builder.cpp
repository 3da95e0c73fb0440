#include "model/tokenizer/vocab_builder.h"

#include <map>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "model/tokenizer/corpus.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace orchard::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // ▁
// A pair seen once is an accident of the corpus, not a unit worth a token.
constexpr int64_t kMinPairCount = 2;

// Word-level BPE training. Words are sequences of symbol ids; a merge replaces every adjacent
// (a, b) with a new symbol. Pair counts are kept up to date incrementally, and the best pair is
// the first of a set ordered by (count descending, pair key), so ties go to the pair of older
// symbols and the result never depends on hash-table order.
class BpeTrainer {
 public:
  struct Merge {
    int left;
    int right;
    int result;
    bool new_symbol;  // false when another merge already made the same text
  };

  int symbol(std::string_view text) {
    const auto [it, inserted] = symbol_ids_.emplace(std::string(text), static_cast<int>(texts_.size()));
    if (inserted) texts_.emplace_back(text);
    return it->second;
  }
  const std::string& text(int symbol) const { return texts_[symbol]; }

  void add_word(std::vector<int> symbols, int64_t count) {
    const int index = static_cast<int>(words_.size());
    words_.push_back(std::move(symbols));
    counts_.push_back(count);
    add_pairs(index, +1);
  }

  // Learns merges until `max_new_symbols` new symbols exist or no pair is frequent enough.
  std::vector<Merge> train(size_t max_new_symbols) {
    std::vector<Merge> merges;
    std::vector<size_t> last_rewritten(words_.size(), SIZE_MAX);
    size_t new_symbols = 0;
    while (new_symbols < max_new_symbols && !ranking_.empty() && -ranking_.begin()->first >= kMinPairCount) {
      const uint64_t key = ranking_.begin()->second;
      const int left = static_cast<int>(key >> 32);
      const int right = static_cast<int>(key & 0xFFFFFFFF);
      const size_t before = texts_.size();
      const int result = symbol(texts_[left] + texts_[right]);
      const bool new_symbol = texts_.size() > before;
      new_symbols += new_symbol ? 1 : 0;
      merges.push_back({left, right, result, new_symbol});
      // The word list may name a word twice or name words that no longer hold the pair.
      const std::vector<int> candidates = pair_words_[key];
      for (int w : candidates) {
        if (last_rewritten[w] == merges.size()) continue;
        last_rewritten[w] = merges.size();
        rewrite(w, left, right, result);
      }
    }
    return merges;
  }

 private:
  static uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

  void change_count(uint64_t key, int64_t delta) {
    int64_t& count = pair_counts_[key];
    if (count > 0) ranking_.erase({-count, key});
    count += delta;
    if (count > 0) ranking_.insert({-count, key});
  }

  void add_pairs(int w, int sign) {
    const std::vector<int>& word = words_[w];
    for (size_t i = 1; i < word.size(); ++i) {
      const uint64_t key = pair_key(word[i - 1], word[i]);
      change_count(key, sign * counts_[w]);
      if (sign > 0) pair_words_[key].push_back(w);
    }
  }

  void rewrite(int w, int left, int right, int result) {
    std::vector<int>& word = words_[w];
    bool found = false;
    for (size_t i = 1; i < word.size() && !found; ++i) found = word[i - 1] == left && word[i] == right;
    if (!found) return;
    add_pairs(w, -1);
    std::vector<int> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        merged.push_back(result);
        ++i;
      } else {
        merged.push_back(word[i]);
      }
    }
    word = std::move(merged);
    add_pairs(w, +1);
  }

  std::vector<std::string> texts_;
  std::unordered_map<std::string, int> symbol_ids_;
  std::vector<std::vector<int>> words_;
  std::vector<int64_t> counts_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::vector<int>> pair_words_;
  std::set<std::pair<int64_t, uint64_t>> ranking_;
};

// SentencePiece style: each line of the corpus with spaces as ▁ and a ▁ prefix, split before
// every ▁ (SentencePiece pieces carry the space in front). Counted in a sorted map so the
// training input's order is fixed.
std::map<std::string, int64_t> sentence_piece_words(std::string_view corpus) {
  std::map<std::string, int64_t> words;
  size_t line_start = 0;
  while (line_start < corpus.size()) {
    size_t line_end = corpus.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = corpus.size();
    std::string_view line = corpus.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (line.empty()) continue;
    std::string word(kSpaceMarker);
    for (char c : line) {
      if (c == ' ') {
        ++words[word];
        word = kSpaceMarker;
      } else {
        word += c;
      }
    }
    ++words[word];
  }
  return words;
}

VocabData build_sentence_piece(int32_t vocab_size) {
  constexpr int32_t kFixed = 3 + 256;
  if (vocab_size < kFixed) {
    throw Error(error_message("tokenizer", "a SentencePiece vocabulary needs at least {} tokens, not {}", kFixed, vocab_size));
  }
  VocabData vocab;
  vocab.model = "llama";
  vocab.pre = "default";
  const auto add = [&](std::string text, float score, TokenKind kind) {
    vocab.tokens.push_back(std::move(text));
    vocab.scores.push_back(score);
    vocab.kinds.push_back(kind);
  };
  add("<unk>", 0.0f, TokenKind::Unknown);
  add("<s>", 0.0f, TokenKind::Control);
  add("</s>", 0.0f, TokenKind::Control);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, TokenKind::Byte);
  vocab.unknown = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  vocab.add_bos = true;

  // Characters are symbols; those of the corpus become pieces (most frequent first) unless they
  // are control characters, which stay byte tokens as in Llama's vocabulary.
  BpeTrainer trainer;
  std::map<int, int64_t> char_counts;
  for (const auto& [word, count] : sentence_piece_words(training_corpus())) {
    std::vector<int> symbols;
    for (size_t pos = 0; pos < word.size();) {
      const unicode::Decoded d = unicode::decode_utf8(word, pos);
      symbols.push_back(trainer.symbol(std::string_view(word).substr(pos, d.length)));
      char_counts[symbols.back()] += count;
      pos += d.length;
    }
    trainer.add_word(std::move(symbols), count);
  }
  std::vector<std::pair<int64_t, int>> chars;
  for (const auto& [symbol, count] : char_counts) {
    if (static_cast<unsigned char>(trainer.text(symbol)[0]) >= 0x20) chars.push_back({-count, symbol});
  }
  std::sort(chars.begin(), chars.end());
  const size_t room = static_cast<size_t>(vocab_size - kFixed);
  chars.resize(std::min(chars.size(), room));

  std::vector<std::string> pieces;
  for (const BpeTrainer::Merge& merge : trainer.train(room - chars.size())) {
    if (merge.new_symbol) pieces.push_back(trainer.text(merge.result));
  }
  for (const auto& [count, symbol] : chars) pieces.push_back(trainer.text(symbol));
  for (size_t i = 0; i < pieces.size(); ++i) add(pieces[i], -static_cast<float>(i), TokenKind::Normal);
  for (int32_t i = 0; static_cast<int32_t>(vocab.tokens.size()) < vocab_size; ++i) {
    add(fmt::format("<unused_{}>", i), -1e9f, TokenKind::Unused);
  }
  return vocab;
}

VocabData build_byte_level(VocabStyle style, int32_t vocab_size) {
  const bool llama3 = style == VocabStyle::Llama3Bpe;
  const bool harmony = style == VocabStyle::Gpt4oBpe;
  // gpt-oss's o200k_harmony specials, in their order there: its chat format is OpenAI's Harmony.
  const std::vector<std::string> specials =
      llama3    ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"}
      : harmony ? std::vector<std::string>{"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                                           "<|start|>", "<|end|>", "<|message|>", "<|call|>"}
                : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  const int32_t fixed = 256 + static_cast<int32_t>(specials.size());
  if (vocab_size < fixed) {
    throw Error(error_message("tokenizer", "this byte-level BPE vocabulary needs at least {} tokens, not {}", fixed, vocab_size));
  }
  VocabData vocab;
  vocab.model = "gpt2";
  const PreTokenizer splitter = llama3                           ? PreTokenizer::Llama3
                                : style == VocabStyle::Gpt4oBpe ? PreTokenizer::Gpt4o
                                                                 : PreTokenizer::Qwen2;
  vocab.pre = llama3 ? "llama-bpe" : style == VocabStyle::Gpt4oBpe ? "gpt-4o" : "qwen2";

  BpeTrainer trainer;
  const auto& alphabet = unicode::byte_to_unicode();
  for (const std::string& text : alphabet) trainer.symbol(text);  // symbol b is byte b
  std::map<std::string, int64_t> words;
  for (std::string_view word : pre_tokenize(training_corpus(), splitter)) {
    ++words[std::string(word)];
  }
  for (const auto& [word, count] : words) {
    std::vector<int> symbols;
    for (char c : word) symbols.push_back(static_cast<unsigned char>(c));
    trainer.add_word(std::move(symbols), count);
  }
  vocab.tokens.assign(alphabet.begin(), alphabet.end());
  for (const BpeTrainer::Merge& merge : trainer.train(static_cast<size_t>(vocab_size - fixed))) {
    vocab.merges.push_back(trainer.text(merge.left) + " " + trainer.text(merge.right));
    if (merge.new_symbol) vocab.tokens.push_back(trainer.text(merge.result));
  }
  vocab.kinds.assign(vocab.tokens.size(), TokenKind::Normal);
  const size_t padding_end = static_cast<size_t>(vocab_size) - specials.size();
  for (size_t i = 0; vocab.tokens.size() < padding_end; ++i) {
    vocab.tokens.push_back(fmt::format("<|unused_{}|>", i));
    vocab.kinds.push_back(TokenKind::Unused);
  }
  const auto special_id = [&](size_t index) { return static_cast<TokenId>(padding_end + index); };
  for (const std::string& special : specials) {
    vocab.tokens.push_back(special);
    vocab.kinds.push_back(TokenKind::Control);
  }
  if (llama3) {
    vocab.bos = special_id(0);
    vocab.eos = special_id(1);
    vocab.eot = special_id(2);
    vocab.add_bos = true;
  } else if (harmony) {
    // A reply ends with <|return|> (or <|call|> for a tool call); <|end|> only closes a message
    // of the reply, such as its analysis.
    vocab.bos = special_id(0);
    vocab.eos = special_id(2);
    vocab.eot = special_id(2);
    vocab.padding = special_id(1);
    vocab.add_bos = false;
  } else {
    // Qwen2 (and ChatML generally) has no BOS in use; <|endoftext|> is its BOS/padding and
    // <|im_end|> ends a turn.
    vocab.bos = special_id(0);
    vocab.eos = special_id(2);
    vocab.eot = special_id(2);
    vocab.padding = special_id(0);
    vocab.add_bos = false;
  }
  return vocab;
}

}  // namespace

VocabData build_vocab(VocabStyle style, int32_t vocab_size) {
  return style == VocabStyle::SentencePiece ? build_sentence_piece(vocab_size) : build_byte_level(style, vocab_size);
}

}  // namespace orchard::model
