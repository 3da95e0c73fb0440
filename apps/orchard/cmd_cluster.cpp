// `orchard cluster`: the machines of this cluster and the link matrix, from the local agent or,
// without one, from the announcements heard for a few seconds.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cluster/agent.h"
#include "commands.h"

namespace orchard::app {

void add_cluster_command(CLI::App& app) {
  struct Flags {
    std::string cluster = "orchard", secret;
    uint16_t port = cluster::kDiscoveryPort, agent_port = cluster::kAgentPort;
    double wait_s = 3;
    bool json = false;
  };
  auto* cmd = app.add_subcommand("cluster", "Show the cluster's machines and measured links");
  auto f = std::make_shared<Flags>();
  if (const char* c = std::getenv("ORCHARD_CLUSTER")) f->cluster = c;
  if (const char* s = std::getenv("ORCHARD_CLUSTER_SECRET")) f->secret = s;
  cmd->add_option("--cluster", f->cluster, "Cluster name (env ORCHARD_CLUSTER)")->capture_default_str();
  cmd->add_option("--secret", f->secret, "Cluster secret (env ORCHARD_CLUSTER_SECRET)");
  cmd->add_option("--port", f->port, "UDP port of announcements")->capture_default_str();
  cmd->add_option("--agent-port", f->agent_port, "TCP port of the local agent")->capture_default_str();
  cmd->add_option("--wait", f->wait_s, "Without a local agent: seconds to listen")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON: {machines, links}");
  cmd->callback([f] {
    std::signal(SIGPIPE, SIG_IGN);  // an agent that vanishes mid-query is an error, not a crash
    const cluster::Topology t = cluster::find_cluster(f->cluster, f->secret, f->port, f->agent_port,
                                                      std::chrono::milliseconds(static_cast<int64_t>(f->wait_s * 1000)));
    if (f->json) std::cout << cluster::to_json(t).dump(2) << "\n";
    else std::cout << cluster::format_topology(t);
  });
}

}  // namespace orchard::app
