#pragma once
// A model whose layers live on several ranks (DistributedPass), and its slots as TokenModels.
#include <array>
#include <memory>
#include <string>
#include <span>
#include <vector>

#include "comm/group.h"
#include "model/forward.h"
#include "model/generate.h"
#include "parallel/layout.h"

namespace orchard::parallel {

// How an expert split combines a mixture-of-experts layer's partial outputs. Every rank holds
// every row's input (attention's all-reduce left the whole hidden state on each), so only the
// outputs move:
//  - AllReduce: each rank's [rows, n_embd] partial sums (zero where none of its experts was
//    chosen), summed everywhere (comm's direct exchange, or its ring reduce-scatter/all-gather);
//  - AllToAll: the rows are owned in even runs by the ranks; each rank sends each owner only
//    the owner's rows its experts touched (an all-to-all; no index travels, every rank knows
//    the routing), owners add them to their own, and an all-gather gives every rank every row;
//  - Auto: per layer and step, whichever moves fewer bytes (choose_expert_combine).
enum class ExpertCombine { Auto, AllReduce, AllToAll };
ExpertCombine parse_expert_combine(const std::string& name);  // auto | all-reduce | all-to-all

// Bytes each way moves over all links together for `n_rows` rows of `row_bytes` on `world`
// ranks; touched[r * world + o]: how many of owner o's rows (comm::even_split of the rows) have
// a chosen expert on rank r (r == o is not sent and not counted).
struct ExpertCombineBytes {
  uint64_t all_reduce = 0;  // as comm's all_reduce moves it: world (world - 1) x the vector
                            // exchanged directly, 2 (world - 1) x it by the ring
  bool all_reduce_direct = false;  // under comm::kDirectAllReduceBytes: one message latency
  uint64_t all_to_all = 0;  // the touched rows to their owners, then (world - 1) x the vector gathered
};
ExpertCombineBytes expert_combine_bytes(std::span<const int64_t> touched, int64_t n_rows, int64_t row_bytes,
                                        int world);
// AllToAll when it moves fewer bytes than the all-reduce's ring. Below the direct threshold
// (a decode step's one row, a small batch) the all-reduce is one message latency and the
// all-to-all two, and latency, not bytes, sets the time: there the all-reduce stays.
ExpertCombine choose_expert_combine(const ExpertCombineBytes& bytes);

// Partial sums of a tensor-parallel layer, combined across the ranks of one stage.
class TensorGroupSums : public model::PartialSums {
 public:
  // members: global ranks of this rank's tensor group, in tensor-rank order.
  TensorGroupSums(comm::Group& group, std::vector<int> members);
  void all_reduce(float* data, int64_t n) override;
  // An expert split: members computed the choices combine_experts is told of (they are the
  // group's members in order, as model::assign_experts numbers them); shared_experts: every
  // rank adds a share of the shared experts to every row. Without this (or inside a hybrid's
  // group) mixture-of-experts layers combine by all_reduce.
  void set_experts(bool shared_experts, ExpertCombine mode);
  void combine_experts(float* data, int32_t n_rows, int32_t width, std::span<const int32_t> members) override;
  // How many mixture-of-experts combines took each way so far: [all-reduce, all-to-all].
  std::array<int64_t, 2> expert_combines() const { return combines_; }

 private:
  comm::Group& group_;
  std::vector<int> members_;
  bool whole_group_;            // the tensor group is the whole world: use the collective
  std::vector<float> incoming_; // grows once to the largest message
  // Expert split, and the all-to-all's buffers (grow once).
  bool expert_split_ = false;
  bool shared_experts_ = false;
  ExpertCombine mode_ = ExpertCombine::Auto;
  std::array<int64_t, 2> combines_{};
  std::vector<uint8_t> touched_;         // [member, row]: the row has a chosen expert there
  std::vector<int64_t> touched_counts_;  // [member, owner]
  std::vector<size_t> row_begin_;        // first row of each owner, and n_rows
  std::vector<size_t> send_bytes_, recv_bytes_, gather_bytes_;
  std::vector<float> outgoing_;
};

// Positions per pipeline chunk for a prompt of `positions` over `stages`: the first chunk runs
// on stage 0 alone and the last on the last stage alone, so with K chunks the stages idle
// (P - 1) / (K + P - 1) of the time; eight chunks per stage keep that near 10% while chunks
// stay large enough for efficient matrix products (never over max_batch, at least 32).
int32_t pipeline_chunk(size_t positions, int stages, int32_t max_batch);

// This rank's passes of a split model: one Forward holds every slot's sequence, each with its
// own KV cache. Every rank of the group makes the same calls; each runs its shard, hidden
// states pass stage to stage, tensor ranks sum their partial products, and every rank ends up
// with the full logits of each step's last position, so every rank's sampler (same seed) picks
// the same token.
class DistributedPass {
 public:
  // forward runs this rank's shard; layout says where the other shards are.
  DistributedPass(comm::Group& group, const Layout& layout, model::Forward& forward);

  // One sequence's tokens at positions pos..; prompts longer than one forward batch are cut
  // into chunks, so that pipeline stages work on different chunks at once. logits: F32 [vocab].
  void eval(int32_t sequence, std::span<const model::TokenId> tokens, int32_t pos, float* logits);
  // A step of several sequences in one pass through every stage: each matrix product reads this
  // rank's weights once for all of them. Steps follow Forward::run_batch's contract;
  // logits[i]: F32 [vocab] for step i.
  void eval_batch(std::span<const model::SequenceStep> steps, std::span<float* const> logits);

  model::Forward& forward() const { return forward_; }

 private:
  // Logits row `row` of the last pass into out [vocab] on every rank.
  void gather_logits(int32_t row, float* out);

  comm::Group& group_;
  Layout layout_;
  model::Forward& forward_;
  int stage_, tensor_rank_;
  int previous_, next_;                 // ranks of the neighbouring stages (-1: none)
  std::vector<float> hidden_in_;        // F32 [max_batch, n_embd] from the previous stage
  std::vector<size_t> vocab_bytes_;     // per tensor rank of the last stage: bytes of its logits
};

// One slot of a split model: a TokenModel over one sequence of a DistributedPass.
class DistributedModel : public model::TokenModel {
 public:
  DistributedModel(DistributedPass& pass, int32_t sequence);

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override { pass_.eval(sequence_, tokens, pos, logits_.data()); }
  const float* last_logits() const override { return logits_.data(); }
  // Prompts may be longer than one forward batch: the pass cuts them into chunks itself.
  int32_t max_batch() const override { return pass_.forward().n_ctx(); }
  int32_t n_ctx() const override { return pass_.forward().n_ctx(); }
  int32_t vocab_size() const override { return pass_.forward().config().vocab_size; }
  int32_t resumable(int32_t pos) const override { return pass_.forward().resumable(sequence_, pos); }
  float* logits() { return logits_.data(); }  // where a batched pass leaves this slot's

 private:
  DistributedPass& pass_;
  int32_t sequence_;
  std::vector<float> logits_;  // F32 [vocab]: the full logits, on every rank
};

// Tags of the point-to-point messages between ranks.
enum : uint32_t { kTagHidden = 1, kTagLogits = 2, kTagPartial = 3 };

}  // namespace orchard::parallel
