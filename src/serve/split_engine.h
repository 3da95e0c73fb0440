#pragma once
// Serving a model split over several ranks. Rank 0 runs the server and its scheduler; each eval
// it makes (a batch of slots' steps, or one slot's) is first broadcast as a command, so every
// other rank (running follow_split_engine) makes the same eval on its shard, in the same order. One thread of rank
// 0 owns the group: it runs the evals the scheduler hands it and asks every rank for its
// forward seconds (for /metrics) at most every second while busy and every heartbeat while
// idle, often enough that the followers' waits never reach the comm timeout.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/group.h"
#include "parallel/engine.h"
#include "serve/engine.h"

namespace orchard::serve {

class SplitEngine : public Engine {
 public:
  // `engine` is this rank's (rank 0's) part, built with as many slots as the server uses.
  SplitEngine(parallel::Engine& engine, comm::Group& group, const std::string& model_path, const std::string& alias,
              std::chrono::milliseconds heartbeat);
  // Tells the other ranks to stop following.
  ~SplitEngine() override;

  const ModelInfo& info() const override { return info_; }
  const model::Tokenizer& tokenizer() const override { return engine_.tokenizer(); }
  int32_t n_slots() const override { return static_cast<int32_t>(slots_.size()); }
  model::TokenModel& slot(int32_t i) override;
  // Every rank copies its share of the slot's cache (its layers and KV heads).
  bool copy_prefix(int32_t from, int32_t to, int32_t n) override;
  // One command carries a step of every slot in the batch, and every rank runs them in one pass
  // over its shard (parallel::Engine::eval_batch): weights are read once per round for all.
  void eval_batch(std::span<const model::SequenceStep> steps) override;
  int32_t max_batch() override { return engine_.max_batch(); }
  // Every rank's forward seconds: rank 0's now, the others' as of the last report.
  std::vector<double> rank_forward_seconds() const override;

 private:
  class CommandedSlot;
  // Runs `work` on the group thread and waits for it; rethrows what it threw.
  void on_group_thread(const std::function<void()>& work);
  void group_loop();
  void report();  // on the group thread

  parallel::Engine& engine_;
  comm::Group& group_;
  ModelInfo info_;
  std::chrono::milliseconds heartbeat_;
  std::atomic<int64_t> forward_nanoseconds_{0};
  std::vector<std::unique_ptr<CommandedSlot>> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  const std::function<void()>* pending_ = nullptr;  // work handed to the group thread
  bool done_ = false;                               // pending_ finished
  std::exception_ptr error_;
  bool stopping_ = false;
  mutable std::mutex report_mutex_;
  std::vector<double> rank_seconds_;  // by rank, as of the last report
  std::vector<int32_t> batch_words_;  // a kEvalBatch's steps and tokens, reused
  std::thread group_thread_;
};

// Every rank but 0: runs rank 0's commands on `engine` until it says stop. Throws when the
// group fails (rank 0 died).
void follow_split_engine(parallel::Engine& engine, comm::Group& group);

}  // namespace orchard::serve
