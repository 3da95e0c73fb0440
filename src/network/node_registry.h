#pragma once
// The coordinator's knowledge of the nodes and the models they announce: descriptions, the
// catalog's word on their chips, liveness on an injected clock (online, offering, visible, silent
// for offline_after_ms), trust (reliability, mismatches, bans) and the models a node handed a job
// back for lacking. No HTTP, no store and no job book: the coordinator persists what changes
// (NodeRecord, update_node_trust, set_node_online) and hands the placement what this returns. Not
// thread-safe: the coordinator calls it under its lock.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "network/catalog.h"
#include "network/job_book.h"
#include "network/placement.h"
#include "network/settlement.h"
#include "network/store/store.h"

namespace orchard::network {

// A model as its nodes announce it (the last announcement wins).
struct AnnouncedModel {
  int64_t bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int64_t context_length = 0;
  int64_t active_bytes_per_token = 0;  // weights a decode step reads (MoE: its chosen experts); 0: bytes
  int64_t decode_bytes() const { return active_bytes_per_token > 0 ? active_bytes_per_token : bytes; }
};

struct NodeState {
  nlohmann::json description;
  std::string seat, tier, chip;
  double bandwidth_gbs = 0;  // the catalog's for its chip, else its claim
  bool online = false, offering = false, banned = false;
  bool visible = false;      // online && offering && !banned, as last refreshed
  int64_t online_since = 0;  // when it last became visible
  int64_t last_seen = 0;
  double reliability = 1;
  int64_t mismatches = 0, jobs_failed = 0;
  std::set<std::string> lacks;  // models it handed a job back for not having
};

class NodeRegistry {
 public:
  NodeRegistry(Clock clock, int64_t offline_after_ms, int64_t ban_after_mismatches,
               HardwareCatalog catalog = HardwareCatalog::shipped());

  // A stored node (at start, or as another replica registered it): offline until it speaks
  // again, since its agent re-registers after a restart. Returns it as the placement sees it.
  NodeSpec load(const NodeRecord& r);
  // A registration at `now` (the time the store recorded): online, offering as described, and
  // its models described anew, so what it lacked is forgotten. The coordinator
  // has checked the description.
  NodeSpec announce(const std::string& id, const nlohmann::json& description, const std::string& seat, int64_t now);

  // Liveness. A node heard from is seen now; online_again marks it online and says whether it
  // was offline. Unknown ids are ignored.
  void seen(const std::string& id);
  bool online_again(const std::string& id);
  void set_offering(const std::string& id, bool offering);
  // Nodes unheard of for more than offline_after_ms, now marked offline.
  std::vector<std::string> fall_silent();
  // Recomputes whether the node is visible (online, offering, not banned); true when that
  // changed, which restarts its online_since.
  bool refresh(const std::string& id);

  // Trust; each returns the node's new reliability (1 for an unknown id).
  double served(const std::string& id);
  double returned(const std::string& id, bool lost_lease);  // a hand-back; a lost lease counts as failed
  double failed_check(const std::string& id);               // a mismatch; banned after ban_after_mismatches
  // It handed a job back for not having `model`: no job of that model goes to it until it
  // registers again.
  void lack(const std::string& id, const std::string& model);

  const NodeState* find(const std::string& id) const;
  // A blank state for an unknown id.
  const NodeState& get(const std::string& id) const;
  const std::unordered_map<std::string, NodeState>& nodes() const { return nodes_; }
  Seller seller(const std::string& id) const;

  // A blank model for one no node announced.
  const AnnouncedModel& model(const std::string& name) const;
  const std::map<std::string, AnnouncedModel>& models() const { return models_; }

 private:
  NodeSpec update(const std::string& id);  // chip, tier, bandwidth and models from the description

  Clock clock_;
  int64_t offline_after_ms_;
  int64_t ban_after_mismatches_;
  HardwareCatalog catalog_;
  std::unordered_map<std::string, NodeState> nodes_;
  std::map<std::string, AnnouncedModel> models_;
};

}  // namespace orchard::network
