#pragma once
// Everything one rank needs to generate: the mapped file, its config and tokenizer, the weights
// of this rank's shard, a thread pool, the forward pass and the TokenModel the generation loop
// drives. With no group it is the whole model on this process; with a group, this rank's part
// of a pipeline, tensor or hybrid split.
#include <memory>
#include <string>

#include "comm/group.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/gguf/reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"
#include "parallel/distributed_model.h"
#include "parallel/layout.h"

namespace orchard::parallel {

// $ORCHARD_CACHE_DIR, else $XDG_CACHE_HOME/orchard or ~/.cache/orchard, + "/shards".
std::string default_shard_cache_dir();

struct EngineOptions {
  std::string model_path;
  Layout layout;           // ignored without a group
  int threads = 0;         // 0: all cores (a local multi-rank run passes its share)
  int32_t context = 0;     // 0: the model's trained context
  int32_t batch = 512;     // positions per forward pass (pipeline chunk size)
  model::KvType cache_type = model::KvType::F32;  // KV cache elements (this rank's heads)
  bool allow_repack = true;
  // Independent sequences (each its own forward buffers and KV cache) over the shared weights.
  int32_t n_slots = 1;
  // An expert split: how a mixture-of-experts layer's partial outputs are combined.
  ExpertCombine expert_combine = ExpertCombine::Auto;
  // Where a rank without the model file keeps the shard rank 0 sends it.
  std::string shard_cache_dir = default_shard_cache_dir();
  std::function<void(size_t, size_t)> on_load_progress;
  std::function<void(size_t, size_t)> on_receive_progress;
};

class Engine {
 public:
  // group == nullptr: a single rank holding the whole model. With a group this is collective:
  // ranks agree on stage weights (free memory) and receive missing weights from rank 0.
  Engine(const EngineOptions& options, comm::Group* group);

  // Slot i in [0, n_slots); model() is slot 0.
  model::TokenModel& model(int32_t slot = 0) { return *token_models_.at(static_cast<size_t>(slot)); }
  // The one pass every slot runs through (slot i is its sequence i).
  model::Forward& forward() { return *forward_; }
  int32_t n_slots() const { return static_cast<int32_t>(token_models_.size()); }
  // A step of several slots in one pass over this rank's weights (every rank of a group makes
  // the same call); afterwards model(step.sequence).last_logits() are the step's. Steps follow
  // Forward::run_batch's contract, at most max_batch() positions together.
  void eval_batch(std::span<const model::SequenceStep> steps);
  int32_t max_batch() const { return forward_->max_batch(); }
  const model::gguf::Reader& file() const { return file_; }
  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  const model::ModelConfig& config() const { return config_; }
  const model::ModelWeights& weights() const { return *weights_; }
  core::ThreadPool& pool() { return pool_; }
  // Where this rank's split layers are summed; nullptr when it holds whole layers.
  const TensorGroupSums* partial_sums() const { return sums_.get(); }

 private:
  EngineOptions options_;  // as resolved for this rank (model path, stage weights)
  model::gguf::Reader file_;
  model::ModelConfig config_;
  model::Tokenizer tokenizer_;
  core::ThreadPool pool_;
  std::unique_ptr<model::ModelWeights> weights_;
  std::unique_ptr<TensorGroupSums> sums_;
  std::unique_ptr<model::Forward> forward_;
  std::unique_ptr<DistributedPass> pass_;  // with a group
  std::vector<std::unique_ptr<model::TokenModel>> token_models_;
  std::vector<float*> batch_logits_;       // eval_batch's, reused
};

}  // namespace orchard::parallel
