#pragma once
// What the server runs on: one model and a fixed number of sequence slots, each a TokenModel
// with its own KV cache over the shared weights. LocalEngine is the model on this machine alone;
// a parallel group (pipeline or tensor ranks) plugs in by implementing the same interface, its
// slots driving the whole group.
#include <cstdint>
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
  // Seconds each rank has spent in forward passes since the start, indexed by rank. Safe to call
  // from any thread while slots run.
  virtual std::vector<double> rank_forward_seconds() const = 0;
};

}  // namespace orchard::serve
