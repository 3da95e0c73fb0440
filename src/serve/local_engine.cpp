#include "serve/local_engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace orchard::serve {

// One sequence of the shared Forward. Its logits are copied out of the Forward, whose rows the
// next batch overwrites, so they stay this slot's until its next eval, whichever slots run
// in between.
class LocalEngine::Slot : public model::TokenModel {
 public:
  Slot(LocalEngine& owner, int32_t index)
      : owner_(owner), index_(index), logits_(static_cast<size_t>(owner.config_.vocab_size)) {}

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override {
    const model::SequenceStep step{index_, tokens, pos};
    owner_.eval_batch(std::span(&step, 1));
  }
  const float* last_logits() const override { return logits_.data(); }
  int32_t max_batch() const override { return owner_.forward_->max_batch(); }
  int32_t n_ctx() const override { return owner_.forward_->n_ctx(); }
  int32_t vocab_size() const override { return owner_.config_.vocab_size; }
  int32_t resumable(int32_t pos) const override { return owner_.forward_->resumable(index_, pos); }

 private:
  friend class LocalEngine;
  LocalEngine& owner_;
  int32_t index_;
  std::vector<float> logits_;  // F32 [vocab]
};

namespace {

model::LoadOptions load_options(const LocalEngineOptions& o) {
  model::LoadOptions load;
  load.allow_repack = o.allow_repack;
  load.on_progress = o.on_progress;
  return load;
}

}  // namespace

ModelInfo describe_model(const std::string& model_path, const std::string& alias, const model::gguf::Reader& file,
                         const model::ModelConfig& config) {
  ModelInfo info;
  info.id = alias.empty() ? std::filesystem::path(model_path).stem().string() : alias;
  info.architecture = config.arch_name;
  if (const auto* value = file.find("tokenizer.chat_template")) info.chat_template = value->as_string("tokenizer.chat_template");
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(model_path, ec);
  if (!ec) {
    // file_clock has no portable conversion before C++20's clock_cast in libstdc++ 12; shifting
    // by the two clocks' current difference is accurate to the second.
    const auto system_time = std::chrono::system_clock::now() + (written - std::filesystem::file_time_type::clock::now());
    info.created = std::chrono::duration_cast<std::chrono::seconds>(system_time.time_since_epoch()).count();
  }
  info.file_bytes = file.file_size();
  for (const model::gguf::TensorInfo& t : file.tensors()) info.parameters += t.elements();
  if (const auto* value = file.find("general.file_type")) info.file_type = value->as_int("general.file_type");
  // Arrays (the vocabulary above all) would make the description megabytes long.
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [key, value] : file.metadata()) {
    if (const auto* u = std::get_if<uint64_t>(&value.data)) metadata[key] = *u;
    else if (const auto* i = std::get_if<int64_t>(&value.data)) metadata[key] = *i;
    else if (const auto* d = std::get_if<double>(&value.data)) metadata[key] = *d;
    else if (const auto* b = std::get_if<bool>(&value.data)) metadata[key] = *b;
    else if (const auto* text = std::get_if<std::string>(&value.data)) metadata[key] = *text;
  }
  info.metadata_json = metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return info;
}

LocalEngine::LocalEngine(const LocalEngineOptions& o)
    : file_(model::gguf::Reader::open(o.model_path)),
      config_(model::ModelConfig::from_gguf(file_)),
      tokenizer_(model::Tokenizer::from_gguf(file_)),
      info_(describe_model(o.model_path, o.alias, file_, config_)),
      pool_(o.threads),
      weights_(file_, config_, model::Shard::whole(config_), load_options(o)) {
  if (o.n_slots < 1) throw Error(error_message("serve", "--parallel must be at least 1, not {}", o.n_slots));
  if (o.n_ctx < 0) throw Error(error_message("serve", "the context length must not be negative ({})", o.n_ctx));
  if (o.max_batch < 1) throw Error(error_message("serve", "the batch must be at least 1, not {}", o.max_batch));
  const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : config_.context_length;
  forward_ = std::make_unique<model::Forward>(weights_, n_ctx, std::min(o.max_batch, n_ctx), pool_, nullptr, o.n_slots,
                                             o.cache_type);
  for (int32_t i = 0; i < o.n_slots; ++i) slots_.push_back(std::make_unique<Slot>(*this, i));
}

LocalEngine::~LocalEngine() = default;

model::TokenModel& LocalEngine::slot(int32_t i) {
  ORCHARD_CHECK(i >= 0 && i < n_slots(), "slot {} of {}", i, n_slots());
  return *slots_[i];
}

void LocalEngine::eval_batch(std::span<const model::SequenceStep> steps) {
  const auto start = std::chrono::steady_clock::now();
  forward_->run_batch(steps);
  forward_nanoseconds_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  const size_t vocab = slots_.front()->logits_.size();
  for (size_t i = 0; i < steps.size(); ++i)
    std::copy_n(forward_->logits(static_cast<int32_t>(i)), vocab, slots_[static_cast<size_t>(steps[i].sequence)]->logits_.data());
}

bool LocalEngine::copy_prefix(int32_t from, int32_t to, int32_t n) {
  ORCHARD_CHECK(from >= 0 && from < n_slots() && to >= 0 && to < n_slots(), "copy from slot {} to {} of {}", from, to, n_slots());
  forward_->copy_prefix(from, to, n);
  return true;
}

std::vector<double> LocalEngine::rank_forward_seconds() const { return {static_cast<double>(forward_nanoseconds_.load()) * 1e-9}; }

}  // namespace orchard::serve
