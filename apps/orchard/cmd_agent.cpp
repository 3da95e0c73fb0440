// `orchard agent`: announces this machine to its cluster, measures the links to the others,
// answers `orchard cluster`, `plan` and `doctor`, and starts the ranks that `run`/`serve`/`chat
// --discover` ask it for, until SIGINT or SIGTERM.
#include <csignal>
#include <spdlog/spdlog.h>

#include "apps/orchard/cluster_flags.h"
#include "cluster/agent.h"
#include "commands.h"

namespace orchard::app {
namespace {

std::atomic<bool> g_stop{false};

void request_stop(int) { g_stop = true; }

}  // namespace

void add_agent_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("agent", "Announce this machine on the LAN and measure links to the cluster's others");
  auto o = std::make_shared<cluster::AgentOptions>();
  auto probe_every_s = std::make_shared<double>(30);
  add_cluster_identity_flags(cmd, o->cluster, o->secret, "Cluster secret: announcements and probes are signed with it");
  cmd->add_option("--port", o->port, "UDP port of announcements")->capture_default_str();
  cmd->add_option("--agent-port", o->agent_port, "TCP port for link probes and queries")->capture_default_str();
  cmd->add_option("--models", o->models_dir, "Directory whose .gguf files are announced");
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Where the ranks this agent starts keep the model shards they receive (default: ORCHARD_CACHE_DIR, "
                  "else ~/.cache/orchard)");
  cmd->add_option("--probe-every", *probe_every_s, "Seconds between measurements of each link")->capture_default_str();
  cmd->add_option("--probe-mb", o->probe.bulk_bytes, "Bytes sent to measure a link's bandwidth")
      ->transform([](std::string s) { return std::to_string(std::stoull(s) << 20); });
  cmd->add_option("-t,--threads", o->probe_threads, "Threads for the start-up bandwidth probe (default: all cores)");
  cmd->add_flag("!--no-measure", o->measure_machine, "Skip the start-up memory bandwidth and compute probe");
  cmd->callback([o, probe_every_s] {
    o->probe_every = std::chrono::milliseconds(static_cast<int64_t>(*probe_every_s * 1000));
    std::signal(SIGPIPE, SIG_IGN);  // a peer that vanishes mid-probe is an error, not a crash
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    cluster::Agent agent(*o);
    const cluster::Announcement& me = agent.self();
    spdlog::info("[cluster] agent {} on {} ({}) in cluster '{}': UDP {}, TCP {}; decode {:.1f} GB/s, {:.0f} GFLOP/s",
                 me.node_id, me.hostname, me.chip.empty() ? me.cpu_brand : me.chip, o->cluster, o->port, o->agent_port,
                 me.decode_gbs, me.compute_gflops);
    agent.run(g_stop);
  });
}

}  // namespace orchard::app
