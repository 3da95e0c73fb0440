#pragma once
// How a model is split over the ranks of a group, and which Shard each rank holds.
//
// Ranks are laid out stage-major: rank = stage * tp + t, so the tp ranks of one pipeline stage
// are neighbours (on one host or one fast link, when a hostfile lists them together).
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/shard.h"

namespace orchard::parallel {

// Expert: tensor groups as Tensor, except that each mixture-of-experts layer's experts are
// split whole (a rank holds some experts, all of their rows) instead of every expert's rows;
// with tp < world, pipeline stages of such groups. Hybrid: pipeline stages of groups of tp
// ranks, meant for pods of fast links joined by slower ones; a group splits a mixture of
// experts by experts (as Expert) and a dense model by tensor (Layout::splits_experts).
enum class Strategy { Single, Pipeline, Tensor, Hybrid, Expert };
// The most ranks of one expert group (model::Shard::expert_holders has a bit per member).
inline constexpr int kMaxExpertGroup = 64;
Strategy parse_strategy(const std::string& name);  // throws Error listing the known names
std::string strategy_name(Strategy strategy);

struct Layout {
  Strategy strategy = Strategy::Single;
  int tp = 1;  // ranks per tensor-parallel group
  int pp = 1;  // pipeline stages
  // Relative capacity of each stage (layers are split in proportion; default: equal) and of
  // each rank within a tensor group (heads and FFN rows are split in proportion; default:
  // equal). For machines of unequal memory or speed.
  std::vector<double> stage_weights;
  std::vector<double> tensor_weights;
  // Expert: how often each expert of each layer was chosen ([layer][expert], from
  // --expert-stats; a dense layer's row empty). Each rank then takes a contiguous run of a
  // layer's experts whose share of the layer's choices follows tensor_weights. Empty: runs of
  // equal numbers of experts (in proportion to tensor_weights).
  std::vector<std::vector<double>> expert_loads;
  // Expert: each MoE layer's this many most chosen experts (by expert_loads; without them, the
  // first of each member's run in turn) are held by every rank of the group besides their home
  // rank, and each row's choice of one goes to whichever holder has the fewest of the step's
  // choices (model::assign_experts): a decode step's choices spread evenly where they would
  // have fallen on one rank, for that many experts' memory more per rank.
  int32_t expert_replicas = 0;

  int world() const { return tp * pp; }
  // Whether each group holds whole experts of `config`'s mixture-of-experts layers: expert
  // splits, and hybrid ones of a mixture of experts (inside a pod a token's hidden state goes
  // only to the ranks holding its experts' outputs' owners; across pods one hidden state per
  // stage). False for a dense model.
  bool splits_experts(const model::ModelConfig& config) const {
    return config.n_expert > 0 && (strategy == Strategy::Expert || strategy == Strategy::Hybrid);
  }
  int stage_of(int rank) const { return rank / tp; }
  int tensor_rank_of(int rank) const { return rank % tp; }
  int rank_at(int stage, int tensor_rank) const { return stage * tp + tensor_rank; }

  // Checks the layout against the model and world; throws Error with the numbers when a split
  // is impossible (more stages than layers, more tensor ranks than KV... heads, ...).
  void validate(const model::ModelConfig& config, int world) const;
  // A layout for `strategy` over `world` ranks; hybrid needs tp (pp = world / tp), expert takes
  // it (0: one group of every rank).
  static Layout make(Strategy strategy, int world, int tp = 0);
};

// Splits `total` units into parts proportional to `weights` (equal when empty), each part at
// least `minimum` units when total allows; sums exactly to total.
std::vector<int64_t> proportional_split(int64_t total, size_t parts, const std::vector<double>& weights,
                                        int64_t minimum = 1);

// The slice of the model that `rank` holds.
//  - layers: contiguous runs per stage, in proportion to stage_weights;
//  - heads: when the KV heads divide among the tensor ranks, each rank takes whole KV heads and
//    their query heads; otherwise query heads are split and each rank also holds the KV heads
//    its query heads read, so a KV head may be computed on two ranks (duplicated work, no
//    extra communication);
//  - FFN rows: in units of 256 (the K-quant block) where each rank gets at least one unit, else
//    of 32 (every other block size), so column slices of ffn_down fall on block boundaries
//    where the file's types allow;
//  - vocabulary (output head rows): split evenly; logits are gathered after the head;
//  - experts (strategy expert): contiguous runs of each MoE layer's experts, whole, in
//    proportion to tensor_weights or, with expert_loads, to the measured choices.
model::Shard shard_for_rank(const model::ModelConfig& config, const Layout& layout, int rank);

}  // namespace orchard::parallel
