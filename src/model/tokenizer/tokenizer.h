#pragma once
// Tokenizers read from GGUF metadata (tokenizer.ggml.*): SentencePiece-style ("llama": scores,
// byte fallback <0xNN>) and byte-level BPE ("gpt2": merges, with the pre-tokenizer splits named
// by tokenizer.ggml.pre: "llama-bpe"/"llama3", "qwen2", "gpt-4o", default gpt2).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/reader.h"

namespace orchard::model {

using TokenId = int32_t;

// tokenizer.ggml.token_type codes.
enum class TokenKind : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// A vocabulary as GGUF stores it (tokenizer.ggml.*), apart from the file format: what
// from_gguf reads and the vocab builder makes.
struct VocabData {
  std::string model = "llama";       // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre = "default";       // gpt2 only: "default"/"gpt2", "llama-bpe"/"llama3", "qwen2", "gpt-4o"
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: merge priority, higher first; empty = all 0
  std::vector<TokenKind> kinds;      // empty = all Normal
  std::vector<std::string> merges;   // gpt2: "left right", highest priority first
  TokenId bos = -1, eos = -1, unknown = -1, padding = -1, eot = -1;  // -1: none
  std::optional<bool> add_bos;       // unset: true for llama, false for gpt2
  bool add_eos = false;
  bool add_space_prefix = true;      // llama: prepend ▁ to the text (and after special tokens)
};

class Tokenizer {
 public:
  // Throws FormatError naming the missing/inconsistent key. Works on vocab-only files.
  static Tokenizer from_gguf(const gguf::Reader& file);
  // Throws FormatError ("[tokenizer] ...") when the data is inconsistent (sizes differ, an id is
  // out of range, a merge is not "left right", an unknown model or pre-tokenizer). A merge whose
  // result is not a token is tolerated: such a piece is emitted as its byte tokens.
  static Tokenizer from_vocab(VocabData vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. With parse_special, control/user-defined token texts in `text` (e.g.
  // "<|im_start|>") become their ids (leftmost, then longest match); otherwise they are
  // tokenized as plain text. Never produces Unused tokens. Invalid UTF-8 is tokenized
  // deterministically as its bytes.
  std::vector<TokenId> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
  // The bytes a token stands for (byte tokens give their byte, SentencePiece's ▁ becomes a
  // space, BPE's byte-to-unicode mapping is undone). Control tokens decode to "".
  std::string token_bytes(TokenId id) const;
  // Concatenated token_bytes; exact inverse of encode(text, false, false) for any text, valid
  // UTF-8 or not (for SentencePiece, the one leading space it adds is removed; a literal U+2581
  // in the text comes back as a space, as in SentencePiece itself). With parse_special, text
  // after a special token gets SentencePiece's ▁ prefix too, and control tokens decode to "".
  std::string decode(std::span<const TokenId> ids) const;

  int32_t vocab_size() const;
  const std::string& token_text(TokenId id) const;  // the vocab entry as stored
  TokenKind token_kind(TokenId id) const;
  TokenId bos() const;   // -1 when the model has none
  TokenId eos() const;
  bool adds_bos() const;  // tokenizer.ggml.add_bos_token (default: true for llama, false for gpt2)
  bool adds_eos() const;  // tokenizer.ggml.add_eos_token (default: false)
  bool is_end_of_generation(TokenId id) const;  // EOS, EOT, <|im_end|>, <|eot_id|>...
  std::string_view model_name() const;  // "llama" or "gpt2"
  std::string_view pre_tokenizer() const;

  // Turns a stream of token ids into text while holding back incomplete UTF-8 sequences, so
  // streamed output never shows half a character: everything push and finish return is valid
  // UTF-8, and for ids whose decode() is valid UTF-8 their concatenation equals decode(ids).
  // Bytes that can never complete a character come out as U+FFFD.
  class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    std::string push(TokenId id);  // complete UTF-8 text now available
    std::string finish();          // the rest; an incomplete trailing character becomes U+FFFD
   private:
    const Tokenizer& tokenizer_;
    std::string pending_;
    bool first_ = true;
  };

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchard::model
