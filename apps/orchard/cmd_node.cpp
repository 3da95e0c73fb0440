#include <csignal>
#include <cstdio>
#include <filesystem>

#include "apps/orchard/cluster_flags.h"
#include "apps/orchard/commands.h"
#include "core/error.h"
#include "network/catalog.h"
#include "network/node_agent.h"
#include "network/pod.h"
#include "network/regions.h"

namespace orchard::app {
namespace {

struct NodeOptions {
  network::NodeAgentOptions agent;
  std::string idle_after = "5m";
  std::string max_memory;
  std::string models_dir = "models";
  std::string engine = "builtin";
  int threads = 0;
  int32_t max_context = 4096;
  int token_delay_ms = 0;
  std::string pod, pod_hostfile, pod_ssh = "ssh", pod_binary;
  // The cluster whose agents start the pod's ranks on hosts marked "agent": true.
  std::string pod_cluster = "orchard", pod_cluster_secret;
  int pod_rank = -1;
  uint16_t pod_port = comm::kDefaultBasePort;
  network::PodRankOptions rank;
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// "90s", "5m", "2h", or plain seconds.
int64_t parse_duration_ms(const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    std::string unit = s.substr(used);
    double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
    if (scale > 0) return static_cast<int64_t>(v * scale * 1000);
  } catch (const std::exception&) {
  }
  throw Error(error_message("node", "'{}' is not a duration (90s, 5m, 2h)", s));
}

// "48G", "512M", or plain bytes.
int64_t parse_bytes(const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    std::string unit = s.substr(used);
    double scale = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : unit == "T" ? 1e12 : -1;
    if (scale > 0) return static_cast<int64_t>(v * scale);
  } catch (const std::exception&) {
  }
  throw Error(error_message("node", "'{}' is not a size (48G, 512M)", s));
}

std::string default_key_file() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.orchard-node.key";
}

void need_network(const NodeOptions& o) {
  if (o.agent.network_url.empty()) throw Error(error_message("node", "--network URL is required"));
}

void run_node(NodeOptions& o) {
  need_network(o);
  auto& a = o.agent;
  a.idle.idle_after_ms = parse_duration_ms(o.idle_after);
  if (!a.region.empty() && network::listed_region(a.region).empty())
    std::fprintf(stderr,
                 "orchard node: region '%s' is not on Orchard's list of cities and countries (data/regions.json); "
                 "the network will not show where this machine is\n",
                 a.region.c_str());
  if (a.chip.empty()) a.chip = network::detect_chip();
  int64_t total = network::detect_memory_bytes();
  a.memory_bytes = o.max_memory.empty() ? total * 3 / 4 : std::min(total, parse_bytes(o.max_memory));
  if (a.bandwidth_gbs <= 0) {
    auto chip = network::HardwareCatalog::shipped().find(a.chip);
    a.bandwidth_gbs = chip ? chip->memory_bandwidth_gbs : 50;  // unknown hardware: a modest guess
  }
  auto engine = o.engine == "builtin"
                    ? network::make_builtin_engine(o.models_dir, o.threads, o.max_context, o.token_delay_ms)
                    : network::make_forwarding_engine(o.engine, o.models_dir);
  std::unique_ptr<network::Engine> pod_engine;
  if (o.pod.empty() != o.pod_hostfile.empty())
    throw Error(error_message("node", "--pod and --pod-hostfile go together: the pod's id and its machines"));
  if (!o.pod.empty()) {
    if (o.engine != "builtin")
      throw Error(error_message("node", "a pod runs its jobs with the built-in engine, not --engine {}", o.engine));
    auto pod = network::load_pod(o.pod, o.pod_hostfile, o.pod_rank, o.pod_port);
    pod.ssh_command = o.pod_ssh;
    pod.cluster = o.pod_cluster;
    pod.cluster_secret = o.pod_cluster_secret;
    if (!o.pod_binary.empty()) pod.binary = o.pod_binary;
    a.pod = network::pod_registration(pod);
    std::fprintf(stderr, "orchard node: member %d of pod '%s' (%zu hosts in %s)%s\n", pod.rank, pod.id.c_str(),
                 pod.hosts.size(), pod.hostfile.c_str(), pod.rank == 0 ? ", its leader" : "");
    if (pod.rank == 0)
      pod_engine = network::make_pod_engine(std::move(pod), o.models_dir, o.threads, o.max_context, o.token_delay_ms);
  }
  network::NodeAgent agent(a, std::move(engine), std::move(pod_engine));
  std::fprintf(stderr, "orchard node %s: %s, %.1f GB offered, %s\n", agent.node_id().substr(0, 16).c_str(),
               a.chip.c_str(), static_cast<double>(a.memory_bytes) / 1e9,
               network::IdleMonitor(a.idle).reason().c_str());
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  agent.run(g_stop);
}

void show_status(const NodeOptions& o) {
  need_network(o);
  auto key = network::NodeKey::load_or_create(o.agent.key_file);
  auto s = network::signed_call(key, o.agent.network_url, "GET", "/v1/ledger", {}, 10000);
  std::printf("node %s\nstate: %s%s\nseat: %s (%s)\njobs served: %lld (leases lost: %lld)\nreputation: %.2f\n"
              "earnings: %.6f credits\n",
              key.public_hex().c_str(),
              s.value("banned", false) ? "banned" : s.value("online", false) ? "online" : "offline",
              s.value("offering", false) ? ", offering" : "", s.value("seat", "").c_str(), s.value("tier", "").c_str(),
              static_cast<long long>(s.value("jobs_served", 0)), static_cast<long long>(s.value("jobs_failed", 0)),
              s.value("reputation", 0.0), static_cast<double>(s.value("balance", int64_t{0})) / 1e6);
}

}  // namespace

void add_node_command(CLI::App& app) {
  auto o = std::make_shared<NodeOptions>();
  o->agent.key_file = default_key_file();
  CLI::App* cmd = app.add_subcommand("node", "Lend this machine to a network while it is idle");
  auto common = [o](CLI::App* c) {
    c->add_option("--network", o->agent.network_url, "Coordinator URL (http://host:8700)");
    c->add_option("--key-file", o->agent.key_file, "This node's Ed25519 key (created if absent)")->capture_default_str();
  };
  common(cmd);
  cmd->add_flag("--dedicated", o->agent.idle.dedicated, "Dedicated seat: always offered");
  cmd->add_option("--idle-after", o->idle_after, "Owner away this long before lending")->capture_default_str();
  cmd->add_option("--max-load", o->agent.idle.max_load_per_core, "Load per core above which the owner is busy")
      ->capture_default_str();
  cmd->add_option("--activity-file", o->agent.idle.activity_file, "A file whose modification counts as owner input");
  cmd->add_option("--max-memory", o->max_memory, "Memory to offer (default: 3/4 of the machine's)");
  cmd->add_option("--models", o->models_dir, "Directory of GGUF models")->capture_default_str();
  cmd->add_option("--engine", o->engine, "builtin, or the URL of a local OpenAI-compatible server")->capture_default_str();
  cmd->add_option("--region", o->agent.region,
                  "Where the machine is, coarsely: a city or country from Orchard's list, e.g. \"Lisbon, PT\"");
  cmd->add_option("--name", o->agent.name, "A name shown on the World page");
  cmd->add_option("--chip", o->agent.chip, "Chip name (default: detected)");
  cmd->add_option("--bandwidth", o->agent.bandwidth_gbs, "Memory bandwidth in GB/s (default: from the catalog)");
  cmd->add_option("-t,--threads", o->threads, "Engine threads (default: all cores)");
  cmd->add_option("--max-context", o->max_context, "Largest context the built-in engine allocates")->capture_default_str();
  cmd->add_option("--token-delay-ms", o->token_delay_ms, "Slow every token down (demos, tests)")->capture_default_str();
  cmd->add_option("--pod", o->pod, "This machine is a member of the pod with this id (needs --pod-hostfile)");
  cmd->add_option("--pod-hostfile", o->pod_hostfile,
                  "The pod's machines, an MLX-style JSON hostfile as for orchard launch (the same file on every member)");
  cmd->add_option("--pod-rank", o->pod_rank, "This machine's entry in the pod hostfile (default: found from its addresses)");
  cmd->add_option("--pod-port", o->pod_port, "First port of the pod's ranks (rank r listens on port + r)")
      ->capture_default_str();
  cmd->add_option("--pod-ssh", o->pod_ssh, "ssh client the pod's leader starts ranks with")->capture_default_str();
  cmd->add_option("--pod-binary", o->pod_binary, "Path of orchard on the pod's machines (default: this one's)");
  add_cluster_identity_flags(cmd, o->pod_cluster, o->pod_cluster_secret,
                             "Secret of the cluster whose agents start the pod's ranks (hosts marked \"agent\": true)");
  CLI::App* status = cmd->add_subcommand("status", "Show this node's state, jobs served and earnings");
  common(status);
  // One rank of a pod job, started by the pod leader's `orchard launch`: not for people.
  CLI::App* rank = cmd->add_subcommand("pod-rank", "Run one rank of a pod job (started by the pod's leader)")->group("");
  rank->add_option("--model", o->rank.model_path, "GGUF file (read on rank 0)")->required();
  rank->add_option("--request-file", o->rank.request_file, "The job's request (read on rank 0)")->required();
  rank->add_option("--max-context", o->rank.max_context, "Largest context to allocate");
  rank->add_option("-t,--threads", o->rank.threads, "Threads (default: all cores)");
  rank->add_option("--token-delay-ms", o->rank.token_delay_ms, "Slow every token down (tests)");
  cmd->callback([o, cmd, status, rank] {
    if (cmd->got_subcommand(status) || cmd->got_subcommand(rank)) return;
    run_node(*o);
  });
  status->callback([o] { show_status(*o); });
  rank->callback([o] { network::run_pod_rank(o->rank); });
}

}  // namespace orchard::app
