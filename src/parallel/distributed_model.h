#pragma once
// A TokenModel whose layers live on several ranks. Every rank of the group makes the same eval()
// calls; each runs its shard, hidden states pass stage to stage, tensor ranks sum their partial
// products, and every rank ends up with the full logits of the last position, so every rank's
// sampler (same seed) picks the same token.
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

class DistributedModel : public model::TokenModel {
 public:
  // forward runs this rank's shard; layout says where the other shards are.
  DistributedModel(comm::Group& group, const Layout& layout, model::Forward& forward);

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override;
  const float* last_logits() const override { return logits_.data(); }
  // Prompts may be longer than one forward batch: eval cuts them into chunks itself, so that
  // pipeline stages work on different chunks at once.
  int32_t max_batch() const override { return forward_.n_ctx(); }
  int32_t n_ctx() const override { return forward_.n_ctx(); }
  int32_t vocab_size() const override { return forward_.config().vocab_size; }

 private:
  void gather_logits();

  comm::Group& group_;
  Layout layout_;
  model::Forward& forward_;
  int stage_, tensor_rank_;
  std::vector<float> hidden_in_;        // F32 [chunk, n_embd] from the previous stage
  std::vector<float> logits_;           // F32 [vocab]: the full logits, on every rank
  std::vector<size_t> vocab_bytes_;     // per tensor rank of the last stage: bytes of its logits
};

// Tags of the point-to-point messages between ranks.
enum : uint32_t { kTagHidden = 1, kTagLogits = 2, kTagPartial = 3 };

}  // namespace orchard::parallel
