#pragma once
// Prompt caching across requests, by slot. A slot's KV cache outlives its request: each slot
// remembers the tokens whose keys and values its cache holds (positions 0..n), so a new request
// goes to the free slot whose tokens share the longest prefix with its prompt and evaluates only
// the rest. Among free slots that match equally (none, typically), the least recently used is
// taken, so the caches of recent conversations stay longest: the memory budget is the slots'
// caches (--parallel × -c positions), its eviction LRU. When a busy slot holds a longer prefix
// than any free one (requests sharing a system prompt, arriving together), the engine may copy
// that prefix into the free slot first (Engine::copy_prefix).
//
// Reuse stops one position short of the whole prompt: the last prompt position is always
// evaluated, since its logits give the first token.
#include <cstdint>
#include <span>
#include <vector>

#include "model/forward.h"

namespace orchard::serve {

class PromptCache {
 public:
  explicit PromptCache(int32_t n_slots);

  struct Choice {
    int32_t slot = -1;       // a free slot; -1 when none is free
    int32_t reused = 0;      // prompt positions whose keys and values are there (after the copy)
    int32_t copy_from = -1;  // a busy slot whose first `reused` positions to copy first; -1: none
  };
  // Where `prompt` should go among the slots not busy (busy[i] != 0, [n_slots]); with
  // `allow_copy`, a busy slot holding a longer prefix (by at least kMinCopy positions) is named
  // to copy from.
  Choice choose(std::span<const model::TokenId> prompt, std::span<const uint8_t> busy, bool allow_copy) const;
  // The slot's cache now holds `tokens` at [pos, pos + tokens.size()); what it held from pos on is gone.
  void record(int32_t slot, std::span<const model::TokenId> tokens, int32_t pos);
  // Only positions [0, n) of the slot are known (a request takes it from n on, or an eval that
  // failed left positions from n on unknown).
  void keep(int32_t slot, int32_t n);
  // Slot `to` holds slot `from`'s first n tokens (after Engine::copy_prefix), and is in use now.
  void copied(int32_t from, int32_t to, int32_t n);
  // The slot was taken by a request: the most recently used.
  void touch(int32_t slot);
  std::span<const model::TokenId> tokens(int32_t slot) const { return slots_.at(static_cast<size_t>(slot)).tokens; }

  // A copy moves memory of every layer for each position; it pays for itself many times over
  // from a few positions, but a handful is not worth a pass over every layer's rows.
  static constexpr int32_t kMinCopy = 16;

 private:
  struct Slot {
    std::vector<model::TokenId> tokens;  // what positions 0.. hold
    uint64_t last_used = 0;
  };
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

}  // namespace orchard::serve
