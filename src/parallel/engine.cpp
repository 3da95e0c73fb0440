#include "parallel/engine.h"

#include <cstdlib>

#include "parallel/weight_distribution.h"

namespace orchard::parallel {
namespace {

std::string model_path_for_rank(const EngineOptions& options, comm::Group* group) {
  if (!group) return options.model_path;
  return ensure_model_file(*group, options.model_path, options.layout, options.shard_cache_dir,
                           options.on_receive_progress);
}

}  // namespace

std::string default_shard_cache_dir() {
  if (const char* dir = std::getenv("ORCHARD_CACHE_DIR")) return std::string(dir) + "/shards";
  if (const char* dir = std::getenv("XDG_CACHE_HOME")) return std::string(dir) + "/orchard/shards";
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/orchard/shards";
  return "/tmp/orchard-shards";
}

Engine::Engine(const EngineOptions& options, comm::Group* group)
    : file_(model::gguf::Reader::open(model_path_for_rank(options, group))),
      config_(model::ModelConfig::from_gguf(file_)),
      tokenizer_(model::Tokenizer::from_gguf(file_)),
      pool_(options.threads) {
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
  }
  const int32_t n_ctx = options.context > 0 ? options.context : config_.context_length;
  forward_ = std::make_unique<model::Forward>(*weights_, n_ctx, std::min(options.batch, n_ctx), pool_, sums_.get());
  if (group) {
    token_model_ = std::make_unique<DistributedModel>(*group, layout, *forward_);
  } else {
    token_model_ = std::make_unique<model::LocalModel>(*forward_);
  }
}

}  // namespace orchard::parallel
