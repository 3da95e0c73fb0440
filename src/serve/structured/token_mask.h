#pragma once
// Which vocabulary tokens may come next under a grammar, and sampling restricted to them.
//
// The vocabulary is a trie of the tokens' decoded bytes, built once per tokenizer and laid out
// in preorder: the mask walks it once per step, feeding each trie byte to a copy of the
// recognizer's state, so tokens that share a prefix have it checked once, and a refused byte
// skips its whole subtree (outside strings nearly every subtree is skipped at its first byte).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "serve/structured/grammar.h"

namespace orchard::serve::structured {

class TokenTrie {
 public:
  // Tokens with no bytes (control, unused) are never allowed; end-of-generation tokens are
  // allowed exactly when the document is complete.
  explicit TokenTrie(const model::Tokenizer& tokenizer);

  int32_t vocab_size() const { return vocab_size_; }
  size_t max_token_bytes() const { return max_bytes_; }
  size_t nodes() const { return nodes_.size(); }

  // allowed[t] = 1 when token t may come next in `state`'s document, else 0 (allowed has
  // vocab_size entries). `scratch` holds max_token_bytes() + 1 recognizers of the same grammar.
  // Returns how many tokens are allowed.
  int32_t mask(const Recognizer& state, std::span<uint8_t> allowed, std::vector<Recognizer>& scratch) const;

 private:
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;     // bytes from the root
    int32_t end = 0;        // the first node after this one's subtree
    int32_t token_begin = 0, token_end = 0;  // into tokens_
  };
  int32_t vocab_size_;
  size_t max_bytes_ = 0;
  std::vector<Node> nodes_;  // preorder; 0 is the root
  std::vector<model::TokenId> tokens_;
  std::vector<model::TokenId> end_tokens_;
};

// What a request's sampling is held to: a grammar and the vocabulary's trie.
struct Constraint {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenTrie> vocab;
};

// One generation's place in its constraint.
class Matcher {
 public:
  Matcher(std::shared_ptr<const Constraint> constraint, const model::Tokenizer& tokenizer);

  // The logits with every token the grammar refuses at -infinity (a copy, valid until the
  // next call). Throws Error when the vocabulary has no token that can continue.
  const float* mask(const float* logits);
  // Advances past a sampled token; throws Error when the grammar refuses it.
  void accept(model::TokenId token);
  // The document is whole and nothing can follow it: generation ends here.
  bool finished() const { return state_.finished(); }
  bool complete() const { return state_.complete(); }

 private:
  std::shared_ptr<const Constraint> constraint_;
  const model::Tokenizer& tokenizer_;
  Recognizer state_;
  std::vector<Recognizer> scratch_;
  std::vector<uint8_t> allowed_;
  std::vector<float> logits_;
};

}  // namespace orchard::serve::structured
