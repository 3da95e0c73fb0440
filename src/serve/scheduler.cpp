#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <utility>

namespace orchard::serve {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "error";
}

JobUpdate Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return finished_ || !text_.empty(); });
  JobUpdate update;
  update.text = std::move(text_);
  text_.clear();
  update.finished = finished_;
  update.finish_reason = reason_;
  update.usage = usage_;
  update.error = error_;
  return update;
}

void Job::append(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard lock(mutex_);
    text_ += text;
  }
  changed_.notify_all();
}

void Job::finish(FinishReason reason, Usage usage, std::string error) {
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
    reason_ = reason;
    usage_ = usage;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

Scheduler::Scheduler(Engine& engine, Metrics& metrics, SchedulerOptions options)
    : engine_(engine),
      tokenizer_(engine.tokenizer()),
      metrics_(metrics),
      options_(options),
      n_ctx_(engine.n_slots() > 0 ? engine.slot(0).n_ctx() : 0),
      prompt_cache_(std::max(engine.n_slots(), 0)) {
  if (engine.n_slots() < 1) throw Error(error_message("serve", "the engine has no slots"));
  if (options.max_queue < 0) throw Error(error_message("serve", "the queue length must not be negative ({})", options.max_queue));
  if (options.prompt_chunk < 1) throw Error(error_message("serve", "the prompt chunk must be at least 1, not {}", options.prompt_chunk));
  if (engine.max_batch() < 1) throw Error(error_message("serve", "the engine takes batches of {} positions", engine.max_batch()));
  for (model::TokenId t = 0; t < tokenizer_.vocab_size(); ++t)
    if (tokenizer_.is_end_of_generation(t)) end_tokens_.push_back(t);
  slots_.resize(engine.n_slots());
  steps_.reserve(slots_.size());
  for (int32_t i = 0; i < engine.n_slots(); ++i) {
    slots_[i].model = &engine.slot(i);
    ORCHARD_CHECK(slots_[i].model->n_ctx() == n_ctx_, "slot {} holds {} positions, slot 0 {}", i, slots_[i].model->n_ctx(), n_ctx_);
  }
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Wake every caller still waiting on a job.
  for (Slot& slot : slots_)
    if (slot.job) end(slot, FinishReason::Cancelled);
  for (auto& job : waiting_) finish_unstarted(*job, FinishReason::Cancelled, {});
}

std::shared_ptr<Job> Scheduler::submit(GenerationRequest request) {
  const size_t n_prompt = request.prompt.size();
  if (n_prompt == 0) throw Error(error_message("serve", "the prompt has no tokens"));
  if (n_prompt >= static_cast<size_t>(n_ctx_))
    throw Error(error_message("serve", "the prompt has {} tokens; the context holds {}", n_prompt, n_ctx_));
  if (request.max_tokens < 1) throw Error(error_message("serve", "max_tokens must be at least 1, not {}", request.max_tokens));
  for (model::TokenId t : request.prompt)
    if (t < 0 || t >= tokenizer_.vocab_size()) throw Error(error_message("serve", "token {} is outside the vocabulary", t));

  std::shared_ptr<Job> job(new Job(std::move(request)));
  {
    std::lock_guard lock(mutex_);
    const size_t capacity = slots_.size() + static_cast<size_t>(options_.max_queue);
    if (waiting_.size() + static_cast<size_t>(active_.load()) >= capacity)
      throw QueueFullError(error_message("serve", "all {} slots are busy and {} requests wait already", slots_.size(), waiting_.size()));
    waiting_.push_back(job);
  }
  work_.notify_one();
  return job;
}

int32_t Scheduler::queue_depth() const {
  std::lock_guard lock(mutex_);
  return static_cast<int32_t>(waiting_.size());
}

void Scheduler::start() {
  ORCHARD_CHECK(!thread_.joinable(), "the scheduler is already running");
  thread_ = std::thread([this] { run(); });
}

void Scheduler::run() {
  for (;;) {
    if (step()) continue;
    std::unique_lock lock(mutex_);
    work_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
    if (stopping_) return;
  }
}

void Scheduler::admit() {
  std::lock_guard lock(mutex_);
  std::erase_if(waiting_, [&](const std::shared_ptr<Job>& job) {
    if (!job->cancelled()) return false;
    finish_unstarted(*job, FinishReason::Cancelled, {});
    return true;
  });
  std::vector<uint8_t> busy(slots_.size());
  for (;;) {
    for (size_t i = 0; i < slots_.size(); ++i) busy[i] = slots_[i].job != nullptr;
    if (waiting_.empty() || std::find(busy.begin(), busy.end(), 0) == busy.end()) break;
    std::shared_ptr<Job> job = std::move(waiting_.front());
    waiting_.pop_front();
    const std::vector<model::TokenId>& prompt = job->request_.prompt;
    PromptCache::Choice choice = prompt_cache_.choose(prompt, busy, true);
    // A prefix is reusable only where the slot's sliding-window layers still hold the window
    // before it (TokenModel::resumable); a slot that went on too far starts over.
    if (choice.copy_from >= 0 && engine_.slot(choice.copy_from).resumable(choice.reused) < choice.reused)
      choice = prompt_cache_.choose(prompt, busy, false);
    if (choice.copy_from >= 0) {
      bool copied = false;
      try {
        copied = engine_.copy_prefix(choice.copy_from, choice.slot, choice.reused);
      } catch (const std::exception&) {
        prompt_cache_.keep(choice.slot, 0);  // the copy may have overwritten part of it
      }
      if (copied) prompt_cache_.copied(choice.copy_from, choice.slot, choice.reused);
      else choice = prompt_cache_.choose(prompt, busy, false);
    }
    choice.reused = engine_.slot(choice.slot).resumable(choice.reused);
    try {
      occupy(slots_[static_cast<size_t>(choice.slot)], job, choice.reused);
    } catch (const std::exception& e) {  // sampling options the sampler refuses
      finish_unstarted(*job, FinishReason::Error, e.what());
    }
  }
}

void Scheduler::finish_unstarted(Job& job, FinishReason reason, std::string error) {
  metrics_.count_finished(std::string(finish_reason_name(reason)));
  job.finish(reason, {static_cast<int32_t>(job.request_.prompt.size()), 0}, std::move(error));
}

void Scheduler::occupy(Slot& slot, std::shared_ptr<Job> job, int32_t cached) {
  const GenerationRequest& r = job->request_;
  slot.sampler.emplace(r.sampling, slot.model->vocab_size());  // throws before the slot is taken
  // As in model::generate: the prompt counts as already seen for the repetition penalty.
  for (model::TokenId t : r.prompt) slot.sampler->remember(t);
  slot.decoder.emplace(tokenizer_);
  slot.stop.emplace(r.stop);
  if (r.constraint)
    slot.matcher.emplace(r.constraint, tokenizer_);
  else
    slot.matcher.reset();
  const auto index = static_cast<int32_t>(&slot - slots_.data());
  prompt_cache_.keep(index, cached);  // positions from `cached` on are this job's to write
  prompt_cache_.touch(index);
  slot.prompt_done = cached;
  slot.cached = cached;
  slot.pos = 0;
  slot.generated = 0;
  slot.last = -1;
  slot.admitted = std::chrono::steady_clock::now();
  slot.job = std::move(job);
  ++active_;
}

bool Scheduler::step() {
  const auto start = std::chrono::steady_clock::now();
  admit();
  bool worked = false;
  for (Slot& slot : slots_) {
    if (!slot.job) continue;
    worked = true;
    if (slot.job->cancelled()) end(slot, FinishReason::Cancelled);
  }
  plan();
  if (steps_.empty()) return worked;
  int64_t positions = 0;
  for (const model::SequenceStep& step : steps_) positions += static_cast<int64_t>(step.tokens.size());
  round_ = {};
  evaluate();
  // The round's counts reach the metrics (one lock) once, not once per token.
  if (round_.prompt_tokens > 0) metrics_.add_prompt_tokens(round_.prompt_tokens);
  if (round_.generated_tokens > 0) metrics_.add_generated_tokens(round_.generated_tokens);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_.add_step(round_.forward_seconds, seconds - round_.forward_seconds, positions,
                    static_cast<int64_t>(steps_.size()));
  return worked;
}

void Scheduler::plan() {
  steps_.clear();
  int32_t budget = engine_.max_batch();
  const size_t n = slots_.size();
  std::optional<size_t> left_out;
  // One position for every slot first (its decode token, or the start of its prompt chunk),
  // so that a long prompt never holds back the others; then prompts take what is left.
  for (size_t k = 0; k < n; ++k) {
    Slot& slot = slots_[(first_ + k) % n];
    slot.planned = 0;
    if (!slot.job) continue;
    if (budget == 0) {
      if (!left_out) left_out = (first_ + k) % n;
      continue;
    }
    slot.planned = 1;
    --budget;
  }
  for (size_t k = 0; k < n && budget > 0; ++k) {
    Slot& slot = slots_[(first_ + k) % n];
    if (slot.planned == 0) continue;
    const auto rest = static_cast<int32_t>(slot.job->request_.prompt.size()) - slot.prompt_done;
    if (rest == 0) continue;
    const int32_t more = std::min({rest, options_.prompt_chunk, slot.model->max_batch(), budget + 1}) - 1;
    slot.planned += more;
    budget -= more;
  }
  // Whoever was left out goes first next round; otherwise the lead moves on, so that prompts
  // take turns at what decode tokens leave.
  first_ = left_out ? *left_out : (first_ + 1) % n;
  for (size_t i = 0; i < n; ++i) {
    Slot& slot = slots_[i];
    if (slot.planned == 0) continue;
    const std::vector<model::TokenId>& prompt = slot.job->request_.prompt;
    if (slot.prompt_done < static_cast<int32_t>(prompt.size()))
      steps_.push_back({static_cast<int32_t>(i), std::span(prompt).subspan(slot.prompt_done, slot.planned), slot.prompt_done});
    else
      steps_.push_back({static_cast<int32_t>(i), std::span<const model::TokenId>(&slot.last, 1), slot.pos});
  }
}

void Scheduler::evaluate() {
  const auto start = std::chrono::steady_clock::now();
  try {
    engine_.eval_batch(steps_);
  } catch (const std::exception& e) {
    if (steps_.size() == 1) {
      slots_[static_cast<size_t>(steps_[0].sequence)].failure = e.what();
    } else {
      // The batch does not say whose step failed: each runs again alone (an eval rewrites the
      // positions it covers, so a step that had run is unharmed), and only the failing ones end.
      for (const model::SequenceStep& step : steps_) {
        try {
          engine_.eval_batch(std::span(&step, 1));
        } catch (const std::exception& alone) {
          slots_[static_cast<size_t>(step.sequence)].failure = alone.what();
        }
      }
    }
  }
  round_.forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const model::SequenceStep& step : steps_) {
    Slot& slot = slots_[static_cast<size_t>(step.sequence)];
    const auto n = static_cast<int32_t>(step.tokens.size());
    // Before advance(): a decode step's token is the slot's `last`, which sampling replaces.
    if (slot.failure) prompt_cache_.keep(step.sequence, step.pos);
    else prompt_cache_.record(step.sequence, step.tokens, step.pos);
    if (slot.failure) {
      // The slot stays usable: an eval writes only from its position on, so the positions
      // before it (kept in the prompt cache above) still hold what they did.
      end(slot, FinishReason::Error, *std::exchange(slot.failure, std::nullopt));
      continue;
    }
    try {
      advance(slot, n);
    } catch (const std::exception& e) {  // the sampler failed
      end(slot, FinishReason::Error, e.what());
    }
  }
}

void Scheduler::advance(Slot& slot, int32_t n) {
  const auto n_prompt = static_cast<int32_t>(slot.job->request_.prompt.size());
  if (slot.prompt_done < n_prompt) {
    slot.prompt_done += n;
    round_.prompt_tokens += n;
    if (slot.prompt_done < n_prompt) return;
    slot.pos = n_prompt;
  } else {
    ++slot.pos;
  }
  sample(slot);
}

void Scheduler::sample(Slot& slot) {
  const float* logits = slot.model->last_logits();
  if (slot.matcher) {
    logits = slot.matcher->mask(logits);
  } else if (slot.job->request_.ignore_eos && !end_tokens_.empty()) {
    slot.no_eos.assign(logits, logits + slot.model->vocab_size());  // capacity kept across tokens
    for (model::TokenId t : end_tokens_)
      if (t < slot.model->vocab_size()) slot.no_eos[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    logits = slot.no_eos.data();
  }
  const model::TokenId token = slot.sampler->sample(logits);
  if (slot.generated == 0) slot.first_sampled = std::chrono::steady_clock::now();
  ++slot.generated;
  ++round_.generated_tokens;
  if (slot.matcher) slot.matcher->accept(token);
  if (tokenizer_.is_end_of_generation(token)) return end(slot, FinishReason::Stop);
  slot.job->append(slot.stop->push(slot.decoder->push(token)));
  if (slot.stop->stopped() || (slot.matcher && slot.matcher->finished())) return end(slot, FinishReason::Stop);
  // slot.pos is where `token` would be evaluated: past the context there is no room for it.
  if (slot.generated >= slot.job->request_.max_tokens || slot.pos >= n_ctx_) return end(slot, FinishReason::Length);
  slot.last = token;
}

void Scheduler::end(Slot& slot, FinishReason reason, std::string error) {
  if (reason == FinishReason::Stop || reason == FinishReason::Length) {
    // Text held back for an incomplete character or a possible stop string is the reply's end.
    std::string tail = slot.stop->push(slot.decoder->finish());
    if (slot.stop->stopped())
      reason = FinishReason::Stop;
    else
      tail += slot.stop->finish();
    slot.job->append(tail);
  }
  metrics_.count_finished(std::string(finish_reason_name(reason)));
  Usage usage{static_cast<int32_t>(slot.job->request_.prompt.size()), slot.generated, slot.cached};
  const auto now = std::chrono::steady_clock::now();
  const auto prompt_end = slot.generated > 0 ? slot.first_sampled : now;
  usage.prompt_seconds = std::chrono::duration<double>(prompt_end - slot.admitted).count();
  usage.generation_seconds = std::chrono::duration<double>(now - prompt_end).count();
  // The slot is free before the client can see the end: a client that reads /metrics after its
  // answer finds it counted as neither active nor waiting.
  std::shared_ptr<Job> job = std::move(slot.job);
  --active_;
  job->finish(reason, usage, std::move(error));
}

}  // namespace orchard::serve
