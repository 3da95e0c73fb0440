#pragma once
// Which slice of a model one rank holds. The forward pass is written against a Shard, so a
// single machine is just the shard that holds everything.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/config.h"

namespace orchard::model {

struct Shard {
  int32_t layer_begin = 0, layer_end = 0;      // pipeline: the run of layers held here
  int32_t head_begin = 0, head_end = 0;        // tensor: query heads held here
  int32_t kv_head_begin = 0, kv_head_end = 0;  // tensor: their key/value heads
  int32_t ff_begin = 0, ff_end = 0;            // tensor: FFN inner rows held here
  int32_t expert_ff_begin = 0, expert_ff_end = 0;  // tensor: rows of every expert's FFN held here
  int32_t vocab_begin = 0, vocab_end = 0;      // tensor: rows of the output head held here
  int32_t expert_begin = 0, expert_end = 0;    // expert: the experts of every MoE layer held here
  int32_t shared_ff_begin = 0, shared_ff_end = 0;  // tensor, expert: rows of the shared experts' FFN held here
  // expert, placed by measured popularity: [begin, end) per layer of the model, in place of
  // expert_begin..expert_end (empty: those in every layer).
  std::vector<std::pair<int32_t, int32_t>> layer_experts;
  // expert: who holds each expert of each layer of the model, the same table on every rank of
  // the expert group: bit m of expert_holders[layer][expert] is member m of the group (ranks in
  // tensor-rank order), expert_member this rank's m. An expert held by several members (a hot
  // expert replicated) is computed, for each row that chose it, by one of them: the one
  // assign_experts picks. Empty: the runs above say what is held and nothing is replicated.
  std::vector<std::vector<uint64_t>> expert_holders;
  int32_t expert_member = 0;
  bool has_embedding = true;                   // first pipeline stage: turns tokens into vectors
  bool has_output = true;                      // last pipeline stage: turns vectors into logits

  static Shard whole(const ModelConfig& config) {
    Shard s;
    s.layer_end = config.n_layers;
    s.head_end = config.n_heads;
    s.kv_head_end = config.n_kv_heads;
    s.ff_end = config.n_ff;
    s.expert_ff_end = config.n_ff_exp;
    s.vocab_end = config.vocab_size;
    s.expert_end = config.n_expert;
    s.shared_ff_end = config.n_ff_exp * config.n_expert_shared;
    return s;
  }
  int32_t n_layers() const { return layer_end - layer_begin; }
  int32_t n_heads() const { return head_end - head_begin; }
  int32_t n_kv_heads() const { return kv_head_end - kv_head_begin; }
  int32_t n_ff() const { return ff_end - ff_begin; }
  int32_t n_expert_ff() const { return expert_ff_end - expert_ff_begin; }
  int32_t n_shared_ff() const { return shared_ff_end - shared_ff_begin; }
  int32_t n_vocab() const { return vocab_end - vocab_begin; }
  // The experts of `layer` held here, [first, second).
  std::pair<int32_t, int32_t> experts_of(int32_t layer) const {
    return layer_experts.empty() ? std::pair{expert_begin, expert_end} : layer_experts.at(static_cast<size_t>(layer));
  }
  bool holds_expert(int32_t layer, int32_t expert) const {
    if (!expert_holders.empty())
      return (expert_holders.at(static_cast<size_t>(layer)).at(static_cast<size_t>(expert)) >> expert_member) & 1u;
    const auto [begin, end] = experts_of(layer);
    return expert >= begin && expert < end;
  }
  int32_t n_experts_held(int32_t layer, int32_t n_expert) const {
    int32_t held = 0;
    for (int32_t e = 0; e < n_expert; ++e) held += holds_expert(layer, e);
    return held;
  }
  bool holds_all_experts(const ModelConfig& config) const {
    for (int32_t l = 0; l < config.n_layers; ++l)
      if (n_experts_held(l, config.n_expert) != config.n_expert) return false;
    return true;
  }
  // True when this rank holds only part of each layer, so partial sums must be combined.
  bool splits_layers(const ModelConfig& config) const {
    return n_heads() != config.n_heads || n_ff() != config.n_ff || n_expert_ff() != config.n_ff_exp ||
           n_shared_ff() != config.n_ff_exp * config.n_expert_shared || !holds_all_experts(config);
  }
};

// Which member of an expert group computes each of a batch's expert choices at `layer` of an
// expert split (shard.expert_holders): chosen [n_rows, used] as the router chose them,
// members [n_rows, used] out. An expert with one holder is its holder's; one held by several
// goes to whichever of them has the fewest choices so far in this batch and layer, counted
// after every row's single-holder choices (ties from member layer mod group size on), so a
// step's choices spread as evenly as the holders allow. Deterministic in (shard's table,
// layer, chosen): every rank of the group computes the same members.
void assign_experts(const Shard& shard, int32_t layer, std::span<const int32_t> chosen, int32_t used,
                    std::span<int32_t> members);

// Where the forward pass meets the rest of the group. A single rank needs none of it; the
// parallel strategies implement it with collectives.
class PartialSums {
 public:
  virtual ~PartialSums() = default;
  // Sums `data` [n] over the ranks that share this layer (after attention's and the FFN's
  // output projections).
  virtual void all_reduce(float* data, int64_t n) = 0;
  // Sums a mixture-of-experts layer's output `data` [n_rows, width] over the same ranks.
  // `members` [n_rows, n_expert_used] says which member of the expert group computed each
  // choice (assign_experts; empty when the experts are not split whole), the same on every
  // rank, so a split can move only the rows each rank touched. By default it is the all-reduce.
  virtual void combine_experts(float* data, int32_t n_rows, int32_t width, std::span<const int32_t> members) {
    (void)members;
    all_reduce(data, static_cast<int64_t>(n_rows) * width);
  }
};

}  // namespace orchard::model
