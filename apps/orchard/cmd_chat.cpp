// orchard chat: a conversation in the terminal (serve::converse) on a LocalEngine, or on rank 0's
// SplitEngine of a split: --world ranks of this machine, or --hostfile/--discover hosts with
// rank 0 in this process.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
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
#include "parallel/launch.h"
#include "serve/chat_templates.h"
#include "serve/local_engine.h"
#include "serve/split_engine.h"
#include "serve/terminal_chat.h"

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
  bool hide_thinking = false;
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

// The conversation, on `engine` (one slot: the whole model here, or rank 0 of a split).
void converse(serve::Engine& engine, ChatOptions o, std::optional<serve::ChatFamily> forced) {
  const serve::ChatFamily family =
      forced ? *forced : serve::pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture);
  if (o.sampling.temperature > 0 && !o.seed_given) {
    std::random_device entropy;
    o.sampling.seed = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  }
  if (o.verbose && o.sampling.temperature > 0)
    std::fprintf(stderr, "seed %llu\n", static_cast<unsigned long long>(o.sampling.seed));
  install_interrupt_handler();
  serve::TerminalChatOptions t;
  t.sampling = o.sampling;
  t.max_tokens = o.max_tokens;
  t.system = o.system;
  t.show_thinking = !o.hide_thinking;
  t.prompts = isatty(STDIN_FILENO) != 0;
  t.dim = isatty(STDOUT_FILENO) != 0;
  t.verbose = o.verbose;
  serve::converse(engine, family, t, std::cin, std::cout, std::cerr, interrupted);
}

// --hostfile / --discover: rank 0 runs here, in the terminal's process (its stdin and Ctrl-C
// are the chat's), the other ranks on their hosts as `run` and `serve` start them. The
// launcher's own way, every rank started remotely, would leave the terminal with no rank to
// talk to.
void chat_on_hosts(const HostsLaunch& placed, const parallel::SplitOptions& split,
                   const std::function<void(comm::Group*, const parallel::Layout&)>& rank) {
  parallel::HostedRanks others(placed.hosts, placed.launch, [](int code) {
    // The launcher has said which rank ended and stopped the rest. Rank 0 may be waiting for a
    // line, or for the lost rank under the comm timeout: the chat ends now.
    std::fprintf(stderr, "orchard chat: a rank of the split is lost; the chat ends\n");
    std::fflush(stdout);
    std::_Exit(code);
  });
  try {
    parallel::run_as_rank(split, others.first_rank(), rank);
  } catch (...) {
    // Rank 0 failed, maybe because another rank did: let the launcher say which before the
    // error goes up.
    others.finish(std::chrono::seconds(2));
    throw;
  }
  // Rank 0's end of input told the others to stop.
  if (const int code = others.finish(std::chrono::seconds(10)); code != 0) std::exit(code);
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
  std::optional<HostsLaunch> placed =
      place_on_hosts(o.cluster, o.split, {o.engine.model_path, o.engine.n_ctx, o.engine.max_batch, o.engine.cache_type});
  if (placed && !host_is_this_machine(placed->hosts.front())) {
    const parallel::HostEntry& first = placed->hosts.front();
    throw Error(error_message("chat", "rank 0 runs in this terminal, so the first host must be this machine; {} ({}) is "
                                      "none of its addresses: put this machine first in the hostfile",
                              first.ssh, first.endpoints.empty() ? std::string() : first.endpoints.front()));
  }
  ProgressBar bar("loading " + o.engine.model_path);
  o.engine.n_slots = 1;
  const bool split = (placed && placed->hosts.size() > 1) || o.split.world > 1 || o.split.strategy != "single" ||
                     std::getenv("ORCHARD_WORLD");
  if (!split) {
    o.engine.on_progress = [&](size_t done, size_t total) { bar.update(done, total); };
    serve::LocalEngine engine(o.engine);
    bar.finish();
    converse(engine, o, forced);
    return;
  }
  parallel::EngineOptions options;
  options.model_path = o.engine.model_path;
  // Rank 0 of hosts is this machine's only rank: its cores are all its own.
  options.threads = o.engine.threads > 0 || placed ? o.engine.threads : parallel::threads_per_local_rank(o.split);
  options.context = o.engine.n_ctx;
  options.batch = o.engine.max_batch;
  options.allow_repack = o.engine.allow_repack;
  options.n_slots = 1;
  options.cache_type = o.engine.cache_type;
  // Ctrl-C stops a reply on rank 0; the launcher of local ranks leaves it alone, and the other
  // ranks block it (they stop when rank 0 tells them, at its end of input).
  o.split.ranks_take_interrupt = true;
  auto rank = [&](comm::Group* group, const parallel::Layout& layout) {
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
  };
  if (!placed) {
    parallel::run_split(o.split, rank);
    return;
  }
  chat_on_hosts(*placed, o.split, rank);
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
  cmd->add_flag("--hide-thinking,--hidethinking", o->hide_thinking,
                "Leave a reasoning model's thinking out (by default it is shown, dimmed, before the reply)");
  cmd->add_flag("--verbose", o->verbose, "After each reply, print its prompt (the rendered history) and reply token counts and speed");
  cmd->callback([o, seed] {
    ChatOptions options = *o;
    options.seed_given = seed->count() > 0;
    chat(std::move(options));
  });
}

}  // namespace orchard::app
