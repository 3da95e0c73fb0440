#pragma once
// Where the planner's facts about machines come from, for `orchard plan` and for the commands
// that plan for themselves (`run` and `serve` with --strategy auto): each host's agent, the
// hardware catalog (--chip), or this machine measured.
#include <string>
#include <vector>

#include "apps/orchard/cluster_flags.h"
#include "cluster/planner.h"

namespace orchard::app {

// What-if figures and catalog chips that replace measurement.
struct MachineOverrides {
  std::vector<std::string> chips;  // one for all machines, or one per machine
  double memory_gb = 0, memory_bw_gbs = 0, compute_gflops = 0;
  // One rank's decode bandwidth while the others sharing its machine wait (MachineSpec::
  // solo_memory_bw_gbs); 0: measured, or memory_bw_gbs when that is given.
  double solo_memory_bw_gbs = 0;
  int threads = 0;  // threads per rank when measuring this machine (0: all cores, shared)
};

// This machine, measured (once per process), as one of `count` ranks sharing it.
cluster::MachineSpec local_machine_spec(const MachineOverrides& o, const cluster::ModelFacts& model, int count, int index);

// Machine `index` as the catalog describes its chip (the largest memory it is sold with unless
// --memory says otherwise).
cluster::MachineSpec catalog_machine(const MachineOverrides& o, size_t index, const std::string& host);

// Fills r.machines and r.links for the hosts of an MLX-style hostfile, in its order: each
// host's agent when one answers, else the catalog (--chip), else this machine when the host is
// local. sources[i] says which ("agent", "catalog", "probe"). Throws Error naming a remote host
// nothing describes.
void hostfile_machines(const std::string& hostfile, const MachineOverrides& o, const ClusterFlags& discovery,
                       cluster::PlanRequest& r, std::vector<std::string>& sources);

}  // namespace orchard::app
