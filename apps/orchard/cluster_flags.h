#pragma once
// The flags that find this cluster's agents, shared by cluster, doctor and plan: the cluster's
// name and secret (defaults from ORCHARD_CLUSTER / ORCHARD_CLUSTER_SECRET), the ports, and how
// long to listen when no local agent answers.
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

// Which cluster's agents to believe: its name and secret.
inline void add_cluster_identity_flags(CLI::App* cmd, ClusterFlags& f) {
  if (const char* c = std::getenv("ORCHARD_CLUSTER")) f.cluster = c;
  if (const char* s = std::getenv("ORCHARD_CLUSTER_SECRET")) f.secret = s;
  cmd->add_option("--cluster", f.cluster, "Cluster name (env ORCHARD_CLUSTER)")->capture_default_str();
  cmd->add_option("--secret", f.secret, "Cluster secret (env ORCHARD_CLUSTER_SECRET)");
}

inline void add_cluster_flags(CLI::App* cmd, ClusterFlags& f, const std::string& wait_help) {
  add_cluster_identity_flags(cmd, f);
  cmd->add_option("--port", f.port, "UDP port of announcements")->capture_default_str();
  cmd->add_option("--agent-port", f.agent_port, "TCP port of the agents")->capture_default_str();
  cmd->add_option("--wait", f.wait_s, wait_help)->capture_default_str();
}

}  // namespace orchard::app
