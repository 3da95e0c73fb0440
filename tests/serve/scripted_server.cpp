// `orchard serve` with a scripted model, for the client tests: every reply is the text given on
// the command line (in the model file's tokens), whatever the prompt, so the official clients can
// be shown what the server makes of what a real model writes (a think block, Harmony's channels,
// a Mistral call) without such a model. All but the forward pass is the server's own: the chat
// template (picked from the file as `orchard serve` picks it), the scheduler, the reply parsers,
// the OpenAI and Ollama routes.
//   serve_scripted_server MODEL.gguf REPLY [TEMPLATE [PROMPT_LOG]]
// TEMPLATE is a family name as `orchard serve --chat-template` takes it ("auto": from the file).
// Prints "listening on http://127.0.0.1:PORT" and serves until SIGTERM or SIGINT. With
// PROMPT_LOG, each prompt's text (its tokens decoded, special tokens written out) is appended to
// that file, followed by a line "---".
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/config.h"
#include "model/gguf/reader.h"
#include "serve/chat_templates.h"
#include "serve/local_engine.h"
#include "serve/metrics.h"
#include "serve/openai/routes.h"
#include "serve/openai/service.h"
#include "serve/scheduler.h"

namespace orchard::serve {
namespace {

constexpr int32_t kContext = 4096;

// What every slot shares: the reply's tokens and the prompt log.
struct Script {
  std::vector<model::TokenId> reply;
  model::TokenId eos = -1;
  const model::Tokenizer* tokenizer = nullptr;
  std::string prompt_log;
  std::mutex log_mutex;

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
  int32_t n_ctx() const override { return kContext; }
  int32_t vocab_size() const override { return static_cast<int32_t>(logits_.size()); }

 private:
  Script& script_;
  std::vector<float> logits_;
  std::vector<model::TokenId> history_;
  int32_t end_ = -1;
  model::TokenId predicted_ = -1;
  size_t next_ = 0;
};

class ScriptedEngine : public Engine {
 public:
  ScriptedEngine(const std::string& model_path, const std::string& reply, const std::string& prompt_log)
      : file_(model::gguf::Reader::open(model_path)),
        tokenizer_(model::Tokenizer::from_gguf(file_)),
        info_(describe_model(model_path, "tiny", file_, model::ModelConfig::from_gguf(file_))) {
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

int serve_script(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf REPLY [TEMPLATE [PROMPT_LOG]]\n", argv[0]);
    return 2;
  }
  const std::string family_name = argc > 3 ? argv[3] : "auto";
  const std::optional<ChatFamily> forced = parse_chat_family(family_name);
  if (family_name != "auto" && !forced) {
    std::fprintf(stderr, "unknown chat template '%s'\n", family_name.c_str());
    return 2;
  }
  // Blocked before any thread starts, so that every thread leaves them to sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ScriptedEngine engine(argv[1], argv[2], argc > 4 ? argv[4] : "");
  Metrics metrics;
  Scheduler scheduler(engine, metrics, {});
  openai::Service service(engine, scheduler, metrics,
                          forced ? *forced : pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture));
  openai::HttpOptions http_options;
  http_options.threads = 8;
  http_options.probe_interval = std::chrono::milliseconds(100);
  openai::HttpServer http(service, metrics, http_options);
  const int port = http.bind("127.0.0.1", 0);
  scheduler.start();
  std::thread server([&] { http.listen(); });
  std::printf("listening on http://127.0.0.1:%d\n", port);
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  http.stop();
  server.join();
  return 0;
}

}  // namespace
}  // namespace orchard::serve

int main(int argc, char** argv) { return orchard::serve::serve_script(argc, argv); }
