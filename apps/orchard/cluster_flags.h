#pragma once
// The flags that find this cluster's agents, shared by cluster, doctor and plan: the cluster's
// name and secret (defaults from ORCHARD_CLUSTER / ORCHARD_CLUSTER_SECRET, the secret also from
// a file), the ports, and how long to listen when no local agent answers.
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>

#include "cluster/agent.h"

namespace orchard::app {

struct ClusterFlags {
  std::string cluster = "orchard", secret;
  uint16_t port = cluster::kDiscoveryPort, agent_port = cluster::kAgentPort;
  double wait_s = 3;

  // The local agent's view, or what is heard for wait_s seconds.
  cluster::Topology find() const {
    std::signal(SIGPIPE, SIG_IGN);  // an agent that vanishes mid-query is an error, not a crash
    return cluster::find_cluster(cluster, secret, port, agent_port,
                                 std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
  }
};

// A cluster's name and secret, the same ways for every command that names one (the agent, the
// commands that ask agents, a network node whose pod's agents start its ranks): --cluster, and
// --secret or --secret-file (a file holding the secret, which keeps it out of the command lines
// that `ps` shows); by default ORCHARD_CLUSTER and ORCHARD_CLUSTER_SECRET. `secret_help` says
// what the secret is for. A --secret-file that cannot be read or is empty is an Error naming it.
void add_cluster_identity_flags(CLI::App* cmd, std::string& cluster, std::string& secret,
                                const std::string& secret_help = "Cluster secret");

// The secret a --secret-file holds: its text less the line break that ends it. Throws Error
// naming the file when it cannot be read or holds nothing.
std::string read_secret_file(const std::string& path);

// Which cluster's agents to believe: its name and secret.
inline void add_cluster_identity_flags(CLI::App* cmd, ClusterFlags& f) { add_cluster_identity_flags(cmd, f.cluster, f.secret); }

inline void add_cluster_flags(CLI::App* cmd, ClusterFlags& f, const std::string& wait_help) {
  add_cluster_identity_flags(cmd, f);
  cmd->add_option("--port", f.port, "UDP port of announcements")->capture_default_str();
  cmd->add_option("--agent-port", f.agent_port, "TCP port of the agents")->capture_default_str();
  cmd->add_option("--wait", f.wait_s, wait_help)->capture_default_str();
}

}  // namespace orchard::app
