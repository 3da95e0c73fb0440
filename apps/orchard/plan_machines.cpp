#include "apps/orchard/plan_machines.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cluster/agent.h"
#include "cluster/hardware_catalog.h"
#include "cluster/local_machine.h"
#include "cluster/machine_probe.h"
#include "comm/bootstrap.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"

namespace orchard::app {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(error_message("cluster", "cannot read {}", path));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_local(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

}  // namespace

// This machine, measured, shared by `count` ranks: they split its memory, and since they run
// at once they also split the bandwidth and compute the probe measures with all their threads.
cluster::MachineSpec local_machine_spec(const MachineOverrides& f, const cluster::ModelFacts& model, int count, int index) {
  const model::ModelConfig& shape = model.config;
  static const cluster::LocalMachine me = cluster::detect_local_machine();
  // The probe takes a second or two: only when the what-if flags leave a figure open, or to
  // measure how a mixture of experts' small products and the prompt's attention fare against
  // the dense rate (ratios, which the what-if rates then scale).
  static const cluster::MachineProbe probe = [&] {
    if (f.memory_bw_gbs > 0 && f.compute_gflops > 0 && shape.n_expert == 0)
      return cluster::MachineProbe{f.memory_bw_gbs * count, f.compute_gflops * count, f.threads, {}};
    cluster::MachineProbe p = cluster::probe_machine(f.threads > 0 ? f.threads * count : 0, cluster::probe_shape(model));
    if (f.memory_bw_gbs > 0) p.decode_gbs = f.memory_bw_gbs * count;
    if (f.compute_gflops > 0) p.compute_gflops = f.compute_gflops * count;
    return p;
  }();
  // One rank streaming while the others wait: measured with its own threads alone (a core
  // alone streams more than its share of what all stream together), unless the what-if flags
  // give the figures.
  static const double solo = [&] {
    if (f.solo_memory_bw_gbs > 0) return f.solo_memory_bw_gbs;
    if (f.memory_bw_gbs > 0 || count == 1) return 0.0;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return cluster::probe_decode_gbs(f.threads > 0 ? f.threads : std::max(1, cores / count), cluster::probe_shape(model));
  }();
  return {count > 1 ? fmt::format("{}#{}", me.hostname, index) : me.hostname,
          static_cast<double>(me.memory_total_bytes) / 1e9 / count, probe.decode_gbs / count, probe.compute_gflops / count,
          probe.expert_efficiency, solo, probe.attention_efficiency > 0 ? probe.attention_efficiency : 1};
}

cluster::MachineSpec catalog_machine(const MachineOverrides& f, size_t index, const std::string& host) {
  const cluster::ChipSpec& chip = cluster::HardwareCatalog::builtin().chip(f.chips[std::min(index, f.chips.size() - 1)]);
  // Without --memory, the largest configuration the chip is sold with.
  const double memory = f.memory_gb > 0 ? f.memory_gb : chip.memory_options_gb.back();
  return cluster::machine_from_chip(chip, memory, host);
}

void hostfile_machines(const std::string& hostfile, const MachineOverrides& f, const ClusterFlags& discovery,
                       cluster::PlanRequest& r, std::vector<std::string>& sources) {
  const auto ranks = comm::parse_hostfile(read_text(hostfile), comm::kDefaultBasePort);
  std::vector<std::string> nodes;
  cluster::Topology all;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string host = comm::tcp::parse_endpoint(ranks[i].front()).host;
    try {
      const cluster::Topology t = cluster::topology_from_json(nlohmann::json::parse(
          cluster::query_topology(host, discovery.agent_port, discovery.cluster, discovery.secret,
                                  std::chrono::milliseconds(1500))));
      // The agent that answered is the machine holding `host` among its addresses.
      const cluster::Announcement* me = &t.machines.front();
      for (const cluster::Announcement& a : t.machines)
        for (const cluster::NetInterface& n : a.interfaces)
          if (n.address == host) me = &a;
      r.machines.push_back(cluster::machine_spec(*me));
      nodes.push_back(me->node_id);
      all.links.insert(all.links.end(), t.links.begin(), t.links.end());
      sources.push_back("agent");
      continue;
    } catch (const Error& e) {
      if (f.chips.empty() && !is_local(host))
        throw Error(error_message("cluster", "{}: no agent answered ({}) and no --chip says what it is", host, e.what()));
    }
    r.machines.push_back(!f.chips.empty() ? catalog_machine(f, i, host) : local_machine_spec(f, r.model, static_cast<int>(ranks.size()), static_cast<int>(i)));
    nodes.push_back("");
    sources.push_back(f.chips.empty() ? "probe" : "catalog");
  }
  r.links.assign(ranks.size(), std::vector<cluster::LinkSpec>(ranks.size(), r.default_link));
  for (size_t i = 0; i < ranks.size(); ++i)
    for (size_t j = 0; j < ranks.size(); ++j)
      if (i != j && !nodes[i].empty() && !nodes[j].empty())
        if (auto l = cluster::pair_link(all, nodes[i], nodes[j])) r.links[i][j] = *l;
}

}  // namespace orchard::app
