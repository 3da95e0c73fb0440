// `orchard cluster`: the machines of this cluster and the link matrix, from the local agent or,
// without one, from the announcements heard for a few seconds.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cluster/agent.h"
#include "cluster_flags.h"
#include "commands.h"

namespace orchard::app {

void add_cluster_command(CLI::App& app) {
  struct Flags {
    ClusterFlags discovery;
    bool json = false;
  };
  auto* cmd = app.add_subcommand("cluster", "Show the cluster's machines and measured links");
  auto f = std::make_shared<Flags>();
  add_cluster_flags(cmd, f->discovery, "Without a local agent: seconds to listen");
  cmd->add_flag("--json", f->json, "Print JSON: {machines, links}");
  cmd->callback([f] {
    const cluster::Topology t = f->discovery.find();
    if (f->json) std::cout << cluster::to_json(t).dump(2) << "\n";
    else std::cout << cluster::format_topology(t);
  });
}

}  // namespace orchard::app
