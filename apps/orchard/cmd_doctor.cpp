// `orchard doctor`: for this machine and every machine its agent knows, whether RDMA over
// Thunderbolt 5 is possible (and why not), which split suits its links, and how much model
// fits in its memory.
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "cluster/agent.h"
#include "cluster/doctor.h"
#include "cluster/machine_probe.h"
#include "commands.h"

namespace orchard::app {

void add_doctor_command(CLI::App& app) {
  struct Flags {
    std::string cluster = "orchard", secret;
    uint16_t port = cluster::kDiscoveryPort, agent_port = cluster::kAgentPort;
    double wait_s = 0;
    int threads = 0;
  };
  auto* cmd = app.add_subcommand("doctor", "Check each machine: RDMA over Thunderbolt 5, suitable splits, model sizes that fit");
  auto f = std::make_shared<Flags>();
  if (const char* c = std::getenv("ORCHARD_CLUSTER")) f->cluster = c;
  if (const char* s = std::getenv("ORCHARD_CLUSTER_SECRET")) f->secret = s;
  cmd->add_option("--cluster", f->cluster, "Cluster name (env ORCHARD_CLUSTER)")->capture_default_str();
  cmd->add_option("--secret", f->secret, "Cluster secret (env ORCHARD_CLUSTER_SECRET)");
  cmd->add_option("--port", f->port, "UDP port of announcements")->capture_default_str();
  cmd->add_option("--agent-port", f->agent_port, "TCP port of the local agent")->capture_default_str();
  cmd->add_option("--wait", f->wait_s, "Without a local agent: seconds to listen for others")->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads for measuring this machine (default: all cores)");
  cmd->callback([f] {
    std::signal(SIGPIPE, SIG_IGN);  // an agent that vanishes mid-query is an error, not a crash
    const cluster::Topology t = cluster::find_cluster(f->cluster, f->secret, f->port, f->agent_port,
                                                      std::chrono::milliseconds(static_cast<int64_t>(f->wait_s * 1000)));
    std::cout << cluster::doctor_report(t, cluster::probe_machine(f->threads));
  });
}

}  // namespace orchard::app
