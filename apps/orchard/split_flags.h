#pragma once
// The flags that split a command over ranks, shared by run, bench and serve.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

#include "parallel/split_run.h"

namespace orchard::app {

inline void add_split_flags(CLI::App* cmd, parallel::SplitOptions& o) {
  cmd->add_option("--world", o.world, "Start this many local ranks and split the model over them")->capture_default_str();
  cmd->add_option("--strategy", o.strategy, "single | pipeline | tensor | hybrid | auto (run, serve: the planner picks)")
      ->capture_default_str();
  cmd->add_option("--tp", o.tp, "Hybrid: ranks per tensor-parallel group");
  cmd->add_option("--pp", o.pp, "Hybrid: pipeline stages (tp = world / pp)");
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
  cmd->add_option("--backend", o.backend, "ring | shm | mpi (local ranks)")->capture_default_str();
  cmd->add_option("--link-latency-us", o.link_latency_us, "Emulated link latency per message");
  cmd->add_option("--link-gbps", o.link_gbps, "Emulated link bandwidth cap");
  cmd->add_option("--comm-timeout", o.timeout_s, "Seconds without progress before a peer is declared dead")
      ->capture_default_str();
  cmd->add_flag("--pin-cpus", o.pin_cpus, "Pin local rank r to CPU r");
}

}  // namespace orchard::app
