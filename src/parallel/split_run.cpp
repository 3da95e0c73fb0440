#include "parallel/split_run.h"

#include <cstdlib>
#include <cstdio>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "core/error.h"

namespace orchard::parallel {
namespace {

int tensor_group_size(const SplitOptions& o, int world) {
  if (o.pp > 0 && o.tp > 0 && o.pp * o.tp != world)
    throw Error(error_message("parallel", "--tp {} × --pp {} is not the world of {} ranks", o.tp, o.pp, world));
  if (o.tp > 0) return o.tp;
  if (o.pp > 0 && world % o.pp == 0) return world / o.pp;
  if (o.pp > 0) throw Error(error_message("parallel", "--pp {} does not divide the world of {} ranks", o.pp, world));
  return 0;
}

Layout make_layout(const SplitOptions& o, Strategy strategy, int world) {
  Layout layout = Layout::make(strategy, world, tensor_group_size(o, world));
  layout.expert_replicas = o.expert_replicas;
  if (o.split_weights.empty()) return layout;
  for (double w : o.split_weights)
    if (!(w > 0)) throw Error(error_message("parallel", "--split-weights must all be positive, got {}", w));
  const bool by_stage = layout.pp > 1;
  const int parts = by_stage ? layout.pp : layout.tp;
  if (layout.world() == 1 || static_cast<int>(o.split_weights.size()) != parts)
    throw Error(error_message("parallel", "--split-weights has {} values; the {} split of {} ranks has {} {}",
                              o.split_weights.size(), strategy_name(strategy), world, parts,
                              by_stage ? "pipeline stages" : "tensor ranks"));
  (by_stage ? layout.stage_weights : layout.tensor_weights) = o.split_weights;
  return layout;
}

}  // namespace

int threads_per_local_rank(const SplitOptions& o) {
  if (std::getenv("ORCHARD_WORLD") || std::getenv("OMPI_COMM_WORLD_SIZE")) return 0;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, o.world));
}

void run_as_rank(const SplitOptions& o, const comm::Config& config, const std::function<void(comm::Group*, const Layout&)>& fn) {
  comm::Group group = comm::init(config);
  const Layout layout = make_layout(o, parse_strategy(o.strategy), group.size());
  fn(group.size() > 1 ? &group : nullptr, layout);
}

void run_split(const SplitOptions& o, const std::function<void(comm::Group*, const Layout&)>& fn) {
  const Strategy strategy = parse_strategy(o.strategy);
  if (std::getenv("ORCHARD_WORLD") || std::getenv("OMPI_COMM_WORLD_SIZE")) {
    comm::Config config = comm::config_from_env();
    config.busy_poll = config.busy_poll || o.busy_poll;  // asked of the launcher or of this rank's command
    run_as_rank(o, config, fn);
    return;
  }
  if (o.world == 1 && strategy == Strategy::Single) {
    fn(nullptr, make_layout(o, strategy, 1));
    return;
  }
  const Layout layout = make_layout(o, strategy, o.world);
  comm::Config base;
  base.backend = comm::parse_backend(o.backend);
  base.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  base.link.latency_us = o.link_latency_us;
  base.link.gbps = o.link_gbps;
  base.busy_poll = o.busy_poll || comm::busy_poll_from_env();
  comm::LocalLaunchOptions launch;
  launch.pin_cpus = o.pin_cpus;
  launch.ranks_take_interrupt = o.ranks_take_interrupt;
  std::fflush(stdout);  // the children inherit stdio buffers
  std::fflush(stderr);
  auto exits = comm::spawn_local_ranks(o.world, base, [&](comm::Group& group) { fn(&group, layout); }, launch);
  for (const auto& e : exits)
    if (!e.ok()) throw Error(error_message("parallel", "rank {} failed: {}", e.rank, e.describe()));
}

}  // namespace orchard::parallel
