#pragma once
// `run` and `serve` on a cluster: --hostfile or --discover start this same command as one rank
// per machine (through each machine's `orchard agent`, or over ssh as `orchard launch` does),
// and --strategy auto asks the planner which split, and which of the machines, to use.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "apps/orchard/cluster_flags.h"
#include "model/kv_cache.h"
#include "parallel/launch.h"
#include "parallel/split_run.h"

namespace orchard::app {

struct ClusterLaunchFlags {
  std::string hostfile;
  bool discover = false;
  std::string ssh = "ssh";
  CLI::Option* ssh_option = nullptr;  // given: --discover reaches the other machines over ssh
  ClusterFlags discovery;
};

// --hostfile, --discover, --ssh, --cluster, --secret.
void add_cluster_launch_flags(CLI::App* cmd, ClusterLaunchFlags& f);

// Hostfile entries with "agent": true (read_hostfile's "addr:0") get the agents' port, and
// `launch` asks those agents, as members of `cluster`, to start their ranks.
void start_ranks_by_agents(std::vector<parallel::HostEntry>& hosts, const ClusterFlags& cluster,
                           parallel::LaunchOptions& launch);

// Keeps the process's command line (main calls it first), so that a command can start itself
// on other machines.
void remember_command_line(int argc, char** argv);

// What the planner needs to know about the job besides the machines.
struct SplitJob {
  std::string model_path;
  int32_t context = 0;  // 0: the model's
  int32_t batch = 512;
  model::KvType cache_type = model::KvType::F16;
};

// Decides where `split` runs. Resolves --strategy auto with the planner (over the hostfile's or
// the discovered machines, or this machine's --world ranks), printing its explanation on
// stderr. With --hostfile or --discover, starts this command as the chosen hosts' ranks and
// returns the job's exit code; nullopt: run here (one rank, --world local ranks, or this
// process is a rank of a launched job). Throws Error for flags that contradict each other.
std::optional<int> place_split(const ClusterLaunchFlags& flags, parallel::SplitOptions& split, const SplitJob& job);

// The hosts a split's ranks start on (in rank order), and how to start them.
struct HostsLaunch {
  std::vector<parallel::HostEntry> hosts;
  parallel::LaunchOptions launch;
};
// place_split, less the start: nullopt where place_split returns nullopt, else the ranks it
// would start (for a command that runs rank 0 itself: chat, whose terminal is here).
std::optional<HostsLaunch> place_on_hosts(const ClusterLaunchFlags& flags, parallel::SplitOptions& split, const SplitJob& job);

// Whether `host` is this machine: its first endpoint is a loopback address or one of this
// machine's interfaces.
bool host_is_this_machine(const parallel::HostEntry& host);

}  // namespace orchard::app
