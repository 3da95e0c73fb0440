#pragma once
// The Engine of one process holding the whole model: one Forward over the mapped weights holds
// every slot's sequence (each with its own KV cache) and runs a batch of slots' steps in one
// pass; one thread pool runs the kernels.
#include <atomic>
#include <functional>
#include <memory>

#include "core/thread_pool.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gguf/reader.h"
#include "model/weights.h"
#include "serve/engine.h"

namespace orchard::serve {

struct LocalEngineOptions {
  std::string model_path;
  std::string alias;        // the model's id; empty: the file name without ".gguf"
  int32_t n_slots = 4;      // sequences served at once
  int32_t n_ctx = 0;        // context per slot; 0: the model's trained context
  int32_t max_batch = 512;  // positions per forward pass, all slots together
  model::KvType cache_type = model::KvType::F32;  // KV cache elements
  int threads = 0;          // 0: all cores
  bool allow_repack = true;
  std::function<void(size_t, size_t)> on_progress;  // weight loading progress
};

// What /v1/models says of the model in `file`: its id (alias, or the file name without .gguf),
// architecture, chat template and the file's time; its size, parameters, file type and scalar
// metadata for Ollama's /api/show.
ModelInfo describe_model(const std::string& model_path, const std::string& alias, const model::gguf::Reader& file,
                         const model::ModelConfig& config);

class LocalEngine : public Engine {
 public:
  // Throws Error/FormatError when the file can't be read or the options are out of range.
  explicit LocalEngine(const LocalEngineOptions& options);
  ~LocalEngine() override;

  const ModelInfo& info() const override { return info_; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  int32_t n_slots() const override { return static_cast<int32_t>(slots_.size()); }
  model::TokenModel& slot(int32_t i) override;
  void eval_batch(std::span<const model::SequenceStep> steps) override;
  int32_t max_batch() override { return forward_->max_batch(); }
  bool copy_prefix(int32_t from, int32_t to, int32_t n) override;
  std::vector<double> rank_forward_seconds() const override;
  int threads() const { return pool_.size(); }
  model::Forward& forward() { return *forward_; }  // the one pass every slot runs through

 private:
  class Slot;

  model::gguf::Reader file_;
  model::ModelConfig config_;
  model::Tokenizer tokenizer_;
  ModelInfo info_;
  core::ThreadPool pool_;
  model::ModelWeights weights_;
  std::unique_ptr<model::Forward> forward_;
  std::atomic<int64_t> forward_nanoseconds_{0};
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace orchard::serve
