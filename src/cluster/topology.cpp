#include "cluster/topology.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "cluster/hardware_catalog.h"
#include "core/error.h"

namespace orchard::cluster {

Topology topology_from_announcements(std::vector<Announcement> announcements) {
  Topology t;
  for (Announcement& a : announcements) {
    for (LinkMeasurement& l : a.links) t.links.push_back(std::move(l));
    a.links.clear();
    t.machines.push_back(std::move(a));
  }
  return t;
}

nlohmann::json to_json(const Topology& t) {
  nlohmann::json machines = nlohmann::json::array(), links = nlohmann::json::array();
  for (const Announcement& a : t.machines) machines.push_back(to_json(a));
  for (const LinkMeasurement& l : t.links) links.push_back(to_json(l));
  return {{"machines", std::move(machines)}, {"links", std::move(links)}};
}

Topology topology_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("machines") || !j.contains("links"))
    throw FormatError(error_message("cluster", "topology JSON needs 'machines' and 'links'"));
  Topology t;
  for (const nlohmann::json& m : j["machines"]) t.machines.push_back(announcement_from_json(m));
  for (const nlohmann::json& l : j["links"]) t.links.push_back(link_from_json(l));
  return t;
}

std::string format_topology(const Topology& t) {
  std::map<std::string, std::string> host_of;
  for (const Announcement& a : t.machines) host_of[a.node_id] = a.hostname;
  auto host = [&](const std::string& node) {
    auto it = host_of.find(node);
    return it == host_of.end() ? node : it->second;
  };
  std::string out = fmt::format("{:<20} {:<10} {:<16} {:>6} {:>10} {:>10} {:>9}  {}\n", "host", "os", "chip/cpu", "cores",
                                "memory GB", "free GB", "decode GB/s", "models");
  for (const Announcement& a : t.machines) {
    std::string models;
    for (const std::string& m : a.models) models += (models.empty() ? "" : ", ") + m;
    std::string cpu = a.chip.empty() ? a.cpu_brand.substr(0, 16) : a.chip;
    out += fmt::format("{:<20} {:<10} {:<16} {:>6} {:>10.1f} {:>10.1f} {:>9.1f}  {}\n", a.hostname, a.os, cpu, a.cores,
                       a.memory_total_bytes / 1e9, a.memory_free_bytes / 1e9, a.decode_gbs, models.empty() ? "-" : models);
  }
  out += fmt::format("\n{:<20} {:<22} {:<20} {:<22} {:>10} {:>8}\n", "from", "interface", "to", "interface", "rtt µs", "Gb/s");
  std::vector<LinkMeasurement> links = t.links;
  std::sort(links.begin(), links.end(), [&](const LinkMeasurement& a, const LinkMeasurement& b) {
    return std::tie(a.from_node, a.to_node, a.from_addr) < std::tie(b.from_node, b.to_node, b.from_addr);
  });
  for (const LinkMeasurement& l : links)
    out += fmt::format("{:<20} {:<22} {:<20} {:<22} {:>10.1f} {:>8.2f}\n", host(l.from_node),
                       l.from_iface + " " + l.from_addr, host(l.to_node), l.to_iface + " " + l.to_addr, l.rtt_us_p50, l.gbps);
  if (links.empty()) out += "(no links measured yet)\n";
  return out;
}

std::optional<LinkSpec> pair_link(const Topology& t, const std::string& node_a, const std::string& node_b) {
  // Per cable (unordered address pair): the better of the two directions' measurements.
  std::map<std::pair<std::string, std::string>, LinkSpec> cables;
  for (const LinkMeasurement& l : t.links) {
    const bool ab = l.from_node == node_a && l.to_node == node_b;
    const bool ba = l.from_node == node_b && l.to_node == node_a;
    if (!ab && !ba) continue;
    const auto key = std::minmax(l.from_addr, l.to_addr);
    auto [it, fresh] = cables.try_emplace({key.first, key.second}, LinkSpec{l.rtt_us_p50 / 2, l.gbps});
    if (!fresh) {
      it->second.latency_us = std::min(it->second.latency_us, l.rtt_us_p50 / 2);
      it->second.gbps = std::max(it->second.gbps, l.gbps);
    }
  }
  if (cables.empty()) return std::nullopt;
  LinkSpec link{cables.begin()->second.latency_us, 0};
  for (const auto& [key, c] : cables) {
    link.latency_us = std::min(link.latency_us, c.latency_us);
    link.gbps += c.gbps;
  }
  return link;
}

MachineSpec machine_spec(const Announcement& a) {
  const std::string host = a.hostname.empty() ? a.node_id : a.hostname;
  const double memory_gb = static_cast<double>(a.memory_total_bytes) / 1e9;
  if (a.decode_gbs > 0 && a.compute_gflops > 0) return {host, memory_gb, a.decode_gbs, a.compute_gflops};
  if (const ChipSpec* chip = HardwareCatalog::builtin().find(a.chip)) return machine_from_chip(*chip, memory_gb, host);
  throw Error(error_message("cluster", "{}: its agent measured no bandwidth and its CPU '{}' is not in the catalog", host,
                            a.cpu_brand));
}

std::vector<std::vector<LinkSpec>> link_matrix(const Topology& t, const LinkSpec& fallback) {
  const size_t n = t.machines.size();
  std::vector<std::vector<LinkSpec>> links(n, std::vector<LinkSpec>(n, fallback));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j)
        if (std::optional<LinkSpec> l = pair_link(t, t.machines[i].node_id, t.machines[j].node_id)) links[i][j] = *l;
  return links;
}

}  // namespace orchard::cluster
