#pragma once
// Runs a function as every rank of a split job: in this process alone (single), in N forked
// local ranks (`--world N`), or as the one rank this process is when `orchard launch` or
// mpirun started it (ORCHARD_WORLD / OMPI_COMM_WORLD_SIZE in the environment).
#include <functional>
#include <string>
#include <vector>

#include "comm/group.h"
#include "parallel/layout.h"

namespace orchard::parallel {

struct SplitOptions {
  int world = 1;
  std::string strategy = "single";
  int tp = 0;  // hybrid: ranks per tensor group
  int pp = 0;  // hybrid: pipeline stages (tp = world / pp)
  // Relative capacity of each pipeline stage (pipeline, hybrid) or each tensor rank (tensor),
  // for machines of unequal memory or speed; empty: pipeline stages by free memory, tensor
  // ranks equal.
  std::vector<double> split_weights;
  int expert_replicas = 0;  // expert: each layer's most chosen experts held by every rank (Layout)
  std::string backend = "shm";
  double link_latency_us = 0;
  double link_gbps = 0;
  double timeout_s = 10;
  bool pin_cpus = false;
  bool busy_poll = false;  // local ranks spin while they wait (comm::Config::busy_poll)
  // Local ranks (--world): Ctrl-C is the program's to handle (comm::LocalLaunchOptions).
  bool ranks_take_interrupt = false;
};

// Calls fn(group, layout) on every rank (group == nullptr for a single rank). Throws Error
// naming the first rank that failed.
void run_split(const SplitOptions& options, const std::function<void(comm::Group*, const Layout&)>& fn);

// Calls fn(group, layout) as the one rank `config` describes, this process being a rank of a job
// whose other ranks were started elsewhere (orchard chat's rank 0 of a hostfile's job).
void run_as_rank(const SplitOptions& options, const comm::Config& config,
                 const std::function<void(comm::Group*, const Layout&)>& fn);

// Threads each local rank should use when the user did not say: the cores shared out.
int threads_per_local_rank(const SplitOptions& options);

}  // namespace orchard::parallel
