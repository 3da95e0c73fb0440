// orchard chat: a conversation in the terminal. Each turn goes through the server's own request
// path (serve::openai::Service on a one-slot engine and its scheduler: a LocalEngine, or rank 0's
// SplitEngine of a split), so the prompt is the model's chat template over the whole history,
// exactly as `orchard serve` would render it, and stopping a reply is the scheduler's
// cancellation.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include "apps/orchard/cache_type_flag.h"
#include "apps/orchard/cluster_launch.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/progress.h"
#include "apps/orchard/sampling_flags.h"
#include "apps/orchard/signal_stopper.h"
#include "apps/orchard/split_flags.h"
#include "core/error.h"
#include "parallel/engine.h"
#include "serve/chat_templates.h"
#include "serve/local_engine.h"
#include "serve/metrics.h"
#include "serve/openai/service.h"
#include "serve/scheduler.h"
#include "serve/split_engine.h"

namespace orchard::app {
namespace {

struct ChatOptions {
  serve::LocalEngineOptions engine;
  parallel::SplitOptions split;
  ClusterLaunchFlags cluster;
  model::SamplerOptions sampling;
  bool seed_given = false;
  int32_t max_tokens = 0;  // per reply; 0: the rest of the context
  std::string system;
  std::string chat_template = "auto";
  bool verbose = false;
};

// Set by SIGINT: the reply being generated stops, the program goes on.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_interrupt(int) { interrupted = true; }

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  // A read of the next line resumes after Ctrl-C instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
}

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

struct Reply {
  std::string text;
  serve::FinishReason reason = serve::FinishReason::Stop;
  serve::Usage usage;
  std::string error;
};

// Prints the job's text as it comes; Ctrl-C cancels it (what was printed stays the reply).
// With a reply parser (Harmony), only the content is printed and kept, not the analysis.
Reply stream_reply(serve::Job& job, const std::shared_ptr<serve::structured::ToolCallParser>& parser) {
  Reply reply;
  auto print = [&](const std::string& text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    reply.text += text;
  };
  for (;;) {
    if (interrupted.exchange(false)) job.cancel();
    const serve::JobUpdate u = job.wait(std::chrono::milliseconds(100));
    print(parser ? parser->push(u.text).content : u.text);
    if (u.finished) {
      if (parser) print(parser->finish().last.content);
      reply.reason = u.finish_reason;
      reply.usage = u.usage;
      reply.error = u.error;
      return reply;
    }
  }
}

// The conversation, on `engine` (one slot: the whole model here, or rank 0 of a split).
void converse(serve::Engine& engine, ChatOptions o, std::optional<serve::ChatFamily> forced) {
  const serve::ChatFamily family =
      forced ? *forced : serve::pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture);
  serve::Metrics metrics;
  // One place in the queue: a turn may arrive before the previous reply's slot is marked free.
  serve::Scheduler scheduler(engine, metrics, {.max_queue = 1});
  serve::openai::Service service(engine, scheduler, metrics, family);
  scheduler.start();

  if (o.sampling.temperature > 0 && !o.seed_given) {
    std::random_device entropy;
    o.sampling.seed = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  }
  const bool terminal = isatty(STDIN_FILENO) != 0;
  if (terminal)
    std::fprintf(stderr, "%s (%s chat template, %d positions). Ctrl-C stops a reply; /clear forgets the conversation; "
                         "Ctrl-D or /exit quits.\n",
                 engine.info().id.c_str(), std::string(serve::chat_family_name(family)).c_str(), scheduler.n_ctx());
  if (o.verbose && o.sampling.temperature > 0)
    std::fprintf(stderr, "seed %llu\n", static_cast<unsigned long long>(o.sampling.seed));
  install_interrupt_handler();

  std::vector<serve::ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  const size_t kept = history.size();
  int turn = 0;
  for (std::string line;;) {
    if (terminal) {
      std::fputs(">>> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    interrupted = false;  // a Ctrl-C while typing stops nothing
    line = trimmed(line);
    if (line.empty()) continue;
    if (line == "/exit" || line == "/bye") break;
    if (line == "/clear") {
      history.resize(kept);
      std::fprintf(stderr, "(the conversation is forgotten)\n");
      continue;
    }
    history.push_back({"user", line});
    serve::openai::ApiRequest request;
    request.messages = history;
    request.sampling = o.sampling;
    request.seeded = true;
    request.default_max_tokens = o.max_tokens;
    serve::openai::Started started;
    try {
      started = service.start(std::move(request));
    } catch (const serve::openai::ApiError& e) {
      history.pop_back();
      std::fprintf(stderr, "orchard chat: %s%s\n", e.message().c_str(),
                   e.code() == "context_length_exceeded" ? " (/clear starts a new conversation)" : "");
      continue;
    }
    const Reply reply = stream_reply(*started.job, started.tool_parser);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (reply.reason == serve::FinishReason::Error) {
      history.pop_back();
      std::fprintf(stderr, "orchard chat: the reply failed: %s\n", reply.error.c_str());
      continue;
    }
    if (reply.reason == serve::FinishReason::Cancelled) std::fprintf(stderr, "(stopped)\n");
    history.push_back({"assistant", reply.text});
    ++turn;
    if (o.verbose) {
      const double rate = reply.usage.generation_seconds > 0 ? reply.usage.completion_tokens / reply.usage.generation_seconds : 0;
      std::fprintf(stderr, "[turn %d: prompt %d tokens, reply %d tokens (%s), %.1f tok/s]\n", turn, reply.usage.prompt_tokens,
                   reply.usage.completion_tokens, std::string(serve::finish_reason_name(reply.reason)).c_str(), rate);
    }
  }
  if (terminal) std::fputs("\n", stdout);
}

void chat(ChatOptions o) {
  std::optional<serve::ChatFamily> forced;
  if (o.chat_template != "auto") {
    forced = serve::parse_chat_family(o.chat_template);
    if (!forced)
      throw Error(error_message("chat", "unknown chat template '{}' (auto, llama2, llama3, chatml, mistral, deepseek, harmony)",
                                o.chat_template));
  }
  check_split_flags(o.split);
  if (auto code = place_split(o.cluster, o.split, {o.engine.model_path, o.engine.n_ctx, o.engine.max_batch, o.engine.cache_type})) {
    if (*code != 0) std::exit(*code);
    return;
  }
  ProgressBar bar("loading " + o.engine.model_path);
  o.engine.n_slots = 1;
  const bool split = o.split.world > 1 || o.split.strategy != "single" || std::getenv("ORCHARD_WORLD");
  if (!split) {
    o.engine.on_progress = [&](size_t done, size_t total) { bar.update(done, total); };
    serve::LocalEngine engine(o.engine);
    bar.finish();
    converse(engine, o, forced);
    return;
  }
  parallel::EngineOptions options;
  options.model_path = o.engine.model_path;
  options.threads = o.engine.threads > 0 ? o.engine.threads : parallel::threads_per_local_rank(o.split);
  options.context = o.engine.n_ctx;
  options.batch = o.engine.max_batch;
  options.allow_repack = o.engine.allow_repack;
  options.n_slots = 1;
  options.cache_type = o.engine.cache_type;
  // Ctrl-C stops a reply on rank 0; the launcher of local ranks leaves it alone, and the other
  // ranks block it (they stop when rank 0 tells them, at its end of input).
  o.split.ranks_take_interrupt = true;
  parallel::run_split(o.split, [&](comm::Group* group, const parallel::Layout& layout) {
    if (!group) throw Error(error_message("chat", "a split needs more than one rank (--world, or started by orchard launch)"));
    if (group->rank() != 0) SignalStopper::block_signals();
    options.layout = layout;
    if (group->rank() == 0) options.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
    parallel::Engine engine(options, group);
    bar.finish();
    if (group->rank() != 0) {
      serve::follow_split_engine(engine, *group);
      return;
    }
    // Followers wait for rank 0's next command under the comm timeout: beat well inside it,
    // also while a person types.
    const auto heartbeat = std::chrono::milliseconds(static_cast<int64_t>(o.split.timeout_s * 1000 / 4));
    serve::SplitEngine split_engine(engine, *group, o.engine.model_path, o.engine.alias, heartbeat);
    converse(split_engine, o, forced);
  });
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (its chat template, the history kept across turns)");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file")->required();
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Tokens per reply at most (0: up to the context's end)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--system", o->system, "A system message opening the conversation");
  CLI::Option* seed = add_sampling_flags(cmd, o->sampling, "Sampling seed (default: a random one)");
  cmd->add_option("-t,--threads", o->engine.threads, "Threads (default: all cores)")->check(at_least(0));
  cmd->add_option("-c,--ctx", o->engine.n_ctx, "Context length, the whole conversation's (default: the model's)")->check(at_least(0));
  cmd->add_option("-b,--batch", o->engine.max_batch, "Prompt positions per forward pass")->capture_default_str()->check(at_least(1));
  add_cache_type_flag(cmd, o->engine.cache_type);
  cmd->add_option("--chat-template", o->chat_template, "auto | llama2 | llama3 | chatml | mistral | deepseek | harmony")
      ->capture_default_str();
  cmd->add_flag("--no-repack", [o](int64_t) { o->engine.allow_repack = false; },
                "Use the file's weight layout as is (no interleaved copy)");
  add_split_flags(cmd, o->split);
  add_cluster_launch_flags(cmd, o->cluster);
  cmd->add_flag("--verbose", o->verbose, "After each reply, print its prompt (the rendered history) and reply token counts and speed");
  cmd->callback([o, seed] {
    ChatOptions options = *o;
    options.seed_given = seed->count() > 0;
    chat(std::move(options));
  });
}

}  // namespace orchard::app
