#pragma once
// The serving core, free of HTTP: a bounded FIFO queue of generation requests in front of the
// engine's slots, one compute thread that advances every active slot by one step per round
// (a prompt chunk or one token, all slots' steps in one Engine::eval_batch call, so concurrent
// requests progress interleaved, decoding N of them on LocalEngine reads the weights once per
// round, and a long prompt delays the others by one chunk at most), stop strings, and
// cancellation.
//
// Callers submit() from any thread and read the job's output with Job::wait(); the compute
// thread appends text as it is generated, so a slow reader never stalls the other slots.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/prompt_cache.h"
#include "serve/stop_matcher.h"
#include "serve/structured/token_mask.h"

namespace orchard::serve {

enum class FinishReason {
  Stop,       // an end-of-generation token or a stop string
  Length,     // max_tokens, or the context is full
  Cancelled,  // Job::cancel (the client went away) or the scheduler shut down
  Error,      // the engine failed; JobUpdate::error says how
};

// "stop", "length", "cancelled", "error"
std::string_view finish_reason_name(FinishReason reason);

struct GenerationRequest {
  std::vector<model::TokenId> prompt;  // not empty, shorter than the context
  int32_t max_tokens = 16;             // at least 1
  model::SamplerOptions sampling;
  std::vector<std::string> stop;       // generation ends before the first of these; not returned
  // End-of-generation tokens are never sampled, so a free-text request runs to max_tokens (or the
  // context): llama.cpp's ignore_eos, which benchmarks use to make every request equally long.
  // A constrained request ends where its grammar does, regardless.
  bool ignore_eos = false;
  // Sampling held to a grammar (response_format, a required tool call): tokens it refuses are
  // masked before the sampler sees the logits, end-of-generation comes only once the document
  // is whole, and generation ends (Stop) as soon as nothing can follow. Null: free text.
  std::shared_ptr<const structured::Constraint> constraint;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // tokens sampled, the one that ended generation included
  int32_t cached_tokens = 0;      // prompt positions not computed: their KV cache was reused
  // From taking a slot to the first sampled token (the prompt's evaluation), and from there to
  // the end (Ollama reports both); 0 for a job that never had a slot.
  double prompt_seconds = 0;
  double generation_seconds = 0;
};

struct JobUpdate {
  std::string text;  // text generated since the previous update (valid UTF-8)
  bool finished = false;
  FinishReason finish_reason = FinishReason::Stop;  // once finished
  Usage usage;                                      // once finished
  std::string error;                                // FinishReason::Error only
};

class Scheduler;

// One request's progress, shared by its submitter and the compute thread.
class Job {
 public:
  // Waits until there is new text or the job has finished, or `timeout` passes; returns the new
  // text (handing it over) and, once finished, the outcome. After the finished update, every
  // call returns finished at once with no text.
  JobUpdate wait(std::chrono::milliseconds timeout);
  // The client went away: the job leaves its slot (or the queue) at the next step and finishes
  // as Cancelled. No effect once it has finished.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Scheduler;
  explicit Job(GenerationRequest request) : request_(std::move(request)) {}
  void append(const std::string& text);
  void finish(FinishReason reason, Usage usage, std::string error);

  const GenerationRequest request_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::Stop;
  Usage usage_;
  std::string error_;
};

// More requests wait than the queue holds (HTTP 429).
class QueueFullError : public Error {
 public:
  using Error::Error;
};

struct SchedulerOptions {
  int32_t max_queue = 32;     // requests waiting beyond the busy slots; more are refused
  int32_t prompt_chunk = 64;  // prompt positions per slot per round (capped by max_batch)
  // Positions per round, all slots together, are capped by the engine's max_batch(): every
  // slot's first position (a decode token or a chunk's start) comes first, then prompt chunks
  // grow into what is left.
};

class Scheduler {
 public:
  // Drives every slot of `engine`; engine and metrics must outlive the scheduler. Nothing runs
  // until start() or step().
  Scheduler(Engine& engine, Metrics& metrics, SchedulerOptions options = {});
  // Stops the compute thread; jobs not finished yet finish as Cancelled.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request behind those already waiting. Throws QueueFullError when every slot is busy
  // and max_queue requests wait already, Error when the request breaks GenerationRequest's
  // contract (callers validate first and report their own errors).
  std::shared_ptr<Job> submit(GenerationRequest request);

  // Runs step() on a compute thread of its own until destruction.
  void start();
  // One round: finishes cancelled jobs, gives free slots to waiting jobs in arrival order (each
  // to the free slot whose KV cache holds the longest prefix of its prompt: prompt_cache.h), then
  // advances each active slot by one prompt chunk or one token, in one engine call. When the
  // engine's batch can't hold a step of every slot, the slots left out go first next round.
  // Returns false when no slot was active. Only one thread may call it (the compute thread once
  // started).
  bool step();

  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_slots() const { return static_cast<int32_t>(slots_.size()); }
  int32_t queue_depth() const;
  int32_t active_slots() const { return active_; }

 private:
  struct Slot {
    model::TokenModel* model = nullptr;
    std::shared_ptr<Job> job;  // null when free
    std::optional<model::Sampler> sampler;
    std::optional<model::Tokenizer::StreamDecoder> decoder;
    std::optional<StopMatcher> stop;
    std::optional<structured::Matcher> matcher;  // the request's constraint, if any
    std::vector<float> no_eos;  // the logits with end-of-generation masked (ignore_eos)
    int32_t prompt_done = 0;  // prompt positions evaluated (or found in the cache)
    int32_t cached = 0;       // prompt positions found in the cache
    int32_t pos = 0;          // where the next generated token goes
    int32_t generated = 0;
    model::TokenId last = -1;  // sampled, not evaluated yet
    std::chrono::steady_clock::time_point admitted, first_sampled;
    int32_t planned = 0;       // positions in this round's batch; 0: none
    std::optional<std::string> failure;  // why this round's eval failed
  };

  void admit();
  // Gives the slot to the job, whose first `cached` prompt positions its KV cache holds.
  void occupy(Slot& slot, std::shared_ptr<Job> job, int32_t cached);
  void finish_unstarted(Job& job, FinishReason reason, std::string error);
  void plan();
  void evaluate();
  // Records the n positions slot's step evaluated, then samples once its prompt is done.
  void advance(Slot& slot, int32_t n);
  void sample(Slot& slot);
  void end(Slot& slot, FinishReason reason, std::string error = {});
  void run();

  Engine& engine_;
  const model::Tokenizer& tokenizer_;
  Metrics& metrics_;
  const SchedulerOptions options_;
  const int32_t n_ctx_;
  std::vector<model::TokenId> end_tokens_;  // the vocabulary's end-of-generation tokens
  std::vector<Slot> slots_;  // the compute thread's alone
  PromptCache prompt_cache_;  // what each slot's KV cache holds; the compute thread's alone
  std::vector<model::SequenceStep> steps_;  // this round's batch, in slot order
  size_t first_ = 0;                        // the slot served first when the batch is short
  struct Round {                            // what this round did, for the metrics
    double forward_seconds = 0;             // in engine calls
    int64_t prompt_tokens = 0, generated_tokens = 0;
  } round_;
  std::atomic<int32_t> active_{0};

  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace orchard::serve
