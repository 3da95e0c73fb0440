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
// (slot 0 at its centre, ring k holds 6k slots, neighbours one unit apart). A machine's slot is
// chosen once, when it comes to the region: a hash of its id (of its pod's id for a pod's
// members, so they sit side by side) within a disc about half as big again as the region's
// machines need, moved on to the next free slot when taken. It keeps it while it stays there,
// whoever comes or goes. The page turns a unit into map units; the server only ever sees
// rectangles in these local units.
//
// Indexes, kept up at every commit, so that a table page and a map view cost what they return
// rather than a pass over the population: one order per sort key (walked, skipping rows the
// filters refuse, when most rows match), the machines grouped by what the filters ask (chip,
// memory, seat, online; network-wide and per region: `matched` is summed from the groups, and a
// narrow query gathers its rows from them), the members of each pod, and per region a pyramid
// of grids (cells of 1, 2, 4, ... units) holding the online machines' aggregates, from which a
// map view takes whole cells and descends only where the view's edge cuts one.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
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
// they fit, else clusters of the machines within cells of `cell` units (rounded up to a power of
// two, at least 1, and doubled until they fit).
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

// Map clusters are cells of a grid, 2^L units wide at level L, whose lines sit at -kGridShift
// plus whole cells: never through a region's centre, which lies between a quarter and two thirds
// of the way across its cell at every level (21845 is 0b101010101010101), so the middle of a
// place is one cluster, not four.
inline constexpr double kGridShift = 21845;
// Levels 0 to kGridLevels - 1: cells of 1 to 2048 units (a region of a million machines spans
// about 1,200), so a view asking for coarser clusters than that gets the top level.
inline constexpr int kGridLevels = 12;

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
  // For each of `machines`: [id, was, now, first, last]: was and now are records (null: not
  // there) of it as it was at the previous take_changes() and as it is: [chip, memory_bytes,
  // region, seat, pod, online, jobs_served, tok_s, online_since, x, y] (x, y: its spiral slot);
  // first and last are the versions of the commits that changed it first and last since then. A
  // page can tell from them whether its view is touched and patch it without asking again.
  nlohmann::json records = nlohmann::json::array();
  // The population's version() when these were taken: the changes are those of the commits after
  // the previous take up to this one (a table page or a map view says the version it is of).
  uint64_t through = 0;
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
  // {"total", "matched", "offset", "limit", "sort", "order", "at": version(), "machines": [machine_json...]}
  nlohmann::json machines(const MachineQuery& q) const;
  // {"mode": "machines" | "clusters", "cell", "in_view", "marks": N, "at": version(), "regions": [{"region",
  //   "machines": [[x, y, id, chip, memory_bytes, seat, pod, jobs_served, tok_s, online_since]...]
  //   or "clusters": [[x, y, count, [base, pro, max, ultra], memory_bytes, pods]...]}]}
  nlohmann::json marks(const MapQuery& q) const;
  nlohmann::json machine(const std::string& id) const;  // machine_json, or null
  // The slot of the machine on its region's spiral, or -1 when there is no such machine.
  int64_t slot(const std::string& id) const;
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
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr int kSorts = 9;   // MachineQuery::Sort's values
  static constexpr int kLevels = kGridLevels;
  struct Row {
    Machine m;
    ChipClass cls = ChipClass::Base;
    int64_t slot = -1;                 // on its region's spiral; -1: a free row
    uint64_t id_head = 0;              // the id's first 8 bytes, big-endian: ties compared fast
    uint32_t at_kind = 0, at_region_kind = 0;  // its places in its kinds' row lists
  };
  // Machines alike in all the table's filters look at but region and pod.
  struct KindKey {
    std::string chip;
    int64_t memory = 0;
    std::string seat;
    bool online = false;
    auto operator<=>(const KindKey&) const = default;
  };
  using Kinds = std::map<KindKey, std::vector<uint32_t>>;  // rows, in no order
  // The online machines of one map grid cell; sx, sy sum positions in 1/1024 units, so that
  // taking a machine out leaves exactly what was there before it.
  struct Cell {
    int64_t count = 0, memory = 0, sx = 0, sy = 0;
    std::array<int64_t, kChipClasses> classes{};
    std::map<std::string, int64_t> pods;  // online members per pod
    std::vector<int64_t> slots;           // level 0 only: its online slots
  };
  struct Region {
    int64_t machines = 0, online = 0, memory = 0, jobs = 0;
    std::array<int64_t, kChipClasses> classes{};
    std::map<std::string, int64_t> seats;     // online machines per seat
    std::map<std::string, int64_t> pods;      // online members per pod
    std::vector<uint32_t> slot_rows;          // spiral slot -> row (kNone: free), to the last taken
    std::set<int64_t> free_slots;             // the free slots of slot_rows
    std::array<std::unordered_map<uint64_t, Cell>, kLevels> grid;  // level L: cells of 2^L units
    Kinds kinds;
    nlohmann::json to_json(const std::string& name) const;  // region_json's entry
  };
  // A sort key's order over rows: the key, then the id. A KeyOf compares by the key alone (the
  // first row of a run of equal keys, for walking an order downwards with ties still by id).
  struct KeyOf {
    uint32_t row;
  };
  struct SortOrder {
    const Population* p;
    MachineQuery::Sort sort;
    using is_transparent = void;
    bool operator()(uint32_t a, uint32_t b) const;
    bool operator()(KeyOf a, uint32_t b) const;
    bool operator()(uint32_t a, KeyOf b) const;
  };
  struct Agg;  // a map view's sum over part of a region (population.cpp)

  void add_locked(const Row& r, int sign);  // adds or takes a row's share of the aggregates
  void apply_locked(Pending& p);
  void touched_locked(const Machine& m);  // counts a machine and its region as changed
  nlohmann::json record_locked(const std::string& id) const;  // Changes::records' form, or null
  // Puts a row into (or takes it out of) every index; the sort orders only with `orders`. A row
  // put in with a slot already (taken by the caller) keeps it.
  void link_locked(uint32_t at, int sign, bool orders = true);
  void update_locked(uint32_t at, Machine next);
  void kinds_locked(uint32_t at, int sign);
  void grid_locked(Region& g, const Row& r, int sign);
  void place_locked(Region& g, uint32_t at);  // chooses the row's slot
  void unplace_locked(Region& g, const Row& r);
  void take_slot_locked(Region& g, int64_t slot, uint32_t at);
  // The online machines of a region's grid cell (level, cx, cy) in the rectangle: counted, and
  // summed into `agg` and their slots listed into `slots` when given.
  int64_t gather_locked(const Region& g, int level, int64_t cx, int64_t cy, const MapQuery::View& v, Agg* agg,
                        std::vector<int64_t>* slots) const;

  mutable std::mutex pending_mu_;
  std::vector<Pending> pending_;

  mutable std::shared_mutex mu_;
  std::vector<Row> rows_;
  std::vector<uint32_t> free_rows_;
  std::unordered_map<std::string, uint32_t> index_;  // id -> row
  std::map<std::string, Region> regions_;
  std::map<std::string, int64_t> chips_;  // registered machines per chip name
  std::map<std::string, int64_t> pods_;   // online members per pod, network-wide
  std::unordered_map<std::string, std::vector<uint32_t>> pod_rows_;  // every member of each pod
  Kinds kinds_;
  std::vector<std::set<uint32_t, SortOrder>> sorted_;  // one order per MachineQuery::Sort
  int64_t online_ = 0, memory_ = 0, jobs_ = 0;
  uint64_t version_ = 0;
  int64_t served_events_ = 0;
  Changes changes_;  // since take_changes()
  struct Touched {
    nlohmann::json was;  // its record before the first change
    uint64_t first = 0, last = 0;  // commits
  };
  std::unordered_map<std::string, Touched> changed_ids_;
  std::unordered_set<std::string> changed_regions_;
};

}  // namespace orchard::network::world
