#include "cluster/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "cluster/hardware_catalog.h"
#include "cluster/planner.h"
#include "core/error.h"

namespace orchard::cluster {
namespace {

constexpr int kRdmaMacosMajor = 26, kRdmaMacosMinor = 2;
constexpr double kRuntimeGb = 1.0;

std::pair<int, int> major_minor(const std::string& version) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(version);
  in >> major >> dot >> minor;
  return {major, minor};
}

bool is_self(const Announcement& a, const LocalMachine& me) {
  for (const NetInterface& theirs : a.interfaces)
    for (const NetInterface& mine : me.interfaces)
      if (theirs.address == mine.address) return true;
  return false;
}

// The planner's choice for two reference models on two machines like `m` joined by `link`.
std::string split_advice(const MachineSpec& m, const LinkSpec& link) {
  std::string out;
  for (const char* preset : {"llama-8b:q4_k_m", "llama-70b:q4_k_m"}) {
    PlanRequest r;
    r.model = ModelFacts::from_preset(preset);
    r.machines = {m, m};
    r.machines[1].host += "'";
    r.default_link = link;
    r.work.context = 8192;
    try {
      const Plan p = make_plan(r);
      out += fmt::format("{}{}: {} ({:.1f} tok/s{})", out.empty() ? "" : "; ", preset, parallel::strategy_name(p.strategy),
                         p.predicted.gen_tok_s,
                         p.predicted.allreduce_ms > 0 ? fmt::format(", {:.1f} ms/token in all-reduces", p.predicted.allreduce_ms) : "");
    } catch (const Error&) {
      out += fmt::format("{}{}: does not fit two such machines", out.empty() ? "" : "; ", preset);
    }
  }
  return out;
}

void report_machine(std::string& out, const Announcement& a, const Topology& t) {
  const RdmaVerdict rdma = rdma_verdict(a.os, a.os_version, a.chip, a.cpu_brand);
  const double memory_gb = static_cast<double>(a.memory_total_bytes) / 1e9;
  out += fmt::format("{} — {} {}, {}, {} cores, {:.1f} GB memory ({:.1f} free)\n", a.hostname, a.os, a.os_version,
                     a.chip.empty() ? a.cpu_brand : "Apple " + a.chip, a.cores, memory_gb,
                     static_cast<double>(a.memory_free_bytes) / 1e9);
  if (a.decode_gbs > 0)
    out += fmt::format("  measured: decode reads {:.1f} GB/s, matmul {:.0f} GFLOP/s\n", a.decode_gbs, a.compute_gflops);
  out += fmt::format("  RDMA over Thunderbolt 5: {}\n", rdma.reason);
  out += fmt::format("  fits: about {:.0f}B parameters at Q4_K_M, {:.0f}B at Q8_0, {:.0f}B at F16 ({:.0f}% of memory, "
                     "before the KV cache)\n",
                     fitting_params_billion(memory_gb, 4.85), fitting_params_billion(memory_gb, 8.5),
                     fitting_params_billion(memory_gb, 16), kUsableMemoryFraction * 100);
  MachineSpec spec;
  try {
    spec = machine_spec(a);
  } catch (const Error& e) {
    out += fmt::format("  splits: unknown ({})\n", e.what());
    return;
  }
  bool any = false;
  for (const Announcement& peer : t.machines) {
    if (peer.node_id == a.node_id) continue;
    const std::optional<LinkSpec> link = pair_link(t, a.node_id, peer.node_id);
    if (!link) continue;
    any = true;
    out += fmt::format("  link to {}: {:.0f} µs one-way, {:.1f} Gb/s -> {}\n", peer.hostname, link->latency_us, link->gbps,
                       split_advice(spec, *link));
  }
  if (!any) {
    out += fmt::format("  splits with a twin on RDMA (25 µs): {}\n", split_advice(spec, {25, 80}));
    out += fmt::format("  splits with a twin on TCP (300 µs): {}\n", split_advice(spec, {300, 10}));
  }
}

}  // namespace

RdmaVerdict rdma_verdict(const std::string& os, const std::string& os_version, const std::string& chip,
                         const std::string& cpu_brand) {
  if (os != "macOS")
    return {false, fmt::format("no — it is a macOS feature and this machine runs {}; its links use TCP", os)};
  const ChipSpec* spec = HardwareCatalog::builtin().find(chip);
  if (!spec) return {false, fmt::format("unknown — '{}' is not in the hardware catalog", cpu_brand)};
  if (!spec->rdma_tb5)
    return {false, fmt::format("no — the {} has Thunderbolt {}; RDMA needs a Thunderbolt 5 Mac (M4 Pro, M4 Max, M3 Ultra "
                               "or a later Pro, Max or Ultra)",
                               spec->name, spec->thunderbolt)};
  const auto [major, minor] = major_minor(os_version);
  if (major < kRdmaMacosMajor || (major == kRdmaMacosMajor && minor < kRdmaMacosMinor))
    return {false, fmt::format("not yet — the {} has Thunderbolt 5 but macOS {} is older than {}.{}; update macOS",
                               spec->name, os_version, kRdmaMacosMajor, kRdmaMacosMinor)};
  return {true, fmt::format("yes — {} with Thunderbolt 5 and macOS {}; cable the Macs directly with Thunderbolt 5 "
                            "cables (two cables between a pair double the bandwidth)",
                            spec->name, os_version)};
}

double fitting_params_billion(double memory_gb, double bits_per_weight) {
  return std::max(0.0, memory_gb * kUsableMemoryFraction - kRuntimeGb) / (bits_per_weight / 8);
}

std::string doctor_report(const Topology& t, const MachineProbe& local) {
  const LocalMachine me = detect_local_machine();
  Topology all = t;
  Announcement self;
  auto found = std::find_if(all.machines.begin(), all.machines.end(), [&](const Announcement& a) { return is_self(a, me); });
  if (found == all.machines.end()) {
    self.node_id = "local";
    self.hostname = me.hostname;
    self.os = me.os;
    self.os_version = me.os_version;
    self.cpu_brand = me.cpu_brand;
    self.chip = me.chip;
    self.cores = me.cores;
    self.performance_cores = me.performance_cores;
    self.memory_total_bytes = me.memory_total_bytes;
    self.memory_free_bytes = me.memory_free_bytes;
    self.interfaces = me.interfaces;
    all.machines.insert(all.machines.begin(), self);
    found = all.machines.begin();
  }
  found->decode_gbs = local.decode_gbs;
  found->compute_gflops = local.compute_gflops;
  std::string out;
  for (const Announcement& a : all.machines) {
    report_machine(out, a, all);
    out += "\n";
  }
  if (all.machines.size() == 1) out += "(no other machines: start `orchard agent` on each machine to see them here)\n";
  return out;
}

}  // namespace orchard::cluster
