#pragma once
// `orchard launch`: starts the ranks of a job, like mlx.launch. Over ssh, one rank per host of
// a hostfile (or one mpirun for the mpi backend); locally, N ranks of this machine. Every rank
// gets the environment comm::config_from_env() reads. The first rank to fail, or Ctrl-C, ends
// all ranks: no process is left behind.
#include <chrono>
#include <string>
#include <vector>

#include "comm/group.h"

namespace orchard::parallel {

struct HostEntry {
  std::string ssh;                     // how to reach the host ("user@mac-1", or an address)
  std::vector<std::string> endpoints;  // "ip:port" per interface, for the comm layer
  bool local = false;                  // this machine: its rank starts here, without ssh
};

// Reads an MLX-shaped hostfile (see comm/bootstrap.h for the accepted shapes).
std::vector<HostEntry> read_hostfile(const std::string& path, uint16_t base_port);

struct LaunchOptions {
  comm::Config base;                  // backend, timeout, link emulation; rank/world/endpoints are filled in
  std::vector<std::string> command;   // what each rank runs, e.g. {"orchard", "run", "-m", ...}
  std::string ssh_command = "ssh";    // replaced by tests with a local stand-in
  std::string working_directory;      // where remote ranks cd to (default: this one)
};

// Runs `command` on every host; returns the job's exit code (0 when every rank exited 0, else
// the first failure's code). Prints which rank failed and why on stderr (exit 255 from ssh: that
// ssh could not reach the host, and what to check).
int launch_on_hosts(const std::vector<HostEntry>& hosts, const LaunchOptions& options);

// Runs `command` as `world` ranks on this machine (exec'd children).
int launch_local(int world, const LaunchOptions& options);

}  // namespace orchard::parallel
