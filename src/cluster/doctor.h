#pragma once
// What `orchard doctor` tells a user about each machine: whether RDMA over Thunderbolt 5 is
// possible and why not, which split suits its links, and how large a model fits.
#include <string>

#include "cluster/machine_probe.h"
#include "cluster/topology.h"

namespace orchard::cluster {

struct RdmaVerdict {
  bool possible = false;
  std::string reason;
};

// RDMA over Thunderbolt 5 needs macOS 26.2 or later on a chip with Thunderbolt 5.
RdmaVerdict rdma_verdict(const std::string& os, const std::string& os_version, const std::string& chip,
                         const std::string& cpu_brand);

// Parameters (billions) whose weights fit the machine's usable memory at `bits_per_weight`,
// after the runtime's fixed overhead (KV cache not counted: it depends on the context).
double fitting_params_billion(double memory_gb, double bits_per_weight);

// The report for this machine (detected now, with `local` measurements) and every other
// machine of `t`.
std::string doctor_report(const Topology& t, const MachineProbe& local);

}  // namespace orchard::cluster
