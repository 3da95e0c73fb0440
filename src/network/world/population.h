#pragma once
// Every machine the World page shows, kept in memory with its aggregates, so that what the page
// asks for costs the same whatever the population: a summary (totals, one entry per region),
// pages of the machines table (filtered and sorted here), and the marks of a map view (machines,
// or clusters of them, never more than a budget). No HTTP in it (world_routes.h is that layer).
//
// Writers (the coordinator under its own lock, the simulator) only queue changes: put, describe,
// job_served and remove take a small lock and return. commit() applies the queue (the feed's
// sampler calls it once a tick; /v1/world calls it before answering), and readers share the
// data between commits.
//
// Map layout: a region's machines, online or not, sit on a hexagonal spiral around the region
// (slot 0 at its centre, ring k holds 6k slots, neighbours one unit apart), in a stable order
// (chip class, memory, pod, id), so pod members are neighbours and a machine keeps its place
// while others come and go. The page turns a unit into map units; the server only ever sees
// rectangles in these local units.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace orchard::network::world {

// As the page colours them: "ultra", "max" or "pro" when the chip's name has the word, else "base".
enum class ChipClass : uint8_t { Base = 0, Pro = 1, Max = 2, Ultra = 3 };
inline constexpr int kChipClasses = 4;
ChipClass chip_class(std::string_view chip);
const char* chip_class_name(ChipClass c);

struct Machine {
  std::string id;
  std::string chip;
  std::string region;  // a name from data/regions.json, or "" (not shared)
  std::string seat;    // "dedicated" or "shared"
  std::string pod;     // pod id, or ""
  int64_t memory_bytes = 0;
  bool online = false;
  int64_t jobs_served = 0;
  double tok_s = 0;          // decode speed of its last job
  int64_t online_since = 0;  // Unix ms, while online
};

// A page of the machines table. Parsed from the query string of GET /v1/world/machines
// (see docs/world.md); bad values throw Error naming the parameter.
struct MachineQuery {
  enum class Online { Any, Yes, No };
  enum class Sort { Memory, Chip, Region, Seat, Pod, Jobs, TokS, Uptime, Id };
  std::optional<std::string> chip;    // exact name
  std::optional<ChipClass> chip_class;
  int64_t min_memory = 0;
  std::optional<std::string> region;  // "" = not shared
  std::optional<std::string> seat, pod;
  Online online = Online::Yes;
  Sort sort = Sort::Memory;
  bool descending = true;
  int64_t offset = 0;
  int64_t limit = 50;
  static constexpr int64_t kMaxLimit = 500;

  static MachineQuery parse(const std::multimap<std::string, std::string>& params);
};

// The marks of one map view: for each region in view, the rectangle of its spiral that is
// visible (local units). At most `budget` marks come back: every online machine in view when
// they fit, else clusters of the machines within cells of `cell` units (doubled until they fit).
struct MapQuery {
  struct View {
    std::string region;
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  };
  std::vector<View> views;
  double cell = 8;
  int64_t budget = 2000;
  bool clusters = false;  // clusters whatever the count (machines too close on screen to tell apart)
  static constexpr int64_t kMaxBudget = 2000;
  static constexpr size_t kMaxViews = 200;

  // Parameters: v=REGION|x0|y0|x1|y1 (repeated), cell, budget, clusters=1.
  static MapQuery parse(const std::multimap<std::string, std::string>& params);
};

// Slot i of the hexagonal spiral, in units (neighbours are 1 apart).
std::pair<double, double> spiral_slot(int64_t i);
// The ring slot i sits on (0 for the centre): a spiral of n slots reaches ring spiral_ring(n - 1).
int64_t spiral_ring(int64_t i);

// What one commit changed, for the event stream's deltas.
struct Changes {
  bool any = false;
  std::vector<std::string> regions;  // regions whose aggregates changed (names; "" is not shared)
  std::vector<std::string> machines; // ids of machines that changed, at most kMaxIds
  int64_t machines_changed = 0;      // how many did, in all
  bool chips = false;                // the list of chip names changed
  static constexpr size_t kMaxIds = 100;
};

class Population {
 public:
  Population();

  // Queue a change; cheap, safe under the caller's own locks (never calls back).
  void put(Machine m);                                    // every field
  void describe(Machine m);                               // all but jobs_served and tok_s (kept)
  void job_served(const std::string& id, double tok_s);   // one more job, at this speed
  void remove(const std::string& id);

  // Applies what was queued; false when nothing was. Thread-safe.
  bool commit();
  // What the commits since the last call changed (the event stream's next delta).
  Changes take_changes();

  // {"version", "totals": {"nodes", "online", "memory_bytes", "jobs_served", "pods"},
  //  "regions": [region_json...], "chips": [{"chip", "class", "machines"}], "seats": {seat: online}}
  nlohmann::json summary() const;
  // One region's aggregates: {"name", "machines", "online", "memory_bytes" (online),
  //  "classes": [base, pro, max, ultra] (online), "pods" (pods with an online member),
  //  "seats": {seat: online}, "jobs_served", "slots" (spiral length: every machine registered)}
  nlohmann::json region_json(const std::string& name) const;
  // {"total", "matched", "offset", "limit", "sort", "order", "machines": [machine_json...]}
  nlohmann::json machines(const MachineQuery& q) const;
  // {"mode": "machines" | "clusters", "cell", "in_view", "marks": N, "regions": [{"region",
  //   "machines": [[x, y, id, chip, memory_bytes, seat, pod, jobs_served, tok_s, online_since]...]
  //   or "clusters": [[x, y, count, [base, pro, max, ultra], memory_bytes, pods]...]}]}
  nlohmann::json marks(const MapQuery& q) const;
  nlohmann::json machine(const std::string& id) const;  // machine_json, or null
  static nlohmann::json machine_json(const Machine& m);

  uint64_t version() const;
  size_t size() const;
  // Jobs served since this population began (job_served calls applied): what jobs per minute
  // grow by, where a machine that joins with jobs behind it adds nothing.
  int64_t served_events() const;

 private:
  enum class Op : uint8_t { Put, Describe, Served, Remove };
  struct Pending {
    Op op;
    Machine m;
  };
  struct Row {
    Machine m;
    ChipClass cls = ChipClass::Base;
  };
  struct Region {
    int64_t machines = 0, online = 0, memory = 0, jobs = 0;
    std::array<int64_t, kChipClasses> classes{};
    std::map<std::string, int64_t> seats;     // online machines per seat
    std::map<std::string, int64_t> pods;     // online members per pod
    std::vector<uint32_t> layout;            // rows in spiral order (every machine of the region)
    bool dirty = true;                       // layout to sort again
    nlohmann::json to_json(const std::string& name) const;  // region_json's entry
  };

  void add_locked(const Row& r, int sign);  // adds or takes a row's share of the aggregates
  void apply_locked(Pending& p);
  void touched_locked(const Machine& m);  // counts a machine and its region as changed
  void layout_dirty_regions_locked();  // sorts the spirals of regions whose members changed

  mutable std::mutex pending_mu_;
  std::vector<Pending> pending_;

  mutable std::shared_mutex mu_;
  std::vector<Row> rows_;
  std::unordered_map<std::string, uint32_t> index_;  // id -> row
  std::map<std::string, Region> regions_;
  std::map<std::string, int64_t> chips_;  // registered machines per chip name
  std::map<std::string, int64_t> pods_;   // online members per pod, network-wide
  int64_t online_ = 0, memory_ = 0, jobs_ = 0;
  uint64_t version_ = 0;
  int64_t served_events_ = 0;
  Changes changes_;  // since take_changes()
  std::unordered_set<std::string> changed_ids_;
  std::unordered_set<std::string> changed_regions_;
};

}  // namespace orchard::network::world
