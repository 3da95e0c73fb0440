#include "serve/structured/token_mask.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"

namespace orchard::serve::structured {

TokenTrie::TokenTrie(const model::Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  std::vector<std::pair<std::string, model::TokenId>> entries;
  for (model::TokenId id = 0; id < vocab_size_; ++id) {
    if (tokenizer.is_end_of_generation(id)) {
      end_tokens_.push_back(id);
      continue;
    }
    std::string bytes = tokenizer.token_bytes(id);
    if (bytes.empty() || bytes.size() > std::numeric_limits<uint16_t>::max()) continue;
    max_bytes_ = std::max(max_bytes_, bytes.size());
    entries.emplace_back(std::move(bytes), id);
  }
  std::sort(entries.begin(), entries.end());
  // Sorted entries give the trie in preorder: each entry shares a prefix with the previous one
  // (the path kept in `path`) and adds nodes for the rest.
  nodes_.push_back(Node{});
  std::vector<int32_t> path{0};
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      nodes_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
  };
  const std::string* previous = nullptr;
  for (const auto& [bytes, id] : entries) {
    size_t common = 0;
    if (previous != nullptr)
      while (common < std::min(bytes.size(), previous->size()) && bytes[common] == (*previous)[common]) ++common;
    close_to(common);
    for (size_t i = common; i < bytes.size(); ++i) {
      Node n;
      n.byte = static_cast<uint8_t>(bytes[i]);
      n.depth = static_cast<uint16_t>(i + 1);
      n.token_begin = n.token_end = static_cast<int32_t>(tokens_.size());
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
    }
    tokens_.push_back(id);
    nodes_[static_cast<size_t>(path.back())].token_end = static_cast<int32_t>(tokens_.size());
    previous = &bytes;
  }
  close_to(0);
  nodes_[0].end = static_cast<int32_t>(nodes_.size());
}

int32_t TokenTrie::mask(const Recognizer& state, std::span<uint8_t> allowed, std::vector<Recognizer>& scratch) const {
  ORCHARD_CHECK(allowed.size() == static_cast<size_t>(vocab_size_), "the mask holds {} entries for {} tokens", allowed.size(), vocab_size_);
  ORCHARD_CHECK(scratch.size() > max_bytes_, "the scratch holds {} states for tokens of {} bytes", scratch.size(), max_bytes_);
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  int32_t count = 0;
  scratch[0] = state;
  const auto n = static_cast<int32_t>(nodes_.size());
  for (int32_t i = 1; i < n;) {
    const Node& node = nodes_[static_cast<size_t>(i)];
    Recognizer& here = scratch[node.depth];
    here = scratch[node.depth - 1u];
    if (!here.feed(node.byte)) {
      i = node.end;
      continue;
    }
    for (int32_t t = node.token_begin; t < node.token_end; ++t) allowed[static_cast<size_t>(tokens_[static_cast<size_t>(t)])] = 1;
    count += node.token_end - node.token_begin;
    ++i;
  }
  if (state.complete()) {
    for (model::TokenId t : end_tokens_) allowed[static_cast<size_t>(t)] = 1;
    count += static_cast<int32_t>(end_tokens_.size());
  }
  return count;
}

Matcher::Matcher(std::shared_ptr<const Constraint> constraint, const model::Tokenizer& tokenizer)
    : constraint_(std::move(constraint)),
      tokenizer_(tokenizer),
      state_(*constraint_->grammar),
      scratch_(constraint_->vocab->max_token_bytes() + 1, state_),
      allowed_(static_cast<size_t>(constraint_->vocab->vocab_size())),
      logits_(static_cast<size_t>(constraint_->vocab->vocab_size())) {
  ORCHARD_CHECK(constraint_->vocab->vocab_size() == tokenizer.vocab_size(), "the constraint's vocabulary is another tokenizer's");
}

const float* Matcher::mask(const float* logits) {
  if (constraint_->vocab->mask(state_, allowed_, scratch_) == 0)
    throw Error(error_message("structured", "no token of the vocabulary can continue the constrained output"));
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits_.size(); ++i) logits_[i] = allowed_[i] ? logits[i] : kRefused;
  return logits_.data();
}

void Matcher::accept(model::TokenId token) {
  if (tokenizer_.is_end_of_generation(token)) {
    if (!state_.complete()) throw Error(error_message("structured", "generation ended before the constrained output was whole"));
    return;
  }
  if (!state_.feed(tokenizer_.token_bytes(token)))
    throw Error(error_message("structured", "token {} ('{}') does not continue the constrained output", token, tokenizer_.token_bytes(token)));
}

}  // namespace orchard::serve::structured
