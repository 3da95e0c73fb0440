#pragma once
// `orchard launch`: starts the ranks of a job, like mlx.launch. Over ssh or through the host's
// `orchard agent`, one rank per host of a hostfile (or one mpirun for the mpi backend); locally,
// N ranks of this machine. Every rank gets the environment comm::config_from_env() reads. The
// first rank to fail, or Ctrl-C, ends all ranks: no process is left behind.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/group.h"

namespace orchard::parallel {

struct HostEntry {
  std::string ssh;                     // how to reach the host ("user@mac-1", or an address)
  std::vector<std::string> endpoints;  // "ip:port" per interface, for the comm layer
  bool local = false;                  // this machine: its rank starts here, without ssh
  // "addr:port" of the host's `orchard agent`, which starts its rank instead of ssh ("addr:0":
  // the agent's default port, filled in by the caller). Empty: ssh.
  std::string agent;
};

// How a rank ended, as the launcher tells it.
struct RankEnd {
  int code = 0;        // exit code (128 + signal when killed); nonzero for a lost rank
  std::string detail;  // "exited with code 1", "killed by signal 9", "its agent at ... went away"
};

// A running rank, wherever it runs.
class RankProcess {
 public:
  virtual ~RankProcess() = default;
  // How it ended, once it has; never blocks.
  virtual std::optional<RankEnd> poll() = 0;
  // Asks it to stop (SIGTERM); it ends in its own way.
  virtual void terminate() = 0;
  // Ends it now.
  virtual void kill() = 0;
};

// What a rank runs: its environment (comm::config_to_env) and command.
struct RankCommand {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> command;  // command[0]: this binary
  std::string working_directory;
};
// Starts `host`'s rank through its agent (host.agent); throws Error naming the host when the
// agent refuses or cannot be reached.
using AgentStarter = std::function<std::unique_ptr<RankProcess>(const HostEntry& host, const RankCommand& rank)>;

// Reads an MLX-shaped hostfile (see comm/bootstrap.h for the accepted shapes).
std::vector<HostEntry> read_hostfile(const std::string& path, uint16_t base_port);

struct LaunchOptions {
  comm::Config base;                  // backend, timeout, link emulation; rank/world/endpoints are filled in
  std::vector<std::string> command;   // what each rank runs, e.g. {"orchard", "run", "-m", ...}
  std::string ssh_command = "ssh";    // replaced by tests with a local stand-in
  std::string working_directory;      // where remote ranks cd to (default: this one)
  AgentStarter start_by_agent;        // for hosts with an agent; unset: such hosts are an error
};

// Runs `command` on every host; returns the job's exit code (0 when every rank exited 0, else
// the first failure's code). Prints which rank failed and why on stderr (exit 255 from ssh: that
// ssh could not reach the host, and what to check; a lost agent: which machine).
int launch_on_hosts(const std::vector<HostEntry>& hosts, const LaunchOptions& options);

// A job whose first rank is this process and whose other ranks run on their hosts, started as
// launch_on_hosts starts them: for a command that needs its terminal (orchard chat), which
// reaches a rank of its own process and no remote one. The first host must be this machine
// (its rank listens here). The other ranks read no input (stdin: /dev/null). While it lives,
// a thread watches them: the first to end with a nonzero code is reported on stderr as
// launch_on_hosts reports it, the rest are stopped, and `on_lost(code)` is called on that
// thread (to end this process's rank, which is waiting for the lost one).
class HostedRanks {
 public:
  HostedRanks(const std::vector<HostEntry>& hosts, const LaunchOptions& options, std::function<void(int code)> on_lost);
  ~HostedRanks();  // stops the ranks that still run
  HostedRanks(const HostedRanks&) = delete;
  HostedRanks& operator=(const HostedRanks&) = delete;

  // This process's rank: rank 0 of the job, its endpoints and secret.
  const comm::Config& first_rank() const { return first_; }
  // Once this process's rank is done: waits up to `grace` for the others to end (they do once
  // rank 0 tells them to), stops those that don't; returns the job's exit code (0, or the
  // first failure's).
  int finish(std::chrono::milliseconds grace);

 private:
  struct Watch;
  comm::Config first_;
  std::unique_ptr<Watch> watch_;
};

// Runs `command` as `world` ranks on this machine (exec'd children).
int launch_local(int world, const LaunchOptions& options);

}  // namespace orchard::parallel
