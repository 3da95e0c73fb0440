#include "parallel/distributed_model.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace orchard::parallel {

TensorGroupSums::TensorGroupSums(comm::Group& group, std::vector<int> members)
    : group_(group), members_(std::move(members)), whole_group_(static_cast<int>(members_.size()) == group.size()) {}

void TensorGroupSums::all_reduce(float* data, int64_t n) {
  if (members_.size() == 1) return;
  if (whole_group_) {
    group_.all_reduce(data, static_cast<size_t>(n), comm::DType::F32);
    return;
  }
  // A tensor group inside a larger world (hybrid): the group's first rank adds the parts in
  // tensor-rank order and sends the sum back, so every member holds bit-identical results.
  const size_t bytes = sizeof(float) * static_cast<size_t>(n);
  const int leader = members_.front();
  if (group_.rank() == leader) {
    incoming_.resize(static_cast<size_t>(n));
    for (size_t m = 1; m < members_.size(); ++m) {
      group_.recv(incoming_.data(), bytes, members_[m], kTagPartial);
      for (int64_t i = 0; i < n; ++i) data[i] += incoming_[static_cast<size_t>(i)];
    }
    for (size_t m = 1; m < members_.size(); ++m) group_.send(data, bytes, members_[m], kTagPartial);
  } else {
    group_.send(data, bytes, leader, kTagPartial);
    group_.recv(data, bytes, leader, kTagPartial);
  }
}

DistributedPass::DistributedPass(comm::Group& group, const Layout& layout, model::Forward& forward)
    : group_(group),
      layout_(layout),
      forward_(forward),
      stage_(layout.stage_of(group.rank())),
      tensor_rank_(layout.tensor_rank_of(group.rank())),
      previous_(stage_ > 0 ? layout.rank_at(stage_ - 1, tensor_rank_) : -1),
      next_(stage_ + 1 < layout.pp ? layout.rank_at(stage_ + 1, tensor_rank_) : -1) {
  const model::ModelConfig& c = forward.config();
  ORCHARD_CHECK(layout.world() == group.size(), "layout of {} ranks on a group of {}", layout.world(), group.size());
  if (previous_ >= 0) hidden_in_.resize(static_cast<size_t>(forward.max_batch()) * c.n_embd);
  for (int t = 0; t < layout.tp; ++t) {
    model::Shard s = shard_for_rank(c, layout, layout.rank_at(layout.pp - 1, t));
    vocab_bytes_.push_back(sizeof(float) * static_cast<size_t>(s.n_vocab()));
  }
}

DistributedModel::DistributedModel(DistributedPass& pass, int32_t sequence)
    : pass_(pass), sequence_(sequence), logits_(static_cast<size_t>(pass.forward().config().vocab_size)) {}

int32_t pipeline_chunk(size_t positions, int stages, int32_t max_batch) {
  constexpr int32_t kChunksPerStage = 8, kMinChunk = 32;
  if (stages <= 1) return max_batch;
  const auto even = static_cast<int32_t>((positions + static_cast<size_t>(kChunksPerStage * stages) - 1) /
                                         static_cast<size_t>(kChunksPerStage * stages));
  return std::clamp(even, std::min(kMinChunk, max_batch), max_batch);
}

void DistributedPass::eval(int32_t sequence, std::span<const model::TokenId> tokens, int32_t pos, float* logits) {
  const int32_t d = forward_.config().n_embd;
  // Every stage cuts the same chunks (they all see the same token count).
  const int32_t chunk = pipeline_chunk(tokens.size(), layout_.pp, forward_.max_batch());
  for (size_t done = 0; done < tokens.size();) {
    const int32_t n = static_cast<int32_t>(std::min(tokens.size() - done, static_cast<size_t>(chunk)));
    const model::SequenceStep step{sequence, tokens.subspan(done, static_cast<size_t>(n)), pos + static_cast<int32_t>(done)};
    const size_t bytes = sizeof(float) * static_cast<size_t>(n) * d;
    if (previous_ >= 0) group_.recv(hidden_in_.data(), bytes, previous_, kTagHidden);
    forward_.run_batch(std::span(&step, 1), previous_ >= 0 ? hidden_in_.data() : nullptr);
    // The send returns once the next stage has the chunk, so this stage moves on to the next
    // chunk while that one computes: the stages overlap during prompt processing.
    if (next_ >= 0) group_.send(forward_.hidden(), bytes, next_, kTagHidden);
    done += static_cast<size_t>(n);
  }
  gather_logits(0, logits);
}

void DistributedPass::eval_batch(std::span<const model::SequenceStep> steps, std::span<float* const> logits) {
  ORCHARD_CHECK(logits.size() == steps.size(), "{} logits for {} steps", logits.size(), steps.size());
  size_t positions = 0;
  for (const model::SequenceStep& step : steps) positions += step.tokens.size();
  const size_t bytes = sizeof(float) * positions * static_cast<size_t>(forward_.config().n_embd);
  if (previous_ >= 0) {
    ORCHARD_CHECK(positions <= static_cast<size_t>(forward_.max_batch()), "a batch of {} positions, at most {}",
                  positions, forward_.max_batch());
    group_.recv(hidden_in_.data(), bytes, previous_, kTagHidden);
  }
  forward_.run_batch(steps, previous_ >= 0 ? hidden_in_.data() : nullptr);
  if (next_ >= 0) group_.send(forward_.hidden(), bytes, next_, kTagHidden);
  for (size_t i = 0; i < steps.size(); ++i) gather_logits(static_cast<int32_t>(i), logits[i]);
}

void DistributedPass::gather_logits(int32_t row, float* out) {
  const int last_stage = layout_.pp - 1;
  if (layout_.pp == 1) {
    if (layout_.tp == 1) {
      std::memcpy(out, forward_.logits(row), vocab_bytes_[0]);
    } else {
      group_.all_gatherv(forward_.logits(row), out, vocab_bytes_);
    }
    return;
  }
  // Pipeline: the last stage's tensor ranks send their slices to its first rank, which
  // broadcasts the whole vector to every rank.
  const int root = layout_.rank_at(last_stage, 0);
  if (stage_ == last_stage) {
    if (group_.rank() == root) {
      std::memcpy(out, forward_.logits(row), vocab_bytes_[0]);
      size_t offset = vocab_bytes_[0];
      for (int t = 1; t < layout_.tp; ++t) {
        group_.recv(reinterpret_cast<uint8_t*>(out) + offset, vocab_bytes_[static_cast<size_t>(t)],
                    layout_.rank_at(last_stage, t), kTagLogits);
        offset += vocab_bytes_[static_cast<size_t>(t)];
      }
    } else {
      group_.send(forward_.logits(row), vocab_bytes_[static_cast<size_t>(tensor_rank_)], root, kTagLogits);
    }
  }
  group_.broadcast(out, sizeof(float) * static_cast<size_t>(forward_.config().vocab_size), root);
}

}  // namespace orchard::parallel
