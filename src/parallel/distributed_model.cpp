#include "parallel/distributed_model.h"

#include <algorithm>
#include <cstring>

#include "comm/algorithms/collectives.h"
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

ExpertCombine parse_expert_combine(const std::string& name) {
  if (name == "auto") return ExpertCombine::Auto;
  if (name == "all-reduce") return ExpertCombine::AllReduce;
  if (name == "all-to-all") return ExpertCombine::AllToAll;
  throw Error(error_message("parallel", "unknown expert combine '{}'; known: auto, all-reduce, all-to-all", name));
}

ExpertCombineBytes expert_combine_bytes(std::span<const int64_t> touched, int64_t n_rows, int64_t row_bytes,
                                        int world) {
  ORCHARD_CHECK(touched.size() == static_cast<size_t>(world) * static_cast<size_t>(world),
                "{} touched counts for {} ranks", touched.size(), world);
  ExpertCombineBytes out;
  if (world < 2) return out;
  const auto n = static_cast<uint64_t>(world), vector = static_cast<uint64_t>(n_rows) * static_cast<uint64_t>(row_bytes);
  out.all_reduce_direct = vector * (n - 1) <= comm::kDirectAllReduceBytes;
  out.all_reduce = out.all_reduce_direct ? n * (n - 1) * vector : 2 * (n - 1) * vector;
  uint64_t scattered = 0;
  for (int r = 0; r < world; ++r)
    for (int o = 0; o < world; ++o)
      if (r != o) scattered += static_cast<uint64_t>(touched[static_cast<size_t>(r * world + o)]);
  out.all_to_all = scattered * static_cast<uint64_t>(row_bytes) + (n - 1) * vector;
  return out;
}

ExpertCombine choose_expert_combine(const ExpertCombineBytes& bytes) {
  return !bytes.all_reduce_direct && bytes.all_to_all < bytes.all_reduce ? ExpertCombine::AllToAll
                                                                          : ExpertCombine::AllReduce;
}

void TensorGroupSums::set_experts(bool shared_experts, ExpertCombine mode) {
  expert_split_ = true;
  shared_experts_ = shared_experts;
  mode_ = mode;
}

void TensorGroupSums::combine_experts(float* data, int32_t n_rows, int32_t width, std::span<const int32_t> members) {
  if (members_.size() == 1) return;
  // Inside a hybrid's stage the group is not the world's collective: its leader sums.
  if (!expert_split_ || members.empty() || !whole_group_)
    return all_reduce(data, static_cast<int64_t>(n_rows) * width);
  const int world = group_.size(), rank = group_.rank();
  const auto rows = static_cast<size_t>(n_rows), used = members.size() / rows;
  const size_t row_floats = static_cast<size_t>(width);
  row_begin_.assign(1, 0);
  for (size_t count : comm::even_split(rows, world)) row_begin_.push_back(row_begin_.back() + count);
  // Which rows each rank computed a choice of: the same assignment, so the same answer on
  // every rank.
  touched_.assign(static_cast<size_t>(world) * rows, shared_experts_ ? 1 : 0);
  touched_counts_.assign(static_cast<size_t>(world) * static_cast<size_t>(world), 0);
  if (!shared_experts_)
    for (size_t t = 0; t < rows; ++t)
      for (size_t i = 0; i < used; ++i) touched_[static_cast<size_t>(members[t * used + i]) * rows + t] = 1;
  for (int p = 0; p < world; ++p) {
    const uint8_t* mine = &touched_[static_cast<size_t>(p) * rows];
    for (int o = 0; o < world; ++o)
      for (size_t t = row_begin_[static_cast<size_t>(o)]; t < row_begin_[static_cast<size_t>(o) + 1]; ++t)
        touched_counts_[static_cast<size_t>(p * world + o)] += mine[t];
  }
  ExpertCombine way = mode_;
  if (way == ExpertCombine::Auto)
    way = choose_expert_combine(expert_combine_bytes(touched_counts_, n_rows, sizeof(float) * width, world));
  if (way == ExpertCombine::AllReduce) {
    ++combines_[0];
    group_.all_reduce(data, rows * row_floats, comm::DType::F32);
    return;
  }
  ++combines_[1];
  // To each owner the rows of its run that this rank's experts touched, in row order; from
  // each peer the rows of this rank's run that its experts touched.
  const size_t row_bytes = sizeof(float) * row_floats;
  send_bytes_.assign(static_cast<size_t>(world), 0);
  recv_bytes_.assign(static_cast<size_t>(world), 0);
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    send_bytes_[static_cast<size_t>(p)] = static_cast<size_t>(touched_counts_[static_cast<size_t>(rank * world + p)]) * row_bytes;
    recv_bytes_[static_cast<size_t>(p)] = static_cast<size_t>(touched_counts_[static_cast<size_t>(p * world + rank)]) * row_bytes;
  }
  size_t out_rows = 0, in_rows = 0;
  for (int p = 0; p < world; ++p) {
    out_rows += send_bytes_[static_cast<size_t>(p)] / row_bytes;
    in_rows += recv_bytes_[static_cast<size_t>(p)] / row_bytes;
  }
  if (outgoing_.size() < out_rows * row_floats) outgoing_.resize(out_rows * row_floats);
  if (incoming_.size() < in_rows * row_floats) incoming_.resize(in_rows * row_floats);
  const uint8_t* mine = &touched_[static_cast<size_t>(rank) * rows];
  float* out = outgoing_.data();
  for (int o = 0; o < world; ++o) {
    if (o == rank) continue;
    for (size_t t = row_begin_[static_cast<size_t>(o)]; t < row_begin_[static_cast<size_t>(o) + 1]; ++t)
      if (mine[t]) {
        std::memcpy(out, data + t * row_floats, row_bytes);
        out += row_floats;
      }
  }
  group_.all_to_allv(outgoing_.data(), send_bytes_, incoming_.data(), recv_bytes_);
  // The owner adds its peers' parts in rank order; the all-gather then hands every rank the
  // owner's sums, so all ranks hold bit-identical rows (their routers must agree next layer).
  const size_t first = row_begin_[static_cast<size_t>(rank)], last = row_begin_[static_cast<size_t>(rank) + 1];
  const float* in = incoming_.data();
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    const uint8_t* theirs = &touched_[static_cast<size_t>(p) * rows];
    for (size_t t = first; t < last; ++t)
      if (theirs[t]) {
        float* row = data + t * row_floats;
        for (size_t j = 0; j < row_floats; ++j) row[j] += in[j];
        in += row_floats;
      }
  }
  gather_bytes_.assign(static_cast<size_t>(world), 0);
  for (int o = 0; o < world; ++o)
    gather_bytes_[static_cast<size_t>(o)] = (row_begin_[static_cast<size_t>(o) + 1] - row_begin_[static_cast<size_t>(o)]) * row_bytes;
  group_.all_gatherv(data + first * row_floats, data, gather_bytes_);
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
    // Only the last chunk's logits are gathered: the last stage skips the head for the others.
    const bool last = done + static_cast<size_t>(n) == tokens.size();
    forward_.run_batch(std::span(&step, 1), previous_ >= 0 ? hidden_in_.data() : nullptr, last);
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
