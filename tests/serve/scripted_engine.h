#pragma once
// An engine whose every reply is a given text (in the model file's tokens), whatever the prompt:
// what a reasoning model writes (a think block, Harmony's channels, a Mistral call) without such
// a model. All but the forward pass is real: the file's tokenizer and chat template metadata.
// A slot predicts the script's next token after its prompt; each prompt's text can be logged.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf/reader.h"
#include "serve/local_engine.h"

namespace orchard::serve {

inline constexpr int32_t kScriptedContext = 4096;

// What every slot shares: the reply's tokens and the prompt log.
struct Script {
  std::vector<model::TokenId> reply;
  model::TokenId eos = -1;
  const model::Tokenizer* tokenizer = nullptr;
  std::string prompt_log;
  std::mutex log_mutex;

  // Appends the prompt's text (special tokens written out) and a line "---" to prompt_log.
  void log_prompt(std::span<const model::TokenId> prompt) {
    if (prompt_log.empty()) return;
    // Runs of tokens decoded together (a character may span tokens); control tokens, which
    // decode to nothing, as their text.
    std::string text;
    size_t run = 0;
    for (size_t i = 0; i <= prompt.size(); ++i) {
      if (i < prompt.size() && tokenizer->token_kind(prompt[i]) != model::TokenKind::Control) continue;
      text += tokenizer->decode(prompt.subspan(run, i - run));
      if (i < prompt.size()) text += tokenizer->token_text(prompt[i]);
      run = i + 1;
    }
    std::lock_guard lock(log_mutex);
    std::ofstream(prompt_log, std::ios::app) << text << "\n---\n";
  }
};

// A slot that predicts the script's next token after its prompt. A step continues the reply when
// it is one token, the one predicted, right after the last; any other step ends a prompt, and the
// reply starts again.
class ScriptedModel : public model::TokenModel {
 public:
  ScriptedModel(Script& script, int32_t vocab) : script_(script), logits_(vocab) {}

  void eval(std::span<const model::TokenId> tokens, int32_t pos) override {
    history_.resize(static_cast<size_t>(pos));
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    const bool continues = tokens.size() == 1 && pos == end_ && tokens[0] == predicted_ && next_ > 0;
    if (!continues) {
      next_ = 0;
      script_.log_prompt(history_);
    }
    end_ = pos + static_cast<int32_t>(tokens.size());
    predicted_ = next_ < script_.reply.size() ? script_.reply[next_] : script_.eos;
    ++next_;
    std::fill(logits_.begin(), logits_.end(), -std::numeric_limits<float>::infinity());
    logits_[static_cast<size_t>(predicted_)] = 0.0f;
  }
  const float* last_logits() const override { return logits_.data(); }
  int32_t max_batch() const override { return 512; }
  int32_t n_ctx() const override { return kScriptedContext; }
  int32_t vocab_size() const override { return static_cast<int32_t>(logits_.size()); }

 private:
  Script& script_;
  std::vector<float> logits_;
  std::vector<model::TokenId> history_;
  int32_t end_ = -1;
  model::TokenId predicted_ = -1;
  size_t next_ = 0;
};

// chat_template: the Jinja template to serve the file as if it carried (nullopt: its own).
class ScriptedEngine : public Engine {
 public:
  ScriptedEngine(const std::string& model_path, const std::string& reply, const std::string& prompt_log,
                 std::optional<std::string> chat_template)
      : file_(model::gguf::Reader::open(model_path)),
        tokenizer_(model::Tokenizer::from_gguf(file_)),
        info_(describe_model(model_path, "tiny", file_, model::ModelConfig::from_gguf(file_))) {
    if (chat_template) info_.chat_template = std::move(*chat_template);
    script_.reply = tokenizer_.encode(reply, false, true);
    script_.eos = tokenizer_.eos();
    script_.tokenizer = &tokenizer_;
    script_.prompt_log = prompt_log;
    for (int i = 0; i < 2; ++i) slots_.emplace_back(script_, tokenizer_.vocab_size());
  }
  const ModelInfo& info() const override { return info_; }
  const model::Tokenizer& tokenizer() const override { return tokenizer_; }
  int32_t n_slots() const override { return static_cast<int32_t>(slots_.size()); }
  model::TokenModel& slot(int32_t i) override { return slots_.at(static_cast<size_t>(i)); }
  std::vector<double> rank_forward_seconds() const override { return {0.0}; }

 private:
  model::gguf::Reader file_;
  model::Tokenizer tokenizer_;
  ModelInfo info_;
  Script script_;
  std::vector<ScriptedModel> slots_;
};

}  // namespace orchard::serve
