#include <cstdlib>

#include "apps/orchard/cluster_launch.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/split_flags.h"
#include "comm/bootstrap.h"
#include "parallel/launch.h"

namespace orchard::app {

void add_launch_command(CLI::App& app) {
  struct Options {
    std::string hostfile;
    int local_ranks = 0;
    std::string backend = "ring";
    uint16_t port = comm::kDefaultBasePort;
    double timeout_s = 10;
    double link_latency_us = 0;
    double link_gbps = 0;
    bool busy_poll = false;
    std::string ssh = "ssh";
    ClusterFlags agents;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start a command as the ranks of a job: one per host of a hostfile (over ssh, or by the host's "
                "`orchard agent`), or N on this machine");
  cmd->add_option("--hostfile", o->hostfile,
                  "MLX-style JSON hostfile: [{\"ssh\": ..., \"ips\": [...]}, ...]; an entry with \"agent\": true (or "
                  "\"address[:port]\") is started by its agent, which runs `orchard run`, `serve` and `node pod-rank`");
  cmd->add_option("-n", o->local_ranks, "Start this many ranks on this machine")->check(between(1, 1024));
  cmd->add_option("--backend", o->backend, "ring | shm | mpi")->capture_default_str();
  cmd->add_option("--port", o->port, "First port of the ranks (rank r listens on port + r)")
      ->capture_default_str()
      ->check(between(1, 65535));
  cmd->add_option("--comm-timeout", o->timeout_s, "Seconds without progress before a peer is declared dead")
      ->capture_default_str()
      ->check(above(0));
  cmd->add_option("--link-latency-us", o->link_latency_us, "Emulated link latency per message, microseconds")
      ->check(at_least(0));
  add_renamed_option(cmd, "--link-gbit-s", "--link-gbps", o->link_gbps, "Emulated link bandwidth cap, gigabits/s", at_least(0));
  cmd->add_flag("--busy-poll", o->busy_poll, kBusyPollHelp);
  cmd->add_option("--ssh", o->ssh, "ssh client to use")->capture_default_str();
  add_cluster_identity_flags(cmd, o->agents);
  cmd->add_option("--agent-port", o->agents.agent_port, "TCP port of the agents of \"agent\": true hosts")
      ->capture_default_str();
  cmd->add_option("command", o->command, "The command each rank runs (after --)")->required();
  cmd->positionals_at_end();
  cmd->callback([o] {
    if (o->hostfile.empty() == (o->local_ranks == 0))
      throw Error(error_message("launch", "give either --hostfile or -n"));
    parallel::LaunchOptions options;
    options.base.backend = comm::parse_backend(o->backend);
    options.base.timeout = std::chrono::milliseconds(static_cast<int64_t>(o->timeout_s * 1000));
    options.base.link.latency_us = o->link_latency_us;
    options.base.link.gbps = o->link_gbps;
    options.base.busy_poll = o->busy_poll || comm::busy_poll_from_env();
    options.command = o->command;
    options.ssh_command = o->ssh;
    int code = 0;
    if (o->hostfile.empty()) {
      code = parallel::launch_local(o->local_ranks, options);
    } else {
      std::vector<parallel::HostEntry> hosts = parallel::read_hostfile(o->hostfile, o->port);
      start_ranks_by_agents(hosts, o->agents, options);
      code = parallel::launch_on_hosts(hosts, options);
    }
    if (code != 0) std::exit(code);
  });
}

}  // namespace orchard::app
