#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "apps/orchard/cache_type_flag.h"
#include "apps/orchard/cluster_launch.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/expert_stats_flag.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/progress.h"
#include "apps/orchard/signal_stopper.h"
#include "apps/orchard/split_flags.h"
#include "cluster/agent.h"
#include "core/error.h"
#include "parallel/engine.h"
#include "serve/chat_page.h"
#include "serve/chat_templates.h"
#include "serve/local_engine.h"
#include "serve/split_engine.h"
#include "serve/metrics.h"
#include "serve/openai/routes.h"
#include "serve/openai/service.h"
#include "serve/scheduler.h"

namespace orchard::app {
namespace {

struct ServeOptions {
  serve::LocalEngineOptions engine;
  parallel::SplitOptions split;
  ClusterLaunchFlags cluster;
  serve::SchedulerOptions scheduler;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string chat_template = "auto";
  std::string api_key, api_key_file;
  std::vector<std::string> api_keys;  // read from the two above before the model loads
  std::string expert_stats_path;
};

// The keys clients must send: --api-key, and the lines of --api-key-file (blank lines and lines
// starting with # skipped). Throws Error for a key file that cannot be read or holds no key.
std::vector<std::string> read_api_keys(const ServeOptions& o) {
  std::vector<std::string> keys;
  if (!o.api_key.empty()) keys.push_back(o.api_key);
  if (!o.api_key_file.empty()) {
    std::ifstream in(o.api_key_file);
    if (!in) throw Error(error_message("serve", "cannot read the API key file {}", o.api_key_file));
    const size_t before = keys.size();
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (!line.empty() && line[0] != '#') keys.push_back(line);
    }
    if (keys.size() == before) throw Error(error_message("serve", "the API key file {} holds no key", o.api_key_file));
  }
  return keys;
}

// Runs the server on `engine` (the whole model here, or rank 0 of a split) until SIGINT/SIGTERM.
void serve_on(serve::Engine& engine, int threads, const ServeOptions& o, std::optional<serve::ChatFamily> forced) {
  const serve::ChatFamily family =
      forced ? *forced : serve::pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture);

  serve::Metrics metrics;
  serve::Scheduler scheduler(engine, metrics, o.scheduler);
  serve::openai::Service service(engine, scheduler, metrics, family);
  serve::openai::HttpOptions http;
  // Every request a slot or the queue holds keeps an HTTP thread; a few more answer /health,
  // /metrics and requests that are refused.
  http.threads = engine.n_slots() + o.scheduler.max_queue + 8;
  http.api_keys = o.api_keys;
  // The cluster page at /cluster.html: what the local agent knows (this machine alone without one).
  http.cluster_topology = [identity = o.cluster.discovery] {
    return cluster::local_cluster(identity.cluster, identity.secret, identity.agent_port, std::chrono::milliseconds(1000));
  };
  serve::openai::HttpServer server(service, metrics, http);
  const int port = server.bind(o.host, o.port);
  scheduler.start();

  std::fprintf(stderr, "serving '%s' (%s chat template, %d slots of %d positions, %d threads)\n", engine.info().id.c_str(),
               std::string(serve::chat_family_name(family)).c_str(), engine.n_slots(), scheduler.n_ctx(), threads);
  std::fprintf(stderr, "chat page at http://%s:%d/%s, cluster page at /cluster.html; OpenAI API under /v1, Ollama's under /api\n",
               o.host.c_str(), port, serve::kChatPageBuilt ? "" : " (not built: node/npm were missing at configure time)");
  // On stdout, one line, so that scripts and tests starting the server with --port 0 learn the port.
  std::printf("listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);

  SignalStopper stopper([&server] { server.stop(); });
  server.listen();
  std::fprintf(stderr, "stopped\n");
}

void serve_model(ServeOptions& o) {
  // A client that hangs up must cost its write, not the process.
  std::signal(SIGPIPE, SIG_IGN);

  o.api_keys = read_api_keys(o);
  std::optional<serve::ChatFamily> forced;
  if (o.chat_template != "auto") {
    forced = serve::parse_chat_family(o.chat_template);
    if (!forced) throw Error(error_message("serve", "unknown chat template '{}' (auto, llama2, llama3, chatml, mistral, deepseek, harmony)", o.chat_template));
  }

  check_split_flags(o.split);
  if (auto code = place_split(o.cluster, o.split, {o.engine.model_path, o.engine.n_ctx, o.engine.max_batch, o.engine.cache_type})) {
    if (*code != 0) std::exit(*code);
    return;
  }
  ProgressBar bar("loading " + o.engine.model_path);
  const bool split = o.split.world > 1 || o.split.strategy != "single" || std::getenv("ORCHARD_WORLD");
  if (!split) {
    // Before any thread starts, so that every thread inherits the mask.
    SignalStopper::block_signals();
    o.engine.on_progress = [&](size_t done, size_t total) { bar.update(done, total); };
    serve::LocalEngine engine(o.engine);
    bar.finish();
    std::fprintf(stderr, "%s\n", describe_kv_cache(engine.forward(), engine.n_slots()).c_str());
    ExpertStatsRecorder expert_stats(o.expert_stats_path, {&engine.forward()}, true, true);
    serve_on(engine, engine.threads(), o, forced);
    expert_stats.finish(nullptr);
    return;
  }
  parallel::EngineOptions options;
  options.model_path = o.engine.model_path;
  options.threads = o.engine.threads > 0 ? o.engine.threads : parallel::threads_per_local_rank(o.split);
  options.context = o.engine.n_ctx;
  options.batch = o.engine.max_batch;
  options.allow_repack = o.engine.allow_repack;
  options.n_slots = o.engine.n_slots;
  options.cache_type = o.engine.cache_type;
  // The launcher of local ranks forwards SIGINT/SIGTERM to them: rank 0 stops its server, which
  // tells the other ranks to stop (theirs stay blocked, so they finish in order).
  parallel::run_split(o.split, [&](comm::Group* group, const parallel::Layout& layout) {
    SignalStopper::block_signals();
    if (!group) throw Error(error_message("serve", "a split needs more than one rank (--world, or started by orchard launch)"));
    options.layout = layout;
    // Rank 0 records the routing it sees, which is every layer's only without pipeline stages.
    if (!o.expert_stats_path.empty() && layout.pp > 1)
      throw Error(error_message("serve", "--expert-stats records on rank 0, which holds only the first of {} pipeline "
                                         "stages; record with orchard run, or serve without stages",
                                layout.pp));
    if (group->rank() == 0) {
      options.on_load_progress = [&](size_t done, size_t total) { bar.update(done, total); };
      place_by_expert_stats(o.expert_stats_path, options.layout);
    }
    parallel::Engine engine(options, group);
    bar.finish();
    if (group->rank() != 0) {
      serve::follow_split_engine(engine, *group);
      return;
    }
    // Followers wait for rank 0's next command under the comm timeout: beat well inside it.
    const auto heartbeat = std::chrono::milliseconds(static_cast<int64_t>(o.split.timeout_s * 1000 / 4));
    std::fprintf(stderr, "rank 0's %s\n", describe_kv_cache(engine.forward(), engine.n_slots()).c_str());
    ExpertStatsRecorder expert_stats(o.expert_stats_path, {&engine.forward()}, true, true);
    serve::SplitEngine split_engine(engine, *group, o.engine.model_path, o.engine.alias, heartbeat);
    serve_on(split_engine, engine.pool().size(), o, forced);
    expert_stats.finish(nullptr);
  });
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over OpenAI- and Ollama-compatible HTTP APIs, with a chat page at /");
  cmd->add_option("-m,--model", o->engine.model_path, "GGUF model file (ranks of a split need it on rank 0 only)")
      ->required();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0: any free port)")->capture_default_str()->check(between(0, 65535));
  cmd->add_option("--parallel", o->engine.n_slots, "Requests generated at once (each has its own KV cache)")
      ->capture_default_str()
      ->check(between(1, 1024));
  cmd->add_option("--queue", o->scheduler.max_queue, "Requests that may wait for a slot; more get HTTP 429")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("-c,--ctx", o->engine.n_ctx, "Context length of each slot (default: the model's)")->check(at_least(0));
  add_cache_type_flag(cmd, o->engine.cache_type);
  cmd->add_option("-b,--batch", o->engine.max_batch, "Positions per forward pass at most, all slots together")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--prompt-chunk", o->scheduler.prompt_chunk,
                  "Prompt positions a slot processes per round (smaller: other slots wait less)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("-t,--threads", o->engine.threads, "Threads (default: all cores)")->check(at_least(0));
  cmd->add_option("--alias", o->engine.alias, "Model id clients use (default: the file name without .gguf)");
  cmd->add_option("--chat-template", o->chat_template, "auto | llama2 | llama3 | chatml | mistral | deepseek | harmony")
      ->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "Require this key from clients (Authorization: Bearer KEY); /health stays open");
  cmd->add_option("--api-key-file", o->api_key_file, "Require one of the keys in this file (one per line)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--no-repack", [o](int64_t) { o->engine.allow_repack = false; },
                "Use the file's weight layout as is (no interleaved copy)");
  add_split_flags(cmd, o->split);
  add_expert_stats_flag(cmd, o->expert_stats_path);
  add_cluster_launch_flags(cmd, o->cluster);
  cmd->callback([o] { serve_model(*o); });
}

}  // namespace orchard::app
