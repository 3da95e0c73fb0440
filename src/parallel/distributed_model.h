#pragma once
// A model whose layers live on several ranks (DistributedPass), and its slots as TokenModels.
#include <memory>
#include <span>
#include <vector>

#include "comm/group.h"
#include "model/forward.h"
#include "model/generate.h"
#include "parallel/layout.h"

namespace orchard::parallel {

// Partial sums of a tensor-parallel layer, combined across the ranks of one stage.
class TensorGroupSums : public model::PartialSums {
 public:
  // members: global ranks of this rank's tensor group, in tensor-rank order.
  TensorGroupSums(comm::Group& group, std::vector<int> members);
  void all_reduce(float* data, int64_t n) override;

 private:
  comm::Group& group_;
  std::vector<int> members_;
  bool whole_group_;            // the tensor group is the whole world: use the collective
  std::vector<float> incoming_; // grows once to the largest message
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
