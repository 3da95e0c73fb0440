// `orchard plan`: which split to run a model with on these machines, and how fast it should
// be. Machine facts come from the agents (--discover, or each --hostfile host's agent), from
// the catalog (--chip), or from measuring this machine; what-if flags override any of them.
#include <csignal>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/orchard/cache_type_flag.h"
#include "apps/orchard/commands.h"
#include "apps/orchard/flag_ranges.h"
#include "apps/orchard/plan_machines.h"
#include "cluster/planner.h"
#include "cluster/topology.h"
#include "core/error.h"

namespace orchard::app {
namespace {

struct PlanFlags {
  std::string model, hostfile, strategy;
  bool discover = false, json = false;
  MachineOverrides machine;
  int machines = 0, world = 0, expert_replicas = -1;
  double link_latency_us = -1, link_gbps = -1;
  cluster::Workload work;
  int32_t context = 0;
  ClusterFlags discovery;
};

void run_plan(PlanFlags f) {
  cluster::PlanRequest r;
  r.model = std::filesystem::exists(f.model) ? cluster::ModelFacts::from_gguf(model::gguf::Reader::open(f.model))
                                             : cluster::ModelFacts::from_preset(f.model);
  r.work = f.work;
  r.work.context = f.context > 0 ? f.context : r.model.config.context_length;
  std::vector<std::string> sources;
  bool all_local = false;
  r.default_link = {300, 10};  // unmeasured pairs: a typical TCP link over Thunderbolt or 10 GbE
  r.link_source = "measured";
  if (f.discover) {
    const cluster::Topology t = f.discovery.find();
    if (t.machines.empty()) throw Error(error_message("cluster", "no agent of cluster '{}' found", f.discovery.cluster));
    for (const cluster::Announcement& a : t.machines) r.machines.push_back(cluster::machine_spec(a));
    r.links = cluster::link_matrix(t, r.default_link);
  } else if (!f.hostfile.empty()) {
    hostfile_machines(f.hostfile, f.machine, f.discovery, r, sources);
  } else {
    const int count = std::max(1, f.machines);
    for (int i = 0; i < count; ++i)
      r.machines.push_back(f.machine.chips.empty() ? local_machine_spec(f.machine, r.model, count, i)
                                                   : catalog_machine(f.machine, static_cast<size_t>(i), fmt::format("mac{}", i)));
    all_local = f.machine.chips.empty();
    if (all_local) {
      r.default_link = {0, 0};  // ranks on one machine: shared memory
      r.link_source = "one machine";
    } else {
      r.link_source = "assumed TCP";
    }
  }
  // What-if overrides.
  for (cluster::MachineSpec& m : r.machines) {
    if (f.machine.memory_gb > 0) m.memory_gb = f.machine.memory_gb;
    if (f.machine.memory_bw_gbs > 0) m.memory_bw_gbs = f.machine.memory_bw_gbs;
    // A what-if bandwidth without a solo one: the rank reads at it alone too.
    if (f.machine.memory_bw_gbs > 0 || f.machine.solo_memory_bw_gbs > 0)
      m.solo_memory_bw_gbs = f.machine.solo_memory_bw_gbs;
    if (f.machine.compute_gflops > 0) m.compute_gflops = f.machine.compute_gflops;
  }
  if (f.link_latency_us >= 0 || f.link_gbps >= 0) {
    auto apply = [&](cluster::LinkSpec& l) {
      if (f.link_latency_us >= 0) l.latency_us = f.link_latency_us;
      if (f.link_gbps >= 0) l.gbps = f.link_gbps;
    };
    apply(r.default_link);
    for (auto& row : r.links)
      for (auto& l : row) apply(l);
    r.link_source = "what-if";
  }
  if (!f.strategy.empty()) r.only = parallel::parse_strategy(f.strategy);
  r.world = f.world;
  if (f.expert_replicas >= 0) r.expert_replicas = f.expert_replicas;
  if (f.world > static_cast<int>(r.machines.size())) {
    const std::string known = f.discover ? fmt::format("the {} machine(s) the agents found", r.machines.size())
                              : !f.hostfile.empty() ? fmt::format("the {} host(s) of {}", r.machines.size(), f.hostfile)
                              : r.machines.size() == 1 ? std::string("only this machine")
                                                       : fmt::format("{} machines (--machines)", r.machines.size());
    throw Error(error_message("cluster",
                              "--world {} asks for {} machines, but the planner knows {}: give it more with --hostfile "
                              "hosts.json, --discover (an `orchard agent` running on each machine), --chip \"M4 Max\" "
                              "--machines {} for catalog machines, or --machines {} for {} ranks of this machine",
                              f.world, f.world, known, f.world, f.world, f.world));
  }

  const cluster::Plan plan = cluster::make_plan(r);
  if (f.json) {
    nlohmann::json j = cluster::plan_to_json(plan);
    nlohmann::json machines = nlohmann::json::array();
    for (size_t i = 0; i < r.machines.size(); ++i) {
      const cluster::MachineSpec& m = r.machines[i];
      machines.push_back({{"host", m.host}, {"memory_gb", m.memory_gb}, {"memory_bw_gb_s", m.memory_bw_gbs},
                          {"solo_memory_bw_gb_s", m.solo_bw_gbs()}, {"compute_gflops", m.compute_gflops}, {"source", i < sources.size() ? sources[i] : (all_local ? "probe" : f.discover ? "agent" : "catalog")}});
      if (!m.expert_efficiency.empty()) machines.back()["expert_efficiency"] = m.expert_efficiency;
      machines.back()["attention_efficiency"] = m.attention_efficiency;
    }
    j["machines"] = std::move(machines);
    j["model"] = {{"name", r.model.name}, {"weights_gb", r.model.total_bytes() / 1e9}, {"context", r.work.context}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << cluster::format_plan(plan);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Choose single, pipeline, tensor, hybrid or expert for a model on these machines");
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("-m,--model", f->model, "GGUF file, or a preset shape:type such as llama-70b:q4_k_m")->required();
  cmd->add_option("--hostfile", f->hostfile, "MLX-style JSON hostfile: the machines to plan for")->check(CLI::ExistingFile);
  cmd->add_flag("--discover", f->discover, "Plan for the agents found on the LAN");
  cmd->add_option("--chip", f->machine.chips, "Catalog chip of each machine (one for all, or one per machine), e.g. \"M4 Max\"");
  cmd->add_option("--machines", f->machines, "Without hostfile or discovery: how many machines (this one, or --chip)");
  cmd->add_option("--memory", f->machine.memory_gb, "What-if: memory of every machine, GB");
  add_renamed_option(cmd, "--memory-bw-gb-s", "--memory-bw-gbs", f->machine.memory_bw_gbs,
                     "What-if: effective decode memory bandwidth of every machine, gigabytes/s", above(0));
  cmd->add_option("--solo-memory-bw-gb-s", f->machine.solo_memory_bw_gbs,
                  "What-if: decode memory bandwidth of one rank streaming while the others on its machine wait (a "
                  "pipeline's stages), gigabytes/s (default: measured, or --memory-bw-gb-s)")
      ->check(above(0));
  cmd->add_option("--compute-gflops", f->machine.compute_gflops, "What-if: matmul rate of every machine, GFLOP/s");
  cmd->add_option("--link-latency-us", f->link_latency_us, "What-if: one-way latency of every link, µs");
  add_renamed_option(cmd, "--link-gbit-s", "--link-gbps", f->link_gbps, "What-if: bandwidth of every link, gigabits/s (0: unlimited)",
                     at_least(0));
  cmd->add_option("--strategy", f->strategy, "Only consider this strategy (single, pipeline, tensor, hybrid, expert)");
  cmd->add_option("--world", f->world, "Only consider plans over this many machines");
  cmd->add_option("--expert-replicas", f->expert_replicas,
                  "Splits of whole experts: replicate this many experts per layer (default: the planner chooses)")
      ->check(at_least(0));
  cmd->add_option("-c,--ctx", f->context, "Context length to reserve KV cache for (default: the model's)");
  cmd->add_option("-b,--batch", f->work.chunk, "Prompt positions per forward pass")->capture_default_str();
  cmd->add_option("--prompt-tokens", f->work.prompt_tokens, "Prompt length for the prompt rate")->capture_default_str();
  cmd->add_option("--position", f->work.position, "Context position generation runs at (KV cache read)")->capture_default_str();
  add_cache_type_flag(cmd, f->work.cache_type);
  cmd->add_option("-t,--threads", f->machine.threads, "Threads per rank when measuring this machine (default: all cores, shared by the ranks)");
  add_cluster_flags(cmd, f->discovery, "--discover without a local agent: seconds to listen");
  cmd->add_flag("--json", f->json, "Print JSON: {strategy, tp, pp, assignment, predicted, explanation, ...}");
  cmd->callback([f] {
    std::signal(SIGPIPE, SIG_IGN);  // an agent that vanishes mid-query is an error, not a crash
    run_plan(*f);
  });
}

}  // namespace orchard::app
