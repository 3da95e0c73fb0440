// `orchard serve` with a scripted model, for the client tests: every reply is the text given on
// the command line (in the model file's tokens), whatever the prompt, so the official clients can
// be shown what the server makes of what a real model writes (a think block, Harmony's channels,
// a Mistral call) without such a model. All but the forward pass is the server's own: the chat
// template (picked from the file as `orchard serve` picks it), the scheduler, the reply parsers,
// the OpenAI and Ollama routes.
//   serve_scripted_server MODEL.gguf REPLY [TEMPLATE [PROMPT_LOG]]
// TEMPLATE is a family name as `orchard serve --chat-template` takes it ("auto": from the file),
// or the path of a file holding a Jinja chat template, served as if the model file carried it
// (the family and the template's quirks read from it as from a real model's).
// Prints "listening on http://127.0.0.1:PORT" and serves until SIGTERM or SIGINT. With
// PROMPT_LOG, each prompt's text (its tokens decoded, special tokens written out) is appended to
// that file, followed by a line "---".
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scripted_engine.h"
#include "serve/chat_templates.h"
#include "serve/metrics.h"
#include "serve/openai/routes.h"
#include "serve/openai/service.h"
#include "serve/scheduler.h"

namespace orchard::serve {
namespace {

int serve_script(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf REPLY [TEMPLATE [PROMPT_LOG]]\n", argv[0]);
    return 2;
  }
  const std::string family_name = argc > 3 ? argv[3] : "auto";
  const std::optional<ChatFamily> forced = parse_chat_family(family_name);
  std::optional<std::string> jinja;
  if (family_name != "auto" && !forced) {
    std::ifstream in(family_name);
    if (!in) {
      std::fprintf(stderr, "'%s' is neither a chat template family nor a readable template file\n", family_name.c_str());
      return 2;
    }
    jinja = std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Blocked before any thread starts, so that every thread leaves them to sigwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ScriptedEngine engine(argv[1], argv[2], argc > 4 ? argv[4] : "", jinja);
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
