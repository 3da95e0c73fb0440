#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace orchard::model {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // ▁ U+2581, SentencePiece's space

// Token texts that end generation besides the declared EOS/EOT ids: chat models mark the end of
// a turn with one of these while their metadata often names only the end-of-text token.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
};

// Control tokens that carry a reply's structure are decoded as their text (as llama.cpp keeps
// them), so that a server can tell a reply's parts apart: OpenAI's Harmony format (gpt-oss)
// marks messages and channels with them, Mistral and DeepSeek their tool calls (Mistral's v11
// tokenizers [TOOL_CALLS]NAME[ARGS]{...}), reasoning models their thinking.
constexpr std::string_view kShownControlTexts[] = {
    "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<think>", "</think>"};
// In Harmony, <|end|> closes a message of the reply (its analysis) rather than the reply, which
// <|return|> or <|call|> end.
constexpr std::string_view kHarmonyReplyEnd = "<|return|>";
constexpr std::string_view kHarmonyEndTexts[] = {"<|return|>", "<|call|>"};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Tokens that merging may produce: SentencePiece never produces control, unknown, unused or byte
// pieces by merging, and "never produces Unused tokens" is part of encode's contract.
bool mergeable(TokenKind kind) { return kind == TokenKind::Normal || kind == TokenKind::UserDefined; }

bool hides_text(TokenKind kind) { return kind == TokenKind::Control || kind == TokenKind::Unused; }

// "<0x41>" → 0x41; -1 when `text` is not a byte token's text.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// A symbol of the merge loops: a byte range of the text being tokenized, in a linked list.
struct Symbol {
  size_t start;
  size_t length;  // 0 once merged into its left neighbour
  int prev;
  int next;
};

// A candidate merge of symbols[left] and symbols[right]; `length` is their combined length when
// queued, so an entry made stale by another merge is recognised and skipped.
struct Bigram {
  double priority;  // larger first: SentencePiece's score, or minus BPE's merge rank
  int left;
  int right;
  size_t length;
  bool operator<(const Bigram& other) const {
    // std::priority_queue pops the largest; equal priorities go leftmost first.
    return priority < other.priority || (priority == other.priority && left > other.left);
  }
};

// One symbol per UTF-8 character; an invalid byte is a symbol of its own.
std::vector<Symbol> split_characters(std::string_view text) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = unicode::decode_utf8(text, pos).length;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, length, index - 1, index + 1});
    pos += length;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

// Repeatedly merges the adjacent pair with the highest priority (`priority_of` gives nullopt
// for pairs that may not merge) until none is left; returns the symbols in order.
template <typename PriorityOf>
std::vector<std::string_view> merge_symbols(std::string_view text, std::vector<Symbol> symbols, PriorityOf priority_of) {
  std::priority_queue<Bigram> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    if (const std::optional<double> priority = priority_of(text.substr(l.start, l.length), text.substr(r.start, r.length))) {
      queue.push({*priority, left, right, l.length + r.length});
    }
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.length == 0 || right.length == 0 || left.next != bigram.right || left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }
  std::vector<std::string_view> pieces;
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    pieces.push_back(text.substr(symbols[i].start, symbols[i].length));
  }
  return pieces;
}

}  // namespace

struct Tokenizer::Impl {
  VocabData vocab;
  bool sentence_piece = true;
  PreTokenizer pre = PreTokenizer::Gpt2;
  // Llama 3's reference tokenizer takes a pre-token that is itself a token as is, skipping the
  // merges (which can differ when the vocabulary holds tokens no merge sequence reaches).
  bool ignore_merges = false;
  StringMap<TokenId> ids;            // token text → first id with that text
  StringMap<int32_t> merge_ranks;    // "left right" → rank
  std::array<TokenId, 256> byte_ids{};  // SentencePiece <0xNN> / BPE's mapped byte; -1 if none
  std::vector<std::string> bytes;    // token_bytes, per id
  // Special tokens for parse_special, by first byte, longest first.
  std::array<std::vector<TokenId>, 256> specials_by_first_byte;
  std::vector<TokenId> end_of_generation;  // sorted

  TokenId find_mergeable(std::string_view text) const {
    const auto it = ids.find(text);
    return it != ids.end() && mergeable(vocab.kinds[it->second]) ? it->second : -1;
  }

  void push_byte_fallback(std::string_view piece, std::vector<TokenId>& out) const {
    for (char c : piece) {
      const TokenId id = byte_ids[static_cast<unsigned char>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (vocab.unknown >= 0) {
        out.push_back(vocab.unknown);
      }
    }
  }

  void encode_sentence_piece(std::string_view text, bool prefix_space, std::vector<TokenId>& out) const {
    std::string normalized;
    normalized.reserve(text.size() * 3 + 3);
    if (prefix_space) normalized += kSpaceMarker;
    for (char c : text) {
      if (c == ' ') {
        normalized += kSpaceMarker;
      } else {
        normalized += c;
      }
    }
    const auto priority_of = [&](std::string_view left, std::string_view right) -> std::optional<double> {
      // The pair is adjacent in `normalized`, so its concatenation is a view of it.
      const TokenId id = find_mergeable(std::string_view(left.data(), left.size() + right.size()));
      if (id < 0) return std::nullopt;
      return vocab.scores[id];
    };
    for (std::string_view piece : merge_symbols(normalized, split_characters(normalized), priority_of)) {
      const TokenId id = find_mergeable(piece);
      if (id >= 0) {
        out.push_back(id);
      } else {
        push_byte_fallback(piece, out);
      }
    }
  }

  void encode_bpe_word(std::string_view word, std::vector<TokenId>& out) const {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (char c : word) mapped += unicode::byte_to_unicode()[static_cast<unsigned char>(c)];
    if (ignore_merges) {
      if (const TokenId id = find_mergeable(mapped); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::string key;
    const auto priority_of = [&](std::string_view left, std::string_view right) -> std::optional<double> {
      key.assign(left);
      key += ' ';
      key += right;
      const auto it = merge_ranks.find(key);
      if (it == merge_ranks.end()) return std::nullopt;
      return -static_cast<double>(it->second);
    };
    // Each mapped character stands for one input byte, so this is one symbol per byte.
    for (std::string_view piece : merge_symbols(mapped, split_characters(mapped), priority_of)) {
      const TokenId id = find_mergeable(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // A merge whose result is not a token: fall back to the piece's bytes.
      for (size_t pos = 0; pos < piece.size();) {
        const unicode::Decoded d = unicode::decode_utf8(piece, pos);
        const int byte = unicode::unicode_to_byte(d.codepoint);
        if (byte >= 0 && byte_ids[byte] >= 0) {
          out.push_back(byte_ids[byte]);
        } else if (vocab.unknown >= 0) {
          out.push_back(vocab.unknown);
        }
        pos += d.length;
      }
    }
  }

  void encode_fragment(std::string_view text, bool after_special, std::vector<TokenId>& out) const {
    if (sentence_piece) {
      encode_sentence_piece(text, vocab.add_space_prefix && after_special, out);
      return;
    }
    for (std::string_view word : pre_tokenize(text, pre)) encode_bpe_word(word, out);
  }

  // The special token whose text starts `text` (longest first), or -1.
  TokenId match_special(std::string_view text) const {
    for (TokenId id : specials_by_first_byte[static_cast<unsigned char>(text.front())]) {
      if (text.starts_with(vocab.tokens[id])) return id;
    }
    return -1;
  }

  std::string make_token_bytes(TokenId id) const {
    const std::string& text = vocab.tokens[id];
    switch (vocab.kinds[id]) {
      case TokenKind::Control:
      case TokenKind::Unused:
        return {};
      case TokenKind::Unknown:
        return "\xEF\xBF\xBD";  // U+FFFD: the text it replaced is lost
      case TokenKind::UserDefined:
        return text;
      case TokenKind::Byte:
        if (const int byte = parse_byte_token(text); byte >= 0) return std::string(1, static_cast<char>(byte));
        break;
      case TokenKind::Normal:
        break;
    }
    std::string out;
    if (sentence_piece) {
      for (size_t pos = 0; pos < text.size();) {
        if (std::string_view(text).substr(pos).starts_with(kSpaceMarker)) {
          out += ' ';
          pos += kSpaceMarker.size();
        } else {
          out += text[pos++];
        }
      }
      return out;
    }
    for (size_t pos = 0; pos < text.size();) {
      const unicode::Decoded d = unicode::decode_utf8(text, pos);
      const int byte = d.valid ? unicode::unicode_to_byte(d.codepoint) : -1;
      if (byte >= 0) {
        out += static_cast<char>(byte);
      } else {
        out.append(text, pos, d.length);  // not from the byte mapping: keep as written
      }
      pos += d.length;
    }
    return out;
  }

  // Whether decoding drops the leading space of the first text token: SentencePiece adds one.
  bool strips_prefix_space() const { return sentence_piece && vocab.add_space_prefix; }

  void check_id(TokenId id) const {
    if (id < 0 || static_cast<size_t>(id) >= vocab.tokens.size()) {
      throw FormatError(error_message("tokenizer", "token id {} is outside the vocabulary of {} tokens", id, vocab.tokens.size()));
    }
  }
};

Tokenizer Tokenizer::from_vocab(VocabData vocab) {
  auto impl = std::make_unique<Impl>();
  const size_t n = vocab.tokens.size();
  if (vocab.model == "llama") {
    impl->sentence_piece = true;
  } else if (vocab.model == "gpt2") {
    impl->sentence_piece = false;
    const std::string& pre = vocab.pre;
    if (pre == "default" || pre == "gpt2" || pre == "gpt-2" || pre.empty()) {
      impl->pre = PreTokenizer::Gpt2;
    } else if (pre == "llama-bpe" || pre == "llama3") {
      impl->pre = PreTokenizer::Llama3;
      impl->ignore_merges = true;
    } else if (pre == "qwen2") {
      impl->pre = PreTokenizer::Qwen2;
    } else if (pre == "gpt-4o") {
      impl->pre = PreTokenizer::Gpt4o;
    } else {
      throw FormatError(error_message("tokenizer", "tokenizer.ggml.pre '{}' is not supported (supported: default, gpt2, llama-bpe, llama3, qwen2, gpt-4o)", pre));
    }
  } else {
    throw FormatError(error_message("tokenizer", "tokenizer.ggml.model '{}' is not supported (supported: llama, gpt2)", vocab.model));
  }
  if (n == 0) throw FormatError(error_message("tokenizer", "tokenizer.ggml.tokens is empty"));
  if (n > static_cast<size_t>(INT32_MAX)) throw FormatError(error_message("tokenizer", "{} tokens are more than token ids can address", n));
  if (vocab.scores.empty()) vocab.scores.assign(n, 0.0f);
  if (vocab.kinds.empty()) vocab.kinds.assign(n, TokenKind::Normal);
  if (vocab.scores.size() != n) {
    throw FormatError(error_message("tokenizer", "tokenizer.ggml.scores has {} entries for {} tokens", vocab.scores.size(), n));
  }
  if (vocab.kinds.size() != n) {
    throw FormatError(error_message("tokenizer", "tokenizer.ggml.token_type has {} entries for {} tokens", vocab.kinds.size(), n));
  }
  const bool harmony = std::find(vocab.tokens.begin(), vocab.tokens.end(), kHarmonyReplyEnd) != vocab.tokens.end() &&
                       std::find(vocab.tokens.begin(), vocab.tokens.end(), "<|channel|>") != vocab.tokens.end();
  for (size_t i = 0; i < n; ++i) {
    if (vocab.kinds[i] == TokenKind::Control &&
        std::find(std::begin(kShownControlTexts), std::end(kShownControlTexts), vocab.tokens[i]) != std::end(kShownControlTexts))
      vocab.kinds[i] = TokenKind::UserDefined;
  }
  const std::pair<const char*, TokenId> special_ids[] = {
      {"bos_token_id", vocab.bos}, {"eos_token_id", vocab.eos}, {"unknown_token_id", vocab.unknown},
      {"padding_token_id", vocab.padding}, {"eot_token_id", vocab.eot}};
  for (const auto& [key, id] : special_ids) {
    if (id < -1 || id >= static_cast<TokenId>(n)) {
      throw FormatError(error_message("tokenizer", "tokenizer.ggml.{} is {}, outside the vocabulary of {} tokens", key, id, n));
    }
  }
  if (!vocab.add_bos) vocab.add_bos = impl->sentence_piece;

  impl->ids.reserve(n);
  impl->byte_ids.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const TokenId id = static_cast<TokenId>(i);
    const std::string& text = vocab.tokens[i];
    impl->ids.emplace(text, id);
    if (impl->sentence_piece) {
      if (const int byte = parse_byte_token(text); byte >= 0 && impl->byte_ids[byte] < 0) impl->byte_ids[byte] = id;
    }
    const TokenKind kind = vocab.kinds[i];
    if ((kind == TokenKind::Control || kind == TokenKind::UserDefined) && !text.empty()) {
      impl->specials_by_first_byte[static_cast<unsigned char>(text[0])].push_back(id);
    }
    const bool end_text =
        harmony ? std::find(std::begin(kHarmonyEndTexts), std::end(kHarmonyEndTexts), text) != std::end(kHarmonyEndTexts)
                : std::find(std::begin(kEndOfGenerationTexts), std::end(kEndOfGenerationTexts), text) != std::end(kEndOfGenerationTexts);
    if (end_text || id == vocab.eos || id == vocab.eot) impl->end_of_generation.push_back(id);
  }
  if (!impl->sentence_piece) {
    for (int b = 0; b < 256; ++b) {
      const auto it = impl->ids.find(unicode::byte_to_unicode()[b]);
      if (it != impl->ids.end()) impl->byte_ids[b] = it->second;
    }
    impl->merge_ranks.reserve(vocab.merges.size());
    for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
      const std::string& merge = vocab.merges[rank];
      // The separator is the first space after the first character: the left part is never empty.
      if (merge.size() < 3 || merge.find(' ', 1) == std::string::npos) {
        throw FormatError(error_message("tokenizer", "tokenizer.ggml.merges[{}] '{}' is not 'left right'", rank, merge));
      }
      impl->merge_ranks.emplace(merge, static_cast<int32_t>(rank));
    }
  }
  for (auto& ids : impl->specials_by_first_byte) {
    std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return vocab.tokens[a].size() > vocab.tokens[b].size(); });
  }
  impl->vocab = std::move(vocab);
  impl->bytes.reserve(n);
  for (size_t i = 0; i < n; ++i) impl->bytes.push_back(impl->make_token_bytes(static_cast<TokenId>(i)));
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && impl_->vocab.bos >= 0) out.push_back(impl_->vocab.bos);
  // SentencePiece adds its space prefix at the start and after each special token, as the
  // reference implementation does.
  bool after_special = true;
  size_t start = 0;
  const auto flush = [&](size_t end) {
    if (end > start) {
      impl_->encode_fragment(text.substr(start, end - start), after_special, out);
      after_special = false;
    }
  };
  if (parse_special) {
    for (size_t pos = 0; pos < text.size();) {
      const TokenId id = impl_->match_special(text.substr(pos));
      if (id < 0) {
        ++pos;
        continue;
      }
      flush(pos);
      out.push_back(id);
      after_special = true;
      pos += impl_->vocab.tokens[id].size();
      start = pos;
    }
  }
  flush(text.size());
  return out;
}

std::string Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id);
  return impl_->bytes[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  bool first = true;
  for (TokenId id : ids) {
    impl_->check_id(id);
    std::string_view piece = impl_->bytes[id];
    if (first && !hides_text(impl_->vocab.kinds[id])) {
      first = false;
      if (impl_->strips_prefix_space() && piece.starts_with(' ')) piece.remove_prefix(1);
    }
    out += piece;
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }

const std::string& Tokenizer::token_text(TokenId id) const {
  impl_->check_id(id);
  return impl_->vocab.tokens[id];
}

TokenKind Tokenizer::token_kind(TokenId id) const {
  impl_->check_id(id);
  return impl_->vocab.kinds[id];
}

TokenId Tokenizer::bos() const { return impl_->vocab.bos; }
TokenId Tokenizer::eos() const { return impl_->vocab.eos; }
bool Tokenizer::adds_bos() const { return *impl_->vocab.add_bos; }
bool Tokenizer::adds_eos() const { return impl_->vocab.add_eos; }

bool Tokenizer::is_end_of_generation(TokenId id) const {
  return std::binary_search(impl_->end_of_generation.begin(), impl_->end_of_generation.end(), id);
}

std::string_view Tokenizer::model_name() const { return impl_->vocab.model; }
std::string_view Tokenizer::pre_tokenizer() const { return impl_->vocab.pre; }

std::string Tokenizer::StreamDecoder::push(TokenId id) {
  const Impl& impl = *tokenizer_.impl_;
  impl.check_id(id);
  std::string_view piece = impl.bytes[id];
  if (first_ && !hides_text(impl.vocab.kinds[id])) {
    first_ = false;
    if (impl.strips_prefix_space() && piece.starts_with(' ')) piece.remove_prefix(1);
  }
  pending_ += piece;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const unicode::Decoded d = unicode::decode_utf8(pending_, pos);
    if (d.valid) {
      out.append(pending_, pos, d.length);
      pos += d.length;
      continue;
    }
    // Hold back a lead byte followed only by continuation bytes, fewer than it announces: the
    // next token may complete it.
    const auto lead = static_cast<unsigned char>(pending_[pos]);
    const size_t expected = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    const size_t available = pending_.size() - pos;
    bool incomplete = expected > available;
    for (size_t k = 1; incomplete && k < available; ++k) {
      incomplete = (static_cast<unsigned char>(pending_[pos + k]) & 0xC0) == 0x80;
    }
    if (incomplete) break;
    unicode::append_utf8(out, unicode::kReplacement);
    ++pos;
  }
  pending_.erase(0, pos);
  return out;
}

std::string Tokenizer::StreamDecoder::finish() {
  std::string out;
  // Whatever is held back could not complete: each byte becomes U+FFFD, like any invalid byte.
  for (size_t i = 0; i < pending_.size(); ++i) unicode::append_utf8(out, unicode::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace orchard::model
