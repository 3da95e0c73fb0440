#include "serve/prompt_cache.h"

#include <algorithm>

#include "core/error.h"

namespace orchard::serve {
namespace {

int32_t common_prefix(std::span<const model::TokenId> a, std::span<const model::TokenId> b) {
  const auto n = std::min(a.size(), b.size());
  return static_cast<int32_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first - a.begin());
}

}  // namespace

PromptCache::PromptCache(int32_t n_slots) : slots_(static_cast<size_t>(n_slots)) {}

PromptCache::Choice PromptCache::choose(std::span<const model::TokenId> prompt, std::span<const uint8_t> busy,
                                        bool allow_copy) const {
  ORCHARD_CHECK(busy.size() == slots_.size(), "{} busy flags for {} slots", busy.size(), slots_.size());
  // The last prompt position is evaluated whatever the cache holds: its logits are the answer's start.
  const auto limit = static_cast<int32_t>(prompt.size()) - 1;
  Choice choice;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (busy[i]) continue;
    const int32_t reused = std::min(limit, common_prefix(prompt, slots_[i].tokens));
    const bool better = choice.slot < 0 || reused > choice.reused ||
                        (reused == choice.reused && slots_[i].last_used < slots_[static_cast<size_t>(choice.slot)].last_used);
    if (better) choice = {static_cast<int32_t>(i), reused, -1};
  }
  if (choice.slot < 0 || !allow_copy) return choice;
  int32_t best_busy = -1, best = choice.reused + kMinCopy - 1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!busy[i]) continue;
    const int32_t reused = std::min(limit, common_prefix(prompt, slots_[i].tokens));
    if (reused > best) best = reused, best_busy = static_cast<int32_t>(i);
  }
  if (best_busy >= 0) choice = {choice.slot, best, best_busy};
  return choice;
}

void PromptCache::record(int32_t slot, std::span<const model::TokenId> tokens, int32_t pos) {
  std::vector<model::TokenId>& held = slots_.at(static_cast<size_t>(slot)).tokens;
  // A position before pos that was never recorded is unknown: nothing from there on is kept.
  if (static_cast<size_t>(pos) > held.size()) {
    held.clear();
    return;
  }
  held.resize(static_cast<size_t>(pos));
  held.insert(held.end(), tokens.begin(), tokens.end());
}

void PromptCache::keep(int32_t slot, int32_t n) {
  std::vector<model::TokenId>& held = slots_.at(static_cast<size_t>(slot)).tokens;
  if (static_cast<size_t>(n) < held.size()) held.resize(static_cast<size_t>(n));
}

void PromptCache::copied(int32_t from, int32_t to, int32_t n) {
  const std::vector<model::TokenId>& source = slots_.at(static_cast<size_t>(from)).tokens;
  ORCHARD_CHECK(n >= 0 && static_cast<size_t>(n) <= source.size(), "copying {} positions of {} known", n, source.size());
  slots_.at(static_cast<size_t>(to)).tokens.assign(source.begin(), source.begin() + n);
  touch(to);
}

void PromptCache::touch(int32_t slot) { slots_.at(static_cast<size_t>(slot)).last_used = ++clock_; }

}  // namespace orchard::serve
