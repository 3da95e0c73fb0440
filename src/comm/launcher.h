#pragma once
// Starts the ranks of a job on this machine: for tests, for `bench-comm` run alone, and for
// `orchard run --world N`. Ring ranks get listening sockets opened by the launcher before the
// children start (no port is ever raced for), all ranks a fresh job secret. If a rank fails,
// the others get `grace` to fail on their own (they should: their calls time out or see the
// closed links), then are killed: no stray processes.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/group.h"

namespace orchard::comm {

struct RankExit {
  int rank = 0;
  bool signaled = false;
  int code = 0;  // exit code, or signal number when signaled
  bool ok() const { return !signaled && code == 0; }
  std::string describe() const;
};

struct LocalLaunchOptions {
  // After the first rank fails, how long the others may still run; default: the job's
  // timeout + 5 s.
  std::chrono::milliseconds grace{0};
  // Pin rank r to CPU r % cores where the system allows it (benchmarks).
  bool pin_cpus = false;
  // SIGINT is rank 0's to handle (an interactive rank 0: `orchard chat`'s Ctrl-C stops a
  // reply): the launcher passes it to rank 0 alone and does not count it as stopping the job.
  // SIGTERM and SIGHUP still go to every rank.
  bool ranks_take_interrupt = false;
};

// Forks `world` children; child r builds its Group from `base` (rank r, world `world`, local
// endpoints, a new secret unless base has one) and runs fn(group). The child exits 0 when fn
// returns, 1 (printing the error) when it throws. Returns every rank's exit, in rank order.
// Not for the mpi backend (use mpirun).
std::vector<RankExit> spawn_local_ranks(int world, const Config& base, const std::function<void(Group&)>& fn,
                                        const LocalLaunchOptions& options = {});

// Same, but each child execs argv with the job's environment (bootstrap.h): rank r finds its
// Config through config_from_env(). argv[0] must be a path.
std::vector<RankExit> exec_local_ranks(int world, const Config& base, const std::vector<std::string>& argv,
                                       const LocalLaunchOptions& options = {});

// Path of the running executable (to re-exec it as ranks).
std::string current_executable();

// A rank started by an agent gets the read end of a pipe whose write end only the agent holds
// (ORCHARD_WATCH_FD): when the agent ends, however it ends, the pipe closes and this process
// exits, on every OS (Linux's parent-death signal does not exist on macOS, and a rank's
// re-parenting is not a signal one can wait for). A no-op without the variable.
void exit_when_watched_pipe_closes();

// Pins the calling process to one CPU where the system allows it; a no-op elsewhere.
void pin_to_cpu(int index);

}  // namespace orchard::comm
