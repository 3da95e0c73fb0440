#pragma once
// The cluster as the agents see it: machines and the measured links between them, per
// interface pair (two cables between a pair are two links).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cluster/cost_model.h"
#include "cluster/discovery.h"

namespace orchard::cluster {

struct Topology {
  std::vector<Announcement> machines;   // announcements without their own link lists
  std::vector<LinkMeasurement> links;   // every agent's measurements, each direction
};

// Machines in the given order; links gathered from each announcement.
Topology topology_from_announcements(std::vector<Announcement> announcements);

nlohmann::json to_json(const Topology& t);
Topology topology_from_json(const nlohmann::json& j);  // throws FormatError naming the field

// The machines table and the link matrix, for people.
std::string format_topology(const Topology& t);

// What the planner should assume between two machines: the lowest latency over their
// interface pairs (half the round trip: the cost model counts one-way messages) and the sum of
// the bandwidths of distinct interface pairs (comm stripes large messages over every cable).
// nullopt when nothing was measured between them.
std::optional<LinkSpec> pair_link(const Topology& t, const std::string& node_a, const std::string& node_b);

// What the planner assumes for a machine: its measured decode bandwidth and compute rate when
// its agent ran the probe, else the catalog's figures for its chip. Throws Error naming the
// host when neither is known.
MachineSpec machine_spec(const Announcement& a);

// links[i][j] for the machines of `t` in order: measured figures where there are some, else
// `fallback`.
std::vector<std::vector<LinkSpec>> link_matrix(const Topology& t, const LinkSpec& fallback);

}  // namespace orchard::cluster
