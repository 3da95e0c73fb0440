#pragma once
// An Engine whose slots compute no transformer: each "predicts" a token chosen by a rule from
// the last token and position, over a vocabulary of single letters, so scheduler tests know
// every token and string that comes out. Every eval and every eval_batch call is logged.
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"

namespace orchard::serve::testing {

constexpr model::TokenId kEos = 2;
// Token of letter c ('a'..'z').
constexpr model::TokenId letter(char c) { return 3 + (c - 'a'); }

inline model::Tokenizer letter_tokenizer() {
  model::VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.kinds = {model::TokenKind::Unknown, model::TokenKind::Control, model::TokenKind::Control};
  for (char c = 'a'; c <= 'z'; ++c) {
    v.tokens.emplace_back(1, c);
    v.kinds.push_back(model::TokenKind::Normal);
  }
  v.unknown = 0;
  v.bos = 1;
  v.eos = kEos;
  return model::Tokenizer::from_vocab(v);
}

// The next letter after the last token, 'z' wrapping to 'a'.
inline model::TokenId next_letter(model::TokenId last, int32_t) {
  return last >= letter('a') && last < letter('z') ? last + 1 : letter('a');
}

struct EvalRecord {
  int32_t slot, pos, n;
};

class FakeModel : public model::TokenModel {
 public:
  using Rule = std::function<model::TokenId(model::TokenId last, int32_t next_pos)>;
  FakeModel(int32_t slot, int32_t n_ctx, int32_t max_batch, int32_t vocab, std::vector<EvalRecord>& log, const Rule& rule)
      : slot_(slot), n_ctx_(n_ctx), max_batch_(max_batch), log_(log), rule_(rule), logits_(vocab, 0.0f) {}

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override {
    if (tokens.empty() || static_cast<int32_t>(tokens.size()) > max_batch_ || pos < 0 ||
        pos + static_cast<int32_t>(tokens.size()) > n_ctx_)
      throw std::logic_error("eval outside the contract");
    log_.push_back({slot_, pos, static_cast<int32_t>(tokens.size())});
    const int32_t next_pos = pos + static_cast<int32_t>(tokens.size());
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    logits_.at(rule_(tokens.back(), next_pos)) = 10.0f;
  }
  const float* last_logits() const override { return logits_.data(); }
  int32_t max_batch() const override { return max_batch_; }
  int32_t n_ctx() const override { return n_ctx_; }
  int32_t vocab_size() const override { return static_cast<int32_t>(logits_.size()); }

 private:
  int32_t slot_, n_ctx_, max_batch_;
  std::vector<EvalRecord>& log_;
  const Rule& rule_;
  std::vector<float> logits_;
};

class FakeEngine : public Engine {
 public:
  // batch_limit: positions per eval_batch call, all slots together; 0: the default (none but
  // each slot's max_batch).
  explicit FakeEngine(int32_t n_slots, int32_t n_ctx = 256, int32_t max_batch = 512, FakeModel::Rule rule = next_letter,
                      int32_t batch_limit = 0)
      : tokenizer_(letter_tokenizer()), rule_(std::move(rule)), batch_limit_(batch_limit) {
    info_.id = "fake";
    info_.architecture = "llama";
    for (int32_t i = 0; i < n_slots; ++i) slots_.emplace_back(i, n_ctx, max_batch, tokenizer_.vocab_size(), log, rule_);
  }
  const ModelInfo& info() const override { return info_; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  int32_t n_slots() const override { return static_cast<int32_t>(slots_.size()); }
  model::TokenModel& slot(int32_t i) override { return slots_.at(i); }
  void eval_batch(std::span<const model::SequenceStep> steps) override {
    int32_t positions = 0;
    for (const auto& step : steps) positions += static_cast<int32_t>(step.tokens.size());
    if (steps.empty() || positions > max_batch()) throw std::logic_error("eval_batch outside the contract");
    batches.push_back(static_cast<int32_t>(steps.size()));
    Engine::eval_batch(steps);
  }
  int32_t max_batch() override { return batch_limit_ > 0 ? batch_limit_ : Engine::max_batch(); }
  std::vector<double> rank_forward_seconds() const override { return {0.0}; }

  std::vector<EvalRecord> log;  // every eval of every slot, in order
  std::vector<int32_t> batches;  // steps of each eval_batch call, in order

 private:
  ModelInfo info_;
  model::Tokenizer tokenizer_;
  FakeModel::Rule rule_;
  int32_t batch_limit_;
  std::vector<FakeModel> slots_;
};

// Token ids of a string of letters.
inline std::vector<model::TokenId> letters(std::string_view s) {
  std::vector<model::TokenId> out;
  for (char c : s) out.push_back(letter(c));
  return out;
}

}  // namespace orchard::serve::testing
