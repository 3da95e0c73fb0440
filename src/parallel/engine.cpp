#include "parallel/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/memory_info.h"
#include "parallel/weight_distribution.h"

namespace orchard::parallel {
namespace {

// Unless the user gave stage weights, pipeline stages get layers in proportion to the free
// memory of their ranks (all ranks agree: the figures are gathered from everyone).
Layout with_memory_weights(comm::Group& group, Layout layout) {
  if (!layout.stage_weights.empty() || layout.pp == 1) return layout;
  std::vector<double> free(static_cast<size_t>(group.size()));
  const double mine = static_cast<double>(core::available_memory_bytes());
  group.all_gather(&mine, free.data(), sizeof mine);
  std::vector<double> stages(static_cast<size_t>(layout.pp), 0.0);
  for (int r = 0; r < group.size(); ++r) stages[static_cast<size_t>(layout.stage_of(r))] += free[static_cast<size_t>(r)];
  for (double s : stages)
    if (!(s > 0)) return layout;  // a rank could not tell: split evenly
  // Ranks on one host see the same free memory; differences under 10% are noise, not capacity.
  const auto [lo, hi] = std::minmax_element(stages.begin(), stages.end());
  if (*hi < 1.1 * *lo) return layout;
  layout.stage_weights = stages;
  return layout;
}

// An expert split's placement must be the same on every rank (it decides which bytes each is
// sent and which experts each sums): rank 0's expert statistics are everyone's.
Layout with_rank0_expert_loads(comm::Group& group, Layout layout) {
  if (layout.strategy != Strategy::Expert && layout.strategy != Strategy::Hybrid) return layout;
  uint64_t shape[2] = {layout.expert_loads.size(), layout.expert_loads.empty() ? 0 : layout.expert_loads[0].size()};
  group.broadcast(shape, sizeof shape, 0);
  std::vector<double> flat;
  for (const auto& row : layout.expert_loads) flat.insert(flat.end(), row.begin(), row.end());
  flat.resize(shape[0] * shape[1]);
  group.broadcast(flat.data(), flat.size() * sizeof(double), 0);
  layout.expert_loads.assign(shape[0], {});
  for (size_t l = 0; l < shape[0]; ++l)
    layout.expert_loads[l].assign(flat.begin() + static_cast<std::ptrdiff_t>(l * shape[1]),
                                  flat.begin() + static_cast<std::ptrdiff_t>((l + 1) * shape[1]));
  return layout;
}

// One sequence of the Forward of a rank holding the whole model. Its logits are copied out,
// since the next pass (of any slot) overwrites the Forward's.
class SequenceModel : public model::TokenModel {
 public:
  SequenceModel(model::Forward& forward, int32_t sequence)
      : forward_(forward), sequence_(sequence), logits_(static_cast<size_t>(forward.config().vocab_size)) {}
  void eval(std::span<const model::TokenId> tokens, int32_t pos) override {
    const model::SequenceStep step{sequence_, tokens, pos};
    forward_.run_batch(std::span(&step, 1));
    keep_logits(forward_.logits(0));
  }
  void keep_logits(const float* logits) { std::copy_n(logits, logits_.size(), logits_.data()); }
  const float* last_logits() const override { return logits_.data(); }
  int32_t max_batch() const override { return forward_.max_batch(); }
  int32_t n_ctx() const override { return forward_.n_ctx(); }
  int32_t vocab_size() const override { return forward_.config().vocab_size; }
  int32_t resumable(int32_t pos) const override { return forward_.resumable(sequence_, pos); }

 private:
  model::Forward& forward_;
  int32_t sequence_;
  std::vector<float> logits_;
};

EngineOptions resolve_for_rank(EngineOptions options, comm::Group* group) {
  if (!group) return options;
  options.layout = with_memory_weights(*group, options.layout);
  options.layout = with_rank0_expert_loads(*group, options.layout);
  // A rank without the file says on stderr what it received and what the cache held (stdout
  // is rank 0's output).
  options.model_path = ensure_model_file(*group, options.model_path, options.layout, options.shard_cache_dir,
                                         options.on_receive_progress,
                                         [](const std::string& note) { std::fprintf(stderr, "%s\n", note.c_str()); });
  return options;
}

}  // namespace

std::string default_shard_cache_dir() {
  if (const char* dir = std::getenv("ORCHARD_CACHE_DIR")) return std::string(dir) + "/shards";
  if (const char* dir = std::getenv("XDG_CACHE_HOME")) return std::string(dir) + "/orchard/shards";
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/orchard/shards";
  return "/tmp/orchard-shards";
}

Engine::Engine(const EngineOptions& requested, comm::Group* group)
    : options_(resolve_for_rank(requested, group)),
      file_(model::gguf::Reader::open(options_.model_path)),
      config_(model::ModelConfig::from_gguf(file_)),
      tokenizer_(model::Tokenizer::from_gguf(file_)),
      pool_(options_.threads) {
  const EngineOptions& options = options_;
  const Layout layout = group ? options.layout : Layout{};
  if (group) layout.validate(config_, group->size());
  const int rank = group ? group->rank() : 0;
  const model::Shard shard = group ? shard_for_rank(config_, layout, rank) : model::Shard::whole(config_);

  model::LoadOptions load;
  load.allow_repack = options.allow_repack;
  load.on_progress = options.on_load_progress;
  weights_ = std::make_unique<model::ModelWeights>(file_, config_, shard, load);

  if (group && layout.tp > 1) {
    std::vector<int> members;
    for (int t = 0; t < layout.tp; ++t) members.push_back(layout.rank_at(layout.stage_of(rank), t));
    sums_ = std::make_unique<TensorGroupSums>(*group, std::move(members));
    if (layout.splits_experts(config_)) sums_->set_experts(config_.n_expert_shared > 0, options.expert_combine);
  }
  const int32_t n_ctx = options.context > 0 ? options.context : config_.context_length;
  if (options.n_slots < 1) throw Error(error_message("engine", "at least one slot is needed, not {}", options.n_slots));
  forward_ = std::make_unique<model::Forward>(*weights_, n_ctx, std::min(options.batch, n_ctx), pool_, sums_.get(),
                                             options.n_slots, options.cache_type);
  if (group) pass_ = std::make_unique<DistributedPass>(*group, layout, *forward_);
  for (int32_t i = 0; i < options.n_slots; ++i) {
    if (pass_)
      token_models_.push_back(std::make_unique<DistributedModel>(*pass_, i));
    else
      token_models_.push_back(std::make_unique<SequenceModel>(*forward_, i));
  }
}

void Engine::eval_batch(std::span<const model::SequenceStep> steps) {
  batch_logits_.clear();
  if (!pass_) {
    forward_->run_batch(steps);
    for (size_t i = 0; i < steps.size(); ++i)
      static_cast<SequenceModel&>(model(steps[i].sequence)).keep_logits(forward_->logits(static_cast<int32_t>(i)));
    return;
  }
  for (const model::SequenceStep& step : steps)
    batch_logits_.push_back(static_cast<DistributedModel&>(model(step.sequence)).logits());
  pass_->eval_batch(steps, batch_logits_);
}

}  // namespace orchard::parallel
