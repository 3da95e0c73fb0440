#include "network/node_registry.h"

#include <algorithm>
#include <utility>

#include "network/ledger.h"

namespace orchard::network {

using nlohmann::json;

NodeRegistry::NodeRegistry(Clock clock, int64_t offline_after_ms, int64_t ban_after_mismatches,
                           HardwareCatalog catalog)
    : clock_(std::move(clock)),
      offline_after_ms_(offline_after_ms),
      ban_after_mismatches_(ban_after_mismatches),
      catalog_(std::move(catalog)) {}

NodeSpec NodeRegistry::load(const NodeRecord& r) {
  NodeState& n = nodes_[r.id];
  n.description = json::parse(r.description, nullptr, false);
  n.seat = r.seat;
  n.reliability = r.reputation;
  n.mismatches = r.mismatches;
  n.banned = r.banned;
  n.jobs_failed = r.jobs_failed;
  n.last_seen = r.last_seen;
  return update(r.id);
}

NodeSpec NodeRegistry::announce(const std::string& id, const json& description, const std::string& seat,
                                int64_t now) {
  NodeState& n = nodes_[id];
  n.description = description;
  n.lacks.clear();
  n.seat = seat;
  n.online = true;
  n.offering = description.value("offering", true);
  n.last_seen = now;
  return update(id);
}

NodeSpec NodeRegistry::update(const std::string& id) {
  NodeState& n = nodes_[id];
  const json& d = n.description;
  n.chip = d.value("chip", "");
  double bandwidth = d.value("memory_bandwidth_gbs", 0.0);
  n.tier = "base";
  if (auto chip = catalog_.find(n.chip)) {
    // The catalog's figures win over the node's claims: a node cannot talk its way up.
    n.tier = ledger::tier_name(chip->tier);
    if (chip->memory_bandwidth_gbs > 0) bandwidth = chip->memory_bandwidth_gbs;
  }
  n.bandwidth_gbs = bandwidth;
  NodeSpec spec{id, d.value("memory_bytes", int64_t{0}), bandwidth, {}, n.reliability};
  if (d.contains("models"))
    for (const auto& m : d["models"]) {
      std::string name = m.value("name", "");
      spec.models.push_back(name);
      AnnouncedModel& info = models_[name];
      info.bytes = m.value("bytes", int64_t{0});
      info.kv_bytes_per_token = m.value("kv_bytes_per_token", int64_t{0});
      info.context_length = m.value("context_length", int64_t{4096});
      // A decode step never reads more than the whole model.
      info.active_bytes_per_token =
          std::max<int64_t>(0, std::min(m.value("active_bytes_per_token", int64_t{0}), info.bytes));
    }
  return spec;
}

void NodeRegistry::seen(const std::string& id) {
  if (auto it = nodes_.find(id); it != nodes_.end()) it->second.last_seen = clock_();
}

bool NodeRegistry::online_again(const std::string& id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  return !std::exchange(it->second.online, true);
}

void NodeRegistry::set_offering(const std::string& id, bool offering) {
  if (auto it = nodes_.find(id); it != nodes_.end()) it->second.offering = offering;
}

std::vector<std::string> NodeRegistry::fall_silent() {
  const int64_t now = clock_();
  std::vector<std::string> silent;
  for (auto& [id, n] : nodes_)
    if (n.online && n.last_seen < now - offline_after_ms_) {
      n.online = false;
      silent.push_back(id);
    }
  return silent;
}

bool NodeRegistry::refresh(const std::string& id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return false;
  NodeState& n = it->second;
  const bool visible = n.online && n.offering && !n.banned;
  if (visible == n.visible) return false;
  n.visible = visible;
  n.online_since = visible ? clock_() : 0;
  return true;
}

double NodeRegistry::served(const std::string& id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return 1;
  return it->second.reliability = next_reliability(it->second.reliability, Outcome::Served);
}

double NodeRegistry::returned(const std::string& id, bool lost_lease) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return 1;
  NodeState& n = it->second;
  // Any hand-back costs the node's reputation a little; a lost lease costs more.
  n.reliability = next_reliability(n.reliability, lost_lease ? Outcome::LostLease : Outcome::HandedBack);
  n.jobs_failed += lost_lease;
  return n.reliability;
}

double NodeRegistry::failed_check(const std::string& id) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return 1;
  NodeState& n = it->second;
  n.reliability = next_reliability(n.reliability, Outcome::FailedCheck);
  n.mismatches++;
  n.banned = n.mismatches >= ban_after_mismatches_;
  return n.reliability;
}

void NodeRegistry::lack(const std::string& id, const std::string& model) {
  if (auto it = nodes_.find(id); it != nodes_.end()) it->second.lacks.insert(model);
}

const NodeState* NodeRegistry::find(const std::string& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const NodeState& NodeRegistry::get(const std::string& id) const {
  static const NodeState kBlank;
  const NodeState* n = find(id);
  return n ? *n : kBlank;
}

Seller NodeRegistry::seller(const std::string& id) const {
  const NodeState& n = get(id);
  return {ledger::parse_seat(n.seat), ledger::parse_tier(n.tier), n.bandwidth_gbs};
}

const AnnouncedModel& NodeRegistry::model(const std::string& name) const {
  static const AnnouncedModel kBlank;
  auto it = models_.find(name);
  return it == models_.end() ? kBlank : it->second;
}

}  // namespace orchard::network
