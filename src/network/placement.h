#pragma once
// Where a job runs: whole, on one machine or on one pod (machines already cabled together),
// never across machines that are not one pod. A candidate ("unit") must hold the model's bytes
// plus its KV cache for the context; among those that fit, the unit with the highest expected
// tokens per second wins, weighted by whether the model is already on its disk, its queue and
// its past reliability. Memory is set by all of a model's bytes, speed by the bytes a decode
// step reads: for a mixture of experts only the chosen experts' share, so a large MoE that needs
// a pod for memory is expected to decode at the speed of its active size. No HTTP, no database:
// the coordinator and the simulator drive it.
//
// Cost: units with the same (memory, bandwidth, size) share a bucket, kept sorted by their
// dynamic weight, so a decision looks at the best unit of each bucket that fits (a few hundred
// buckets for a population drawn from the hardware catalog), not at every node.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace orchard::network {

struct NodeSpec {
  std::string id;
  int64_t memory_bytes = 0;     // what the owner offers (--max-memory), not the machine's total
  double bandwidth_gbs = 0;     // memory bandwidth
  std::vector<std::string> models;  // on disk
  double reliability = 1.0;     // (0, 1]
};

inline constexpr int kMaxPodSize = 64;         // machines
inline constexpr size_t kMaxPodIdLength = 64;  // characters

struct PodSpec {
  std::string id;
  std::vector<std::string> members;  // node ids, each registered and in no other pod; the first leads
  double link_latency_us = 10;       // per hop between members (Thunderbolt: ~10 us)
};

struct Demand {
  std::string model;
  int64_t model_bytes = 0;
  int64_t need_bytes = 0;  // weights + KV cache for the context
  std::unordered_set<std::string> exclude;  // nodes that must not take it (a check's producer)
  // Weight bytes one decode step reads (a mixture of experts: the shared weights and the chosen
  // experts); 0 when unknown, and then all of model_bytes.
  int64_t active_bytes = 0;
  int64_t decode_bytes() const { return active_bytes > 0 ? active_bytes : model_bytes; }
};

struct Choice {
  std::string unit;                // node id, or pod id
  std::vector<std::string> nodes;  // the machines that run it (one, or the pod's members)
  bool pod = false;
  double expected_tok_s = 0;
  double score = 0;
  bool on_disk = false;
};

// Expected decode speed of a model on a machine, or split over a pod's machines as a pipeline by
// memory share: each token streams the bytes a decode step reads (decode_bytes: all of a dense
// model, a mixture of experts' active share) once, one stage after another (bytes / the unit's
// decode bandwidth, at the efficiency real kernels reach), plus one link hop per stage boundary.
// A pod is therefore never faster than one of its members: it exists to hold models that one
// machine cannot.
double expected_tok_s(int64_t decode_bytes, double bandwidth_gbs, int members, double link_latency_us);

// Reliability after an outcome: served jobs pull it back toward 1, hand-backs, lost leases and
// failed checks push it down (a hand-back least, a failed check much harder).
enum class Outcome { Served, LostLease, FailedCheck, HandedBack };
double next_reliability(double r, Outcome outcome);

class Placement {
 public:
  explicit Placement(int max_queue = 2) : max_queue_(max_queue) {}

  // Adding an id again replaces its spec (keeping its queue). A node starts unavailable.
  void add_node(const NodeSpec& spec);
  void remove_node(const std::string& id);  // also dissolves its pod
  void add_pod(const PodSpec& spec);        // throws Error when a member is unknown or pooled
  bool has_node(const std::string& id) const { return index_.count(id) > 0; }

  // Available: online, offering its time, not banned.
  void set_available(const std::string& node, bool available);
  void set_reliability(const std::string& node, double reliability);
  void add_model(const std::string& node, const std::string& model);
  // A job was assigned to / left a unit (node or pod id): every machine in it is busier. While a
  // pod has a job, its members other than the first take no job of their own, and a pod takes
  // none while those members have one.
  void job_started(const std::string& unit);
  void job_finished(const std::string& unit);
  // The unit a job leased to `holder` runs on, for rebuilding after a restart (the store keeps
  // only the holder, the pod's leader for a pod's job): the pod `holder` leads when the holder
  // alone has less memory than need_bytes, else the holder.
  std::string unit_led_by(const std::string& holder, int64_t need_bytes) const;

  // The best unit for the demand now, or nullopt when nothing available fits.
  std::optional<Choice> place(const Demand& demand) const;
  // Whether any registered unit (available or not) could ever hold need_bytes.
  bool could_fit(int64_t need_bytes) const;

  size_t node_count() const;
  size_t pod_count() const;
  int queue(const std::string& unit) const;

 private:
  struct Unit {
    std::string id;
    bool pod = false;
    bool removed = false;
    std::vector<int> members;  // node units; a node's is itself
    int pod_of = -1;           // node: the pod unit it belongs to
    int64_t memory = 0;
    double bandwidth = 0;
    double link_latency_us = 0;
    std::vector<int> models;   // sorted model ids on disk (a pod: its leader's)
    double reliability = 1;
    int queue = 0;
    int running = 0;           // a pod: its jobs placed and not finished
    bool available = false;
    int bucket = -1;
    double weight = 0;         // reliability / (1 + queue): the in-bucket order
    bool indexed = false;
  };
  using Ranked = std::set<std::pair<double, int>>;  // (-weight, unit): best first
  struct Bucket {
    int64_t memory;
    double bandwidth;
    int members;
    double link_latency_us;
    Ranked all;
    std::unordered_map<int, Ranked> by_model;
  };

  int model_id(const std::string& name);
  int find_model(const std::string& name) const;
  int bucket_for(const Unit& u);
  void unindex(int u);
  void reindex(int u);  // recomputes a unit's state from its members and files it
  void refresh(int node);  // a node changed: reindex it and its pod
  bool eligible(int unit) const;
  static bool has_model(const Unit& u, int model);

  int max_queue_;
  std::vector<Unit> units_;
  std::unordered_map<std::string, int> index_;  // node or pod id -> unit
  std::vector<Bucket> buckets_;
  std::map<std::tuple<int64_t, int64_t, int, int64_t>, int> bucket_index_;
  std::multimap<int64_t, int> buckets_by_memory_;
  std::unordered_map<std::string, int> models_;
  size_t nodes_ = 0, pods_ = 0;
};

}  // namespace orchard::network
