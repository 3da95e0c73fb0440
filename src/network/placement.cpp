#include "network/placement.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace orchard::network {
namespace {

// Decode kernels stream weights at about this fraction of the memory's peak bandwidth.
constexpr double kBandwidthEfficiency = 0.6;
// A model not on disk must be fetched first: worth this much of a unit that has it.
constexpr double kNotOnDiskWeight = 0.5;

}  // namespace

double expected_tok_s(int64_t decode_bytes, double bandwidth_gbs, int members, double link_latency_us) {
  if (bandwidth_gbs <= 0) return 0;
  double seconds = static_cast<double>(std::max<int64_t>(decode_bytes, 1)) / (bandwidth_gbs * 1e9 * kBandwidthEfficiency) +
                   (members - 1) * link_latency_us * 1e-6;
  return 1.0 / seconds;
}

double next_reliability(double r, Outcome outcome) {
  switch (outcome) {
    case Outcome::Served: return std::min(1.0, 0.9 * r + 0.1);
    case Outcome::LostLease: return std::max(0.01, 0.7 * r);
    case Outcome::FailedCheck: return std::max(0.01, 0.3 * r);
    case Outcome::HandedBack: return std::max(0.01, 0.9 * r);
  }
  return r;
}

int Placement::model_id(const std::string& name) {
  auto [it, inserted] = models_.emplace(name, static_cast<int>(models_.size()));
  return it->second;
}

int Placement::find_model(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? -1 : it->second;
}

bool Placement::has_model(const Unit& u, int model) {
  return model >= 0 && std::binary_search(u.models.begin(), u.models.end(), model);
}

int Placement::bucket_for(const Unit& u) {
  // Bandwidth and latency are keyed in whole MB/s and ns so equal hardware shares a bucket.
  auto key = std::make_tuple(u.memory, std::llround(u.bandwidth * 1000), static_cast<int>(u.members.size()),
                             std::llround(u.link_latency_us * 1000));
  auto it = bucket_index_.find(key);
  if (it != bucket_index_.end()) return it->second;
  int b = static_cast<int>(buckets_.size());
  buckets_.push_back(Bucket{u.memory, u.bandwidth, static_cast<int>(u.members.size()), u.link_latency_us, {}, {}});
  bucket_index_.emplace(key, b);
  buckets_by_memory_.emplace(u.memory, b);
  return b;
}

bool Placement::eligible(int ui) const {
  const Unit& u = units_[ui];
  if (u.removed || !u.available || u.queue >= max_queue_) return false;
  // Only the leader's agent runs jobs one after another; the other members' agents would run a
  // job of their own beside the pod's ranks, on the memory the pod counted on. So a pod takes a
  // job only while its other members have none, and they take none while it runs one.
  if (u.pod) {
    for (size_t i = 1; i < u.members.size(); ++i)
      if (units_[u.members[i]].queue > 0) return false;
    return true;
  }
  return u.pod_of < 0 || units_[u.pod_of].running == 0 || units_[u.pod_of].members.front() == ui;
}

void Placement::unindex(int ui) {
  Unit& u = units_[ui];
  if (!u.indexed) return;
  Bucket& b = buckets_[u.bucket];
  b.all.erase({-u.weight, ui});
  for (int m : u.models) {
    auto it = b.by_model.find(m);
    if (it != b.by_model.end()) it->second.erase({-u.weight, ui});
  }
  u.indexed = false;
}

void Placement::reindex(int ui) {
  unindex(ui);
  Unit& u = units_[ui];
  if (u.removed) return;
  if (u.pod) {
    u.memory = 0;
    u.bandwidth = 0;
    double seconds_per_byte = 0;  // of the whole model, summed over the members' shares
    u.reliability = 1;
    u.queue = 0;
    u.available = true;
    u.models.clear();
    for (int m : u.members) {
      const Unit& n = units_[m];
      u.memory += n.memory;
      seconds_per_byte += static_cast<double>(n.memory) / std::max(n.bandwidth, 1e-9);
      u.reliability = std::min(u.reliability, n.reliability);
      u.queue = std::max(u.queue, n.queue);
      u.available = u.available && n.available && !n.removed;
    }
    // A pipeline by memory share: a token passes the stages one after another, each reading its
    // share, so the pod decodes at the memory-weighted harmonic mean of its members' bandwidths
    // (as fast as one member when they are alike), not at their sum.
    u.bandwidth = u.memory > 0 && seconds_per_byte > 0 ? static_cast<double>(u.memory) / seconds_per_byte : 0;
    // The leader reads the model for the pod (the others receive their shards from it).
    u.models = units_[u.members.front()].models;
  }
  u.bucket = bucket_for(u);
  if (!eligible(ui)) return;
  u.weight = u.reliability / (1.0 + u.queue);
  Bucket& b = buckets_[u.bucket];
  b.all.insert({-u.weight, ui});
  for (int m : u.models) b.by_model[m].insert({-u.weight, ui});
  u.indexed = true;
}

void Placement::refresh(int node) {
  reindex(node);
  if (units_[node].pod_of >= 0) reindex(units_[node].pod_of);
}

void Placement::add_node(const NodeSpec& spec) {
  auto it = index_.find(spec.id);
  int ui;
  if (it == index_.end()) {
    ui = static_cast<int>(units_.size());
    units_.push_back(Unit{});
    units_[ui].id = spec.id;
    units_[ui].members = {ui};
    index_.emplace(spec.id, ui);
    ++nodes_;
  } else {
    ui = it->second;
    ORCHARD_CHECK(!units_[ui].pod, "'{}' names a pod, not a node", spec.id);
    unindex(ui);
  }
  Unit& u = units_[ui];
  u.memory = spec.memory_bytes;
  u.bandwidth = spec.bandwidth_gbs;
  u.reliability = spec.reliability;
  u.models.clear();
  for (const std::string& m : spec.models) u.models.push_back(model_id(m));
  std::sort(u.models.begin(), u.models.end());
  u.models.erase(std::unique(u.models.begin(), u.models.end()), u.models.end());
  refresh(ui);
}

void Placement::remove_node(const std::string& id) {
  auto it = index_.find(id);
  if (it == index_.end()) return;
  int ui = it->second;
  unindex(ui);
  int pod = units_[ui].pod_of;
  if (pod >= 0) {
    unindex(pod);
    units_[pod].removed = true;
    for (int m : units_[pod].members) units_[m].pod_of = -1;
    index_.erase(units_[pod].id);
    --pods_;
  }
  units_[ui].removed = true;
  index_.erase(it);
  --nodes_;
}

void Placement::add_pod(const PodSpec& spec) {
  ORCHARD_CHECK(!spec.members.empty(), "pod '{}' has no members", spec.id);
  if (index_.count(spec.id)) throw Error(error_message("network", "pod id '{}' is already in use", spec.id));
  std::vector<int> members;
  for (const std::string& m : spec.members) {
    auto it = index_.find(m);
    if (it == index_.end() || units_[it->second].pod)
      throw Error(error_message("network", "pod '{}': member '{}' is not a registered node", spec.id, m));
    if (units_[it->second].pod_of >= 0)
      throw Error(error_message("network", "pod '{}': node '{}' is already in a pod", spec.id, m));
    members.push_back(it->second);
  }
  int pi = static_cast<int>(units_.size());
  units_.push_back(Unit{});
  units_[pi].id = spec.id;
  units_[pi].pod = true;
  units_[pi].members = members;
  units_[pi].link_latency_us = spec.link_latency_us;
  for (int m : members) units_[m].pod_of = pi;
  index_.emplace(spec.id, pi);
  ++pods_;
  reindex(pi);
}

void Placement::set_available(const std::string& node, bool available) {
  auto it = index_.find(node);
  if (it == index_.end() || units_[it->second].pod) return;
  units_[it->second].available = available;
  refresh(it->second);
}

void Placement::set_reliability(const std::string& node, double reliability) {
  auto it = index_.find(node);
  if (it == index_.end() || units_[it->second].pod) return;
  units_[it->second].reliability = reliability;
  refresh(it->second);
}

void Placement::add_model(const std::string& node, const std::string& model) {
  auto it = index_.find(node);
  if (it == index_.end() || units_[it->second].pod) return;
  int ui = it->second, m = model_id(model);
  if (has_model(units_[ui], m)) return;
  unindex(ui);
  auto& models = units_[ui].models;
  models.insert(std::upper_bound(models.begin(), models.end(), m), m);
  refresh(ui);
}

void Placement::job_started(const std::string& unit) {
  auto it = index_.find(unit);
  if (it == index_.end()) return;
  if (units_[it->second].pod) units_[it->second].running++;
  for (int m : units_[it->second].members) {
    units_[m].queue++;
    refresh(m);
  }
}

void Placement::job_finished(const std::string& unit) {
  auto it = index_.find(unit);
  if (it == index_.end()) return;
  if (units_[it->second].pod) units_[it->second].running = std::max(0, units_[it->second].running - 1);
  for (int m : units_[it->second].members) {
    units_[m].queue = std::max(0, units_[m].queue - 1);
    refresh(m);
  }
}

std::string Placement::unit_led_by(const std::string& holder, int64_t need_bytes) const {
  auto it = index_.find(holder);
  if (it == index_.end()) return holder;
  const Unit& node = units_[it->second];
  if (node.pod_of < 0 || node.memory >= need_bytes) return holder;
  const Unit& pod = units_[node.pod_of];
  return pod.members.front() == it->second ? pod.id : holder;
}

std::optional<Choice> Placement::place(const Demand& d) const {
  const int model = find_model(d.model);
  int best = -1;
  double best_score = 0, best_tok_s = 0;
  bool best_on_disk = false;
  auto excluded = [&](int ui) {
    if (d.exclude.empty()) return false;
    for (int m : units_[ui].members)
      if (d.exclude.count(units_[m].id)) return true;
    return false;
  };
  auto consider = [&](const Ranked& ranked, double tok_s) {
    // The first unit of a bucket not excluded is that bucket's best (its order is the weight).
    for (auto& [neg_weight, ui] : ranked) {
      if (excluded(ui)) continue;
      bool on_disk = has_model(units_[ui], model);
      double score = tok_s * -neg_weight * (on_disk ? 1.0 : kNotOnDiskWeight);
      if (best < 0 || score > best_score || (score == best_score && ui < best)) {
        best = ui;
        best_score = score;
        best_tok_s = tok_s;
        best_on_disk = on_disk;
      }
      return;
    }
  };
  for (auto it = buckets_by_memory_.lower_bound(d.need_bytes); it != buckets_by_memory_.end(); ++it) {
    const Bucket& b = buckets_[it->second];
    if (b.all.empty()) continue;
    double tok_s = expected_tok_s(d.decode_bytes(), b.bandwidth, b.members, b.link_latency_us);
    if (model >= 0) {
      auto m = b.by_model.find(model);
      if (m != b.by_model.end()) consider(m->second, tok_s);
    }
    consider(b.all, tok_s);
  }
  if (best < 0) return std::nullopt;
  Choice c;
  const Unit& u = units_[best];
  c.unit = u.id;
  c.pod = u.pod;
  for (int m : u.members) c.nodes.push_back(units_[m].id);
  c.expected_tok_s = best_tok_s;
  c.score = best_score;
  c.on_disk = best_on_disk;
  return c;
}

bool Placement::could_fit(int64_t need_bytes) const {
  return buckets_by_memory_.lower_bound(need_bytes) != buckets_by_memory_.end();
}

size_t Placement::node_count() const { return nodes_; }
size_t Placement::pod_count() const { return pods_; }

int Placement::queue(const std::string& unit) const {
  auto it = index_.find(unit);
  return it == index_.end() ? 0 : units_[it->second].queue;
}

}  // namespace orchard::network
