#include "serve/split_engine.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "serve/local_engine.h"

namespace orchard::serve {
namespace {

// Broadcast by rank 0 before every eval. kEval: one slot's eval; a decode step's one token
// travels in the command, a prompt chunk's tokens follow in a second broadcast. kEvalBatch: a
// step of `slot` slots (n_tokens positions together) in one pass; a second broadcast carries
// the steps, then their tokens (BatchStep × slot, then n_tokens TokenIds).
struct Command {
  uint32_t magic;
  int32_t op;  // kEval, kStop, kReport, kEvalBatch or kCopy
  int32_t slot;  // kEvalBatch: the steps; kCopy: the slot copied to
  int32_t pos;   // kCopy: the positions copied, [0, pos)
  int32_t n_tokens;
  model::TokenId token;  // the token when n_tokens == 1; kCopy: the slot copied from
};
static_assert(sizeof(Command) == 24);
struct BatchStep {
  int32_t slot;
  int32_t pos;
  int32_t n_tokens;
};
static_assert(sizeof(BatchStep) == 12);
constexpr uint32_t kCommandMagic = 0x4F524356;  // "VCRO"
// kReport: every rank all-gathers its forward seconds (also what keeps idle followers alive).
// kCopy: every rank copies a prefix of one slot's KV cache into another's (the prompt cache).
enum : int32_t { kEval = 1, kStop = 2, kReport = 3, kEvalBatch = 4, kCopy = 5 };

// The steps of a kEvalBatch as int32 words: BatchStep of each, then every step's tokens.
void encode_batch(std::span<const model::SequenceStep> steps, std::vector<int32_t>& words) {
  words.clear();
  for (const model::SequenceStep& step : steps)
    words.insert(words.end(), {step.sequence, step.pos, static_cast<int32_t>(step.tokens.size())});
  for (const model::SequenceStep& step : steps) words.insert(words.end(), step.tokens.begin(), step.tokens.end());
}
// How stale /metrics' per-rank timings may be while requests run.
constexpr auto kReportInterval = std::chrono::seconds(1);

double seconds(int64_t nanoseconds) { return static_cast<double>(nanoseconds) * 1e-9; }

}  // namespace

class SplitEngine::CommandedSlot : public model::TokenModel {
 public:
  CommandedSlot(SplitEngine& owner, int32_t index) : owner_(owner), index_(index) {}

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override {
    const auto start = std::chrono::steady_clock::now();
    owner_.on_group_thread([&] {
      Command command{kCommandMagic, kEval, index_, pos, static_cast<int32_t>(tokens.size()),
                      tokens.size() == 1 ? tokens[0] : 0};
      owner_.group_.broadcast(&command, sizeof command, 0);
      if (tokens.size() != 1) owner_.group_.broadcast(const_cast<model::TokenId*>(tokens.data()), tokens.size_bytes(), 0);
      model().eval(tokens, pos);
    });
    owner_.forward_nanoseconds_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
  const float* last_logits() const override { return model().last_logits(); }
  int32_t max_batch() const override { return model().max_batch(); }
  int32_t n_ctx() const override { return model().n_ctx(); }
  int32_t vocab_size() const override { return model().vocab_size(); }
  int32_t resumable(int32_t pos) const override { return model().resumable(pos); }

 private:
  model::TokenModel& model() const { return owner_.engine_.model(index_); }
  SplitEngine& owner_;
  int32_t index_;
};

SplitEngine::SplitEngine(parallel::Engine& engine, comm::Group& group, const std::string& model_path,
                         const std::string& alias, std::chrono::milliseconds heartbeat)
    : engine_(engine),
      group_(group),
      info_(describe_model(model_path, alias, engine.file(), engine.config())),
      heartbeat_(heartbeat),
      rank_seconds_(static_cast<size_t>(group.size()), 0.0) {
  ORCHARD_CHECK(group.rank() == 0, "the split server runs on rank 0, not {}", group.rank());
  for (int32_t i = 0; i < engine.n_slots(); ++i) slots_.push_back(std::make_unique<CommandedSlot>(*this, i));
  group_thread_ = std::thread([this] { group_loop(); });
}

SplitEngine::~SplitEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  group_thread_.join();
}

void SplitEngine::on_group_thread(const std::function<void()>& work) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return pending_ == nullptr; });
  pending_ = &work;
  done_ = false;
  changed_.notify_all();
  changed_.wait(lock, [&] { return done_; });
  pending_ = nullptr;
  changed_.notify_all();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void SplitEngine::report() {
  Command command{kCommandMagic, kReport, 0, 0, 0, 0};
  group_.broadcast(&command, sizeof command, 0);
  const double mine = seconds(forward_nanoseconds_.load());
  std::vector<double> all(static_cast<size_t>(group_.size()));
  group_.all_gather(&mine, all.data(), sizeof mine);
  std::lock_guard lock(report_mutex_);
  rank_seconds_ = std::move(all);
}

void SplitEngine::group_loop() {
  bool broken = false;
  auto last_report = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  for (;;) {
    const bool woken = changed_.wait_for(lock, heartbeat_, [&] { return stopping_ || (pending_ && !done_); });
    if (stopping_) break;
    try {
      // Idle, a report is the heartbeat; busy, one goes before an eval at most every second.
      const bool report_due = !woken || std::chrono::steady_clock::now() - last_report >= kReportInterval;
      if (!broken && report_due) {
        lock.unlock();
        report();
        lock.lock();
        last_report = std::chrono::steady_clock::now();
      }
      if (woken) {
        lock.unlock();
        (*pending_)();
        lock.lock();
      }
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      broken = true;
      if (woken) error_ = std::current_exception();
    }
    if (woken) {
      done_ = true;
      changed_.notify_all();
    }
  }
  lock.unlock();
  if (broken) return;  // the followers have failed on their own
  Command stop{kCommandMagic, kStop, 0, 0, 0, 0};
  try {
    group_.broadcast(&stop, sizeof stop, 0);
  } catch (const Error&) {
    // A follower died just now: it no longer needs telling.
  }
}

void SplitEngine::eval_batch(std::span<const model::SequenceStep> steps) {
  if (steps.size() == 1) return slot(steps[0].sequence).eval(steps[0].tokens, steps[0].pos);
  // Checked here, before any rank hears of the batch: a step the followers would refuse would
  // end them (they cannot tell rank 0), and a refused batch must leave the slots usable.
  int32_t positions = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const model::SequenceStep& step = steps[i];
    if (step.sequence < 0 || step.sequence >= n_slots())
      throw Error(error_message("serve", "step {} names slot {}; the split holds {}", i, step.sequence, n_slots()));
    for (size_t j = 0; j < i; ++j)
      if (steps[j].sequence == step.sequence)
        throw Error(error_message("serve", "steps {} and {} both name slot {}", j, i, step.sequence));
    const auto n = static_cast<int32_t>(step.tokens.size());
    if (n == 0 || step.pos < 0 || step.pos > slot(0).n_ctx() - n)
      throw Error(error_message("serve", "step {} covers positions {}..{} of a context of {}", i, step.pos, step.pos + n,
                                slot(0).n_ctx()));
    for (model::TokenId t : step.tokens)
      if (t < 0 || t >= engine_.config().vocab_size)
        throw Error(error_message("serve", "step {} has token {}, outside the vocabulary", i, t));
    positions += n;
  }
  if (positions > max_batch())
    throw Error(error_message("serve", "a batch of {} positions; the split takes at most {}", positions, max_batch()));
  const auto start = std::chrono::steady_clock::now();
  on_group_thread([&] {
    Command command{kCommandMagic, kEvalBatch, static_cast<int32_t>(steps.size()), 0, positions, 0};
    group_.broadcast(&command, sizeof command, 0);
    encode_batch(steps, batch_words_);
    group_.broadcast(batch_words_.data(), batch_words_.size() * sizeof(int32_t), 0);
    engine_.eval_batch(steps);
  });
  forward_nanoseconds_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
}

model::TokenModel& SplitEngine::slot(int32_t i) {
  ORCHARD_CHECK(i >= 0 && i < n_slots(), "slot {} of {}", i, n_slots());
  return *slots_[static_cast<size_t>(i)];
}

bool SplitEngine::copy_prefix(int32_t from, int32_t to, int32_t n) {
  ORCHARD_CHECK(from >= 0 && from < n_slots() && to >= 0 && to < n_slots(), "copy from slot {} to {} of {}", from, to, n_slots());
  on_group_thread([&] {
    Command command{kCommandMagic, kCopy, to, n, 0, from};
    group_.broadcast(&command, sizeof command, 0);
    engine_.forward().copy_prefix(from, to, n);
  });
  return true;
}

std::vector<double> SplitEngine::rank_forward_seconds() const {
  std::vector<double> all;
  {
    std::lock_guard lock(report_mutex_);
    all = rank_seconds_;
  }
  all[0] = seconds(forward_nanoseconds_.load());  // rank 0's own figure is always current
  return all;
}

namespace {

// A follower's side of kEvalBatch: the steps and tokens rank 0 broadcasts, checked before any
// is used.
void follow_batch(parallel::Engine& engine, comm::Group& group, const Command& command, std::vector<int32_t>& words,
                  std::vector<model::SequenceStep>& steps) {
  const int32_t n_steps = command.slot, positions = command.n_tokens;
  if (n_steps < 1 || n_steps > engine.n_slots() || positions < n_steps || positions > engine.max_batch())
    throw FormatError(error_message("serve", "rank {}: rank 0 sent a batch of {} steps and {} positions (slots {}, batch {})",
                                    group.rank(), n_steps, positions, engine.n_slots(), engine.max_batch()));
  const size_t header = static_cast<size_t>(n_steps) * 3;
  words.resize(header + static_cast<size_t>(positions));
  group.broadcast(words.data(), words.size() * sizeof(int32_t), 0);
  steps.clear();
  size_t offset = header;
  for (int32_t i = 0; i < n_steps; ++i) {
    const BatchStep step{words[3 * i], words[3 * i + 1], words[3 * i + 2]};
    if (step.slot < 0 || step.slot >= engine.n_slots() || step.n_tokens < 1 ||
        step.n_tokens > static_cast<int32_t>(words.size() - offset))
      throw FormatError(error_message("serve", "rank {}: rank 0 sent a bad batch step {} (slot {}, {} tokens)",
                                      group.rank(), i, step.slot, step.n_tokens));
    steps.push_back({step.slot, std::span<const model::TokenId>(words).subspan(offset, static_cast<size_t>(step.n_tokens)),
                     step.pos});
    offset += static_cast<size_t>(step.n_tokens);
  }
  if (offset != words.size())
    throw FormatError(error_message("serve", "rank {}: rank 0 sent a batch whose steps cover {} of its {} positions",
                                    group.rank(), offset - header, positions));
  engine.eval_batch(steps);
}

}  // namespace

void follow_split_engine(parallel::Engine& engine, comm::Group& group) {
  std::vector<model::TokenId> tokens;
  std::vector<int32_t> batch_words;
  std::vector<model::SequenceStep> batch_steps;
  std::vector<double> reported(static_cast<size_t>(group.size()));
  int64_t forward_nanoseconds = 0;
  for (;;) {
    Command command{};
    group.broadcast(&command, sizeof command, 0);
    if (command.magic != kCommandMagic)
      throw FormatError(error_message("serve", "rank {}: rank 0 sent a command with bad magic {:#x}", group.rank(),
                                      command.magic));
    if (command.op == kStop) return;
    if (command.op == kReport) {
      const double mine = seconds(forward_nanoseconds);
      group.all_gather(&mine, reported.data(), sizeof mine);
      continue;
    }
    if (command.op == kCopy) {
      const model::TokenId from = command.token;
      if (from < 0 || from >= engine.n_slots() || command.slot < 0 || command.slot >= engine.n_slots() || command.pos < 0 ||
          command.pos > engine.forward().n_ctx())
        throw FormatError(error_message("serve", "rank {}: rank 0 sent a bad copy (slot {} to {}, {} positions)",
                                        group.rank(), from, command.slot, command.pos));
      engine.forward().copy_prefix(from, command.slot, command.pos);
      continue;
    }
    if (command.op == kEvalBatch) {
      const auto start = std::chrono::steady_clock::now();
      follow_batch(engine, group, command, batch_words, batch_steps);
      forward_nanoseconds +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      continue;
    }
    if (command.op != kEval || command.slot < 0 || command.slot >= engine.n_slots() || command.n_tokens < 0)
      throw FormatError(error_message("serve", "rank {}: rank 0 sent a bad command (op {}, slot {}, {} tokens)",
                                      group.rank(), command.op, command.slot, command.n_tokens));
    tokens.resize(static_cast<size_t>(command.n_tokens));
    if (command.n_tokens == 1) tokens[0] = command.token;
    else group.broadcast(tokens.data(), tokens.size() * sizeof(model::TokenId), 0);
    const auto start = std::chrono::steady_clock::now();
    engine.model(command.slot).eval(tokens, command.pos);
    forward_nanoseconds +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
}

}  // namespace orchard::serve
