#pragma once
// The flags that split a command over ranks, shared by run, bench and serve.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

#include "apps/orchard/flag_ranges.h"
#include "core/error.h"
#include "parallel/split_run.h"

namespace orchard::app {

inline constexpr const char* kBusyPollHelp =
    "Ranks spin while they wait for each other instead of sleeping (ORCHARD_BUSY_POLL=1 does the same): for ranks "
    "with a core each, above all on virtual machines, where waking a sleeping rank is slow; not where ranks share "
    "cores";

inline void add_split_flags(CLI::App* cmd, parallel::SplitOptions& o) {
  cmd->add_option("--world", o.world, "Start this many local ranks and split the model over them")
      ->capture_default_str()
      ->check(between(1, 1024));
  cmd->add_option("--strategy", o.strategy,
                  "single | pipeline | tensor | hybrid | expert (experts split whole) | auto (run, serve: the planner "
                  "picks)")
      ->capture_default_str();
  cmd->add_option("--tp", o.tp, "Hybrid, expert: ranks per group inside a pipeline stage (a mixture of experts' groups split its experts, a dense model's its tensors)")->check(at_least(1));
  cmd->add_option("--pp", o.pp, "Hybrid, expert: pipeline stages (tp = world / pp)")->check(at_least(1));
  // One comma-separated word, so that a launcher can drop or replace it as one.
  cmd->add_option_function<std::string>(
      "--split-weights",
      [&o](const std::string& list) {
        o.split_weights.clear();
        std::stringstream words(list);
        for (std::string w; std::getline(words, w, ',');) {
          char* end = nullptr;
          const double value = std::strtod(w.c_str(), &end);
          if (w.empty() || *end != '\0') throw CLI::ValidationError("--split-weights", "'" + w + "' is not a number");
          o.split_weights.push_back(value);
        }
      },
      "Relative capacity of each pipeline stage (or tensor rank), comma-separated, e.g. 2,1");
  cmd->add_option("--expert-replicas", o.expert_replicas,
                  "Expert (and hybrid of a mixture of experts): each layer's N most chosen experts (by --expert-stats) are held by every rank, and each "
                  "token's choice of one is computed where the step's load is lighter")
      ->check(at_least(0));
  cmd->add_option("--backend", o.backend, "ring | shm | mpi (local ranks)")->capture_default_str();
  cmd->add_option("--link-latency-us", o.link_latency_us, "Emulated link latency per message, microseconds")
      ->check(at_least(0));
  add_renamed_option(cmd, "--link-gbit-s", "--link-gbps", o.link_gbps, "Emulated link bandwidth cap, gigabits/s", at_least(0));
  cmd->add_option("--comm-timeout", o.timeout_s, "Seconds without progress before a peer is declared dead")
      ->capture_default_str()
      ->check(above(0));
  cmd->add_flag("--pin-cpus", o.pin_cpus, "Pin local rank r to CPU r");
  cmd->add_flag("--busy-poll", o.busy_poll, kBusyPollHelp);
}

// Flags that contradict each other or the strategy, said before any rank starts: --tp/--pp
// outside hybrid would be ignored, hybrid without them and single on several ranks fail later
// inside every rank with a message that does not say which flag to give.
inline void check_split_flags(const parallel::SplitOptions& o) {
  if ((o.tp > 0 || o.pp > 0) && o.strategy != "hybrid" && o.strategy != "expert")
    throw Error(error_message("parallel", "--tp and --pp shape a hybrid or expert split; --strategy {} does not take them "
                                          "(tensor uses every rank as one tensor group, pipeline every rank as a stage)",
                              o.strategy));
  if (o.expert_replicas > 0 && o.strategy != "expert" && o.strategy != "hybrid")
    throw Error(error_message("parallel", "--expert-replicas replicates experts of an expert split; --strategy {} "
                                          "does not take it (pass --strategy expert, or hybrid for a mixture of experts)",
                              o.strategy));
  // Under `orchard launch` or mpirun the world is the launcher's, not --world.
  const char* launched = std::getenv("ORCHARD_WORLD");
  if (!launched) launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int world = launched ? std::atoi(launched) : o.world;
  const std::string ranks = launched ? fmt::format("this process is one of {} ranks a launcher started", world)
                                     : fmt::format("--world {}", world);
  if (o.strategy == "single" && world > 1)
    throw Error(error_message("parallel", "{} but --strategy is single (one rank): pass --strategy pipeline, tensor, "
                                          "expert, hybrid (with --tp or --pp){}",
                              ranks, launched ? "" : " or auto"));
  if (o.strategy == "hybrid" && o.tp == 0 && o.pp == 0)
    throw Error(error_message("parallel", "--strategy hybrid needs --tp N (ranks per tensor group) or --pp N (pipeline "
                                          "stages), N dividing the world of {} ranks",
                              world));
}

}  // namespace orchard::app
