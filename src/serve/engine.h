#pragma once
// What the server runs on: one model and a fixed number of sequence slots, each a TokenModel
// with its own KV cache over the shared weights. LocalEngine is the model on this machine alone;
// a parallel group (pipeline or tensor ranks) plugs in by implementing the same interface, its
// slots driving the whole group. eval_batch advances several slots in one call, which an engine
// that can run them in one pass over the weights overrides.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/generate.h"
#include "model/tokenizer/tokenizer.h"

namespace orchard::serve {

struct ModelInfo {
  std::string id;             // the name clients pass as "model"
  std::string architecture;   // "llama", "qwen2", ...
  std::string chat_template;  // tokenizer.chat_template metadata; empty when absent
  int64_t created = 0;        // Unix seconds, reported by /v1/models
  // What Ollama's /api/tags and /api/show describe.
  uint64_t file_bytes = 0;
  int64_t parameters = 0;        // elements of every tensor in the file
  int64_t file_type = -1;        // general.file_type (llama.cpp's llama_ftype); -1 when absent
  std::string metadata_json;     // the file's scalar metadata as one JSON object (arrays left out)
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const ModelInfo& info() const = 0;
  virtual const model::Tokenizer& tokenizer() const = 0;
  virtual int32_t n_slots() const = 0;
  // Slot i in [0, n_slots()); slots are independent sequences and are only ever driven from one
  // thread at a time (the scheduler's).
  virtual model::TokenModel& slot(int32_t i) = 0;
  // Evaluates each step on slot step.sequence, as slot(step.sequence).eval(step.tokens,
  // step.pos) would; then that slot's last_logits() are its step's. Steps name distinct slots,
  // each within its slot's max_batch(), max_batch() positions at most together. On a throw,
  // any of the steps may or may not have run (running one again is harmless: an eval rewrites
  // the positions it covers). The default runs the steps one after the other.
  virtual void eval_batch(std::span<const model::SequenceStep> steps) {
    for (const model::SequenceStep& step : steps) slot(step.sequence).eval(step.tokens, step.pos);
  }
  // Most positions one eval_batch call takes, all steps together. The default, for evals made
  // one by one: every slot's own limit.
  virtual int32_t max_batch() { return n_slots() * slot(0).max_batch(); }
  // Makes slot `to`'s positions [0, n) hold what slot `from`'s hold there (a prompt cache: a
  // prefix two requests share is computed once). Called between evals. Returns false when the
  // engine can't copy (the caller computes the positions instead); on a throw, slot `to`'s
  // positions [0, n) are unknown.
  virtual bool copy_prefix(int32_t /*from*/, int32_t /*to*/, int32_t /*n*/) { return false; }
  // Seconds each rank has spent in forward passes since the start, indexed by rank. Safe to call
  // from any thread while slots run.
  virtual std::vector<double> rank_forward_seconds() const = 0;
};

}  // namespace orchard::serve
