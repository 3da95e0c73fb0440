// `orchard doctor`: for this machine and every machine its agent knows, whether RDMA over
// Thunderbolt 5 is possible (and why not), which split suits its links, and how much model
// fits in its memory.
#include <iostream>

#include "cluster/agent.h"
#include "cluster/doctor.h"
#include "cluster/machine_probe.h"
#include "cluster_flags.h"
#include "commands.h"

namespace orchard::app {

void add_doctor_command(CLI::App& app) {
  struct Flags {
    ClusterFlags discovery;
    int threads = 0;
  };
  auto* cmd = app.add_subcommand("doctor", "Check each machine: RDMA over Thunderbolt 5, suitable splits, model sizes that fit");
  auto f = std::make_shared<Flags>();
  f->discovery.wait_s = 0;
  add_cluster_flags(cmd, f->discovery, "Without a local agent: seconds to listen for others");
  cmd->add_option("-t,--threads", f->threads, "Threads for measuring this machine (default: all cores)");
  cmd->callback([f] {
    const cluster::Topology t = f->discovery.find();
    std::cout << cluster::doctor_report(t, cluster::probe_machine(f->threads));
  });
}

}  // namespace orchard::app
