// The World's data without a browser: the population's aggregates, table pages and map marks
// against a population computed by hand; the feed's totals, deltas and history; the routes, the
// stream cap, and that event streams neither outlive a client nor block a server stop. And the
// sizes and times at 1,000 / 20,000 / 100,000 machines (printed; bounds asserted).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "core/error.h"
#include "network/world/world_assets.h"
#include "network/world/world_routes.h"

namespace world = orchard::network::world;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

world::Machine machine(std::string id, std::string chip, int64_t gb, std::string region, std::string seat,
                       std::string pod, bool online, int64_t jobs) {
  return {std::move(id), std::move(chip), std::move(region), std::move(seat), std::move(pod), gb * GiB, online, jobs,
          1.5, online ? 1'700'000'000'000 : 0};
}

// Seven machines, by hand:
//   a, b  M2 Ultra 192 GB  Lisbon  dedicated  pod rack  online  10, 5 jobs
//   c     M3 Max    64 GB  Lisbon  shared               online   2
//   d     M1         8 GB  Lisbon  shared               offline  7
//   e     M4 Pro    24 GB  Tokyo   shared               online   0
//   f     M4        16 GB  Tokyo   dedicated            online   1
//   g     M2 Max    32 GB  (not shared) shared          online   3
std::shared_ptr<world::Population> seven() {
  auto p = std::make_shared<world::Population>();
  p->put(machine("a", "M2 Ultra", 192, "Lisbon, PT", "dedicated", "rack", true, 10));
  p->put(machine("b", "M2 Ultra", 192, "Lisbon, PT", "dedicated", "rack", true, 5));
  p->put(machine("c", "M3 Max", 64, "Lisbon, PT", "shared", "", true, 2));
  p->put(machine("d", "M1", 8, "Lisbon, PT", "shared", "", false, 7));
  p->put(machine("e", "M4 Pro", 24, "Tokyo, JP", "shared", "", true, 0));
  p->put(machine("f", "M4", 16, "Tokyo, JP", "dedicated", "", true, 1));
  p->put(machine("g", "M2 Max", 32, "", "shared", "", true, 3));
  p->commit();
  return p;
}

std::vector<std::string> ids(const json& page) {
  std::vector<std::string> out;
  for (const auto& m : page["machines"]) out.push_back(m["id"]);
  return out;
}

json query(const world::Population& p, std::multimap<std::string, std::string> params) {
  return p.machines(world::MachineQuery::parse(params));
}

const json& region(const json& summary, const std::string& name) {
  for (const auto& r : summary["regions"])
    if (r["name"] == name) return r;
  throw std::runtime_error("no region " + name);
}

}  // namespace

TEST(WorldPopulation, ChipClassesAndTheSpiral) {
  EXPECT_EQ(world::chip_class("Apple M2 Ultra"), world::ChipClass::Ultra);
  EXPECT_EQ(world::chip_class("M3 MAX"), world::ChipClass::Max);
  EXPECT_EQ(world::chip_class("M4 Pro"), world::ChipClass::Pro);
  EXPECT_EQ(world::chip_class("M1"), world::ChipClass::Base);
  EXPECT_EQ(world::chip_class("Maximus"), world::ChipClass::Base);  // a word, not a prefix

  // Ring k holds 6k slots at distance between k*sqrt(3)/2 and k; neighbours are one unit apart.
  EXPECT_EQ(world::spiral_slot(0), std::make_pair(0.0, 0.0));
  int64_t slot = 1;
  for (int64_t k = 1; k <= 40; ++k) {
    for (int64_t j = 0; j < 6 * k; ++j, ++slot) {
      ASSERT_EQ(world::spiral_ring(slot), k) << slot;
      auto [x, y] = world::spiral_slot(slot);
      const double r = std::hypot(x, y);
      ASSERT_GE(r, k * std::sqrt(3.0) / 2 - 1e-9);
      ASSERT_LE(r, k + 1e-9);
      if (j > 0) {
        auto [px, py] = world::spiral_slot(slot - 1);
        ASSERT_NEAR(std::hypot(x - px, y - py), 1.0, 1e-9) << slot;
      }
    }
  }
  auto [x1, y1] = world::spiral_slot(1);
  EXPECT_NEAR(x1, 1, 1e-12);
  EXPECT_NEAR(y1, 0, 1e-12);
  auto [x2, y2] = world::spiral_slot(2);
  EXPECT_NEAR(x2, 0.5, 1e-12);
  EXPECT_NEAR(y2, std::sqrt(3.0) / 2, 1e-12);
}

TEST(WorldPopulation, SummaryAggregatesRegionsByHand) {
  auto p = seven();
  json s = p->summary();
  EXPECT_EQ(s["totals"]["nodes"], 7);
  EXPECT_EQ(s["totals"]["online"], 6);
  EXPECT_EQ(s["totals"]["memory_bytes"], (192 + 192 + 64 + 24 + 16 + 32) * GiB);
  EXPECT_EQ(s["totals"]["jobs_served"], 28);
  EXPECT_EQ(s["totals"]["pods"], 1);
  ASSERT_EQ(s["regions"].size(), 3u);
  const json& lisbon = region(s, "Lisbon, PT");
  EXPECT_EQ(lisbon["machines"], 4);
  EXPECT_EQ(lisbon["online"], 3);
  EXPECT_EQ(lisbon["memory_bytes"], (192 + 192 + 64) * GiB);
  EXPECT_EQ(lisbon["classes"], json({0, 0, 1, 2}));
  EXPECT_EQ(lisbon["pods"], 1);
  EXPECT_EQ(lisbon["seats"], json({{"dedicated", 2}, {"shared", 1}}));
  EXPECT_EQ(lisbon["jobs_served"], 24);
  // The spiral reaches its outermost taken slot; four machines sit within the first ring.
  const int64_t lisbon_last = std::max({p->slot("a"), p->slot("b"), p->slot("c"), p->slot("d")});
  EXPECT_EQ(lisbon["slots"], lisbon_last + 1);
  EXPECT_LE(lisbon_last, 12);
  const json& tokyo = region(s, "Tokyo, JP");
  EXPECT_EQ(tokyo["classes"], json({1, 1, 0, 0}));
  EXPECT_EQ(tokyo["memory_bytes"], 40 * GiB);
  EXPECT_EQ(region(s, "")["classes"], json({0, 0, 1, 0}));
  EXPECT_EQ(s["seats"], json({{"dedicated", 3}, {"shared", 3}}));
  EXPECT_EQ(s["chips"][0]["chip"], "M2 Ultra");  // the most common first
  EXPECT_EQ(s["chips"][0]["machines"], 2);
  EXPECT_EQ(s["chips"][0]["class"], "ultra");

  // Changes: c serves a job, e goes offline (describe keeps its jobs), g moves to Tokyo, d leaves.
  p->take_changes();
  p->job_served("c", 30);
  auto e = machine("e", "M4 Pro", 24, "Tokyo, JP", "shared", "", false, 999);
  p->describe(e);
  p->put(machine("g", "M2 Max", 32, "Tokyo, JP", "shared", "", true, 3));
  p->remove("d");
  p->job_served("nobody", 1);  // never put: ignored
  p->commit();
  auto changes = p->take_changes();
  EXPECT_EQ(changes.regions, (std::vector<std::string>{"", "Lisbon, PT", "Tokyo, JP"}));
  EXPECT_EQ(changes.machines, (std::vector<std::string>{"c", "d", "e", "g"}));
  EXPECT_EQ(changes.machines_changed, 4);
  EXPECT_EQ(p->served_events(), 1);
  s = p->summary();
  EXPECT_EQ(s["totals"]["nodes"], 6);
  EXPECT_EQ(s["totals"]["online"], 5);
  EXPECT_EQ(s["totals"]["jobs_served"], 28 - 7 + 1);
  EXPECT_EQ(s["regions"].size(), 2u);  // nobody left unshared
  EXPECT_EQ(region(s, "Tokyo, JP")["online"], 2);
  EXPECT_EQ(region(s, "Lisbon, PT")["slots"], std::max({p->slot("a"), p->slot("b"), p->slot("c")}) + 1);
  EXPECT_EQ(p->machine("e")["jobs_served"], 0);
  EXPECT_FALSE(p->machine("e").contains("online_since"));
  EXPECT_EQ(p->machine("c")["tok_s"], 30.0);
  EXPECT_TRUE(p->machine("d").is_null());
}

TEST(WorldPopulation, MachinePagesFilterAndSortOnTheServer) {
  auto p = seven();
  json all = query(*p, {});
  EXPECT_EQ(all["total"], 7);
  EXPECT_EQ(all["matched"], 6);  // online only by default
  EXPECT_EQ(ids(all), (std::vector<std::string>{"a", "b", "c", "g", "e", "f"}));  // memory, then id
  EXPECT_EQ(all["sort"], "memory");
  EXPECT_EQ(all["order"], "desc");
  EXPECT_EQ(ids(query(*p, {{"offset", "2"}, {"limit", "2"}})), (std::vector<std::string>{"c", "g"}));
  EXPECT_EQ(ids(query(*p, {{"offset", "6"}})), std::vector<std::string>{});
  EXPECT_EQ(ids(query(*p, {{"online", "any"}, {"sort", "jobs"}})),
            (std::vector<std::string>{"a", "d", "b", "g", "c", "f", "e"}));
  EXPECT_EQ(ids(query(*p, {{"online", "any"}, {"sort", "jobs"}, {"order", "asc"}})),
            (std::vector<std::string>{"e", "f", "c", "g", "b", "d", "a"}));
  EXPECT_EQ(ids(query(*p, {{"sort", "chip"}})), (std::vector<std::string>{"g", "a", "b", "c", "f", "e"}));
  EXPECT_EQ(ids(query(*p, {{"class", "ultra"}})), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ids(query(*p, {{"chip", "M4"}})), std::vector<std::string>{"f"});
  EXPECT_EQ(ids(query(*p, {{"min_memory", std::to_string(32 * GiB)}})), (std::vector<std::string>{"a", "b", "c", "g"}));
  EXPECT_EQ(ids(query(*p, {{"region", ""}})), std::vector<std::string>{"g"});
  EXPECT_EQ(ids(query(*p, {{"region", "Tokyo, JP"}})), (std::vector<std::string>{"e", "f"}));
  EXPECT_EQ(ids(query(*p, {{"seat", "dedicated"}})), (std::vector<std::string>{"a", "b", "f"}));
  EXPECT_EQ(ids(query(*p, {{"pod", "rack"}, {"sort", "id"}, {"order", "desc"}})), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(ids(query(*p, {{"online", "false"}})), std::vector<std::string>{"d"});
  json mixed = query(*p, {{"region", "Lisbon, PT"}, {"online", "any"}, {"min_memory", std::to_string(64 * GiB)}, {"limit", "1"}});
  EXPECT_EQ(mixed["matched"], 3);
  EXPECT_EQ(ids(mixed), std::vector<std::string>{"a"});

  for (auto bad : std::vector<std::multimap<std::string, std::string>>{
           {{"sort", "nope"}}, {{"limit", "0"}}, {{"limit", "501"}}, {{"offset", "-1"}}, {{"class", "huge"}},
           {{"online", "maybe"}}, {{"order", "up"}}, {{"min_memory", "12x"}}}) {
    try {
      world::MachineQuery::parse(bad);
      ADD_FAILURE() << bad.begin()->first << "=" << bad.begin()->second << " was accepted";
    } catch (const orchard::FormatError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[world] " + bad.begin()->first + "=", 0), 0u) << e.what();
    }
  }
}

TEST(WorldPopulation, MapMarksAreMachinesOrClustersWithinTheBudget) {
  auto p = seven();
  auto marks = [&](std::multimap<std::string, std::string> params) { return p->marks(world::MapQuery::parse(params)); };
  // Where each sits: distinct slots near the centre, the pod's two side by side.
  const int64_t sa = p->slot("a"), sb = p->slot("b"), sc = p->slot("c"), sd = p->slot("d");
  EXPECT_EQ(std::set<int64_t>({sa, sb, sc, sd}).size(), 4u);
  EXPECT_EQ(std::abs(sa - sb), 1);
  EXPECT_EQ(p->slot("nobody"), -1);
  auto [ax, ay] = world::spiral_slot(sa);
  auto around = [](double x, double y) {
    return fmt::format("Lisbon, PT|{}|{}|{}|{}", x - 0.2, y - 0.2, x + 0.2, y + 0.2);
  };
  json near = marks({{"v", around(ax, ay)}});
  EXPECT_EQ(near["mode"], "machines");
  EXPECT_EQ(near["in_view"], 1);
  ASSERT_EQ(near["regions"].size(), 1u);
  const json& list = near["regions"][0]["machines"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0], json({std::round(ax * 10) / 10, std::round(ay * 10) / 10, "a", "M2 Ultra", 192 * GiB, "dedicated",
                           "rack", 10, 1.5, 1'700'000'000'000}));
  auto [dx, dy] = world::spiral_slot(sd);
  EXPECT_EQ(marks({{"v", around(dx, dy)}})["in_view"], 0);  // d is offline

  json both = marks({{"v", "Lisbon, PT|-3|-3|3|3"}, {"v", "Tokyo, JP|-3|-3|3|3"}, {"v", "Nowhere|-3|-3|3|3"}});
  EXPECT_EQ(both["mode"], "machines");
  EXPECT_EQ(both["in_view"], 5);  // d is offline
  // Asked for clusters (machines too close to tell apart on screen): clusters, however few.
  json asked = marks({{"v", "Lisbon, PT|-3|-3|3|3"}, {"clusters", "1"}});
  EXPECT_EQ(asked["mode"], "clusters");
  EXPECT_EQ(asked["marks"], 1);
  json clustered = marks({{"v", "Lisbon, PT|-3|-3|3|3"}, {"v", "Tokyo, JP|-3|-3|3|3"}, {"budget", "2"}});
  EXPECT_EQ(clustered["mode"], "clusters");
  EXPECT_EQ(clustered["marks"], 2);
  ASSERT_EQ(clustered["regions"].size(), 2u);
  const json& cell = clustered["regions"][0]["clusters"][0];
  EXPECT_EQ(cell[2], 3);
  EXPECT_EQ(cell[3], json({0, 0, 1, 2}));
  EXPECT_EQ(cell[4], (192 + 192 + 64) * GiB);
  EXPECT_EQ(cell[5], 1);  // one pod
  // One cell per machine would be 3 marks: the cells double until one budget mark holds them.
  json tight = marks({{"v", "Lisbon, PT|-3|-3|3|3"}, {"cell", "0.5"}, {"budget", "1"}});
  EXPECT_EQ(tight["marks"], 1);
  EXPECT_GE(tight["cell"].get<double>(), 2.0);

  for (auto bad : std::vector<std::multimap<std::string, std::string>>{
           {{"v", "Lisbon, PT|0|0|1"}}, {{"v", "Lisbon, PT|1|0|0|1"}}, {{"v", "Lisbon, PT|a|0|1|1"}},
           {{"budget", "2001"}}, {{"cell", "0"}}, {{"clusters", "yes"}}}) {
    EXPECT_THROW(world::MapQuery::parse(bad), orchard::FormatError) << bad.begin()->second;
  }
}

// The indexes against a plain scan: random populations under random changes, and at each step
// random table pages and map views answered both by the population and by brute force over a
// copy of every machine kept by the test (positions read back with slot(): that a slot stays put
// and is never shared is checked here too).
namespace {

struct Reference {
  std::map<std::string, world::Machine> machines;

  json page(const world::MachineQuery& q) const {
    std::vector<const world::Machine*> hits;
    for (const auto& [id, m] : machines) {
      if (q.online == world::MachineQuery::Online::Yes && !m.online) continue;
      if (q.online == world::MachineQuery::Online::No && m.online) continue;
      if (q.chip && m.chip != *q.chip) continue;
      if (q.chip_class && world::chip_class(m.chip) != *q.chip_class) continue;
      if (m.memory_bytes < q.min_memory || (q.region && m.region != *q.region) || (q.seat && m.seat != *q.seat) ||
          (q.pod && m.pod != *q.pod))
        continue;
      hits.push_back(&m);
    }
    auto key = [&q](const world::Machine& m) -> std::variant<int64_t, double, std::string> {
      switch (q.sort) {
        case world::MachineQuery::Sort::Memory: return m.memory_bytes;
        case world::MachineQuery::Sort::Chip: return m.chip;
        case world::MachineQuery::Sort::Region: return m.region;
        case world::MachineQuery::Sort::Seat: return m.seat;
        case world::MachineQuery::Sort::Pod: return m.pod;
        case world::MachineQuery::Sort::Jobs: return m.jobs_served;
        case world::MachineQuery::Sort::TokS: return m.tok_s;
        case world::MachineQuery::Sort::Uptime: return m.online ? -m.online_since : INT64_MIN;
        case world::MachineQuery::Sort::Id: return m.id;
      }
      return int64_t{0};
    };
    std::stable_sort(hits.begin(), hits.end(), [&](const world::Machine* a, const world::Machine* b) {
      auto ka = key(*a), kb = key(*b);
      if (ka != kb) return q.descending ? kb < ka : ka < kb;
      return a->id < b->id;
    });
    json ids = json::array();
    for (int64_t i = q.offset; i < std::min<int64_t>(static_cast<int64_t>(hits.size()), q.offset + q.limit); ++i)
      ids.push_back(hits[static_cast<size_t>(i)]->id);
    return {{"matched", hits.size()}, {"ids", ids}};
  }

  // {"mode", "in_view", "cell", "marks": [...]} with machines as [region, x, y, id] and clusters
  // as [region, cx, cy, count, classes, memory, pods, mean x, mean y].
  json map(const world::MapQuery& q, const world::Population& p) const {
    struct Hit {
      size_t view;
      int64_t slot;
      double x, y;
      const world::Machine* m;
    };
    std::vector<Hit> hits;
    for (size_t v = 0; v < q.views.size(); ++v)
      for (const auto& [id, m] : machines) {
        if (m.region != q.views[v].region || !m.online) continue;
        const int64_t slot = p.slot(id);
        auto [x, y] = world::spiral_slot(slot);
        if (x >= q.views[v].x0 && x <= q.views[v].x1 && y >= q.views[v].y0 && y <= q.views[v].y1)
          hits.push_back({v, slot, x, y, &m});
      }
    json out = {{"in_view", hits.size()}, {"marks", json::array()}};
    if (static_cast<int64_t>(hits.size()) <= q.budget && !q.clusters) {
      std::sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) { return std::tie(a.view, a.slot) < std::tie(b.view, b.slot); });
      out["mode"] = "machines";
      for (const Hit& h : hits)
        out["marks"].push_back({q.views[h.view].region, std::round(h.x * 10) / 10, std::round(h.y * 10) / 10, h.m->id});
      return out;
    }
    out["mode"] = "clusters";
    const int top = world::kGridLevels - 1;
    for (int level = std::clamp(static_cast<int>(std::ceil(std::log2(q.cell))), 0, top);; ++level) {
      const double size = std::ldexp(1.0, level);
      struct Sum {
        int64_t count = 0, memory = 0;
        double sx = 0, sy = 0;
        std::vector<int64_t> classes = std::vector<int64_t>(4);
        std::set<std::string> pods;
      };
      std::map<std::tuple<size_t, int64_t, int64_t>, Sum> cells;
      for (const Hit& h : hits) {
        Sum& c = cells[{h.view, static_cast<int64_t>(std::floor((h.x + world::kGridShift) / size)),
                        static_cast<int64_t>(std::floor((h.y + world::kGridShift) / size))}];
        c.count++;
        c.memory += h.m->memory_bytes;
        c.sx += h.x;
        c.sy += h.y;
        c.classes[static_cast<size_t>(world::chip_class(h.m->chip))]++;
        if (!h.m->pod.empty()) c.pods.insert(h.m->pod);
      }
      if (static_cast<int64_t>(cells.size()) > q.budget && level < top) continue;
      out["cell"] = size;
      for (const auto& [key, c] : cells)
        out["marks"].push_back({q.views[std::get<0>(key)].region, std::get<1>(key), std::get<2>(key), c.count, c.classes,
                                c.memory, c.pods.size(), c.sx / static_cast<double>(c.count),
                                c.sy / static_cast<double>(c.count)});
      return out;
    }
  }
};

}  // namespace

TEST(WorldPopulation, IndexesAnswerAsAScanOverRandomPopulationsAndChanges) {
  const std::vector<std::string> chips = {"M1", "M2 Pro", "M3 Max", "M2 Ultra", "M4", "Apple M4 Max"};
  const std::vector<std::string> regions = {"Lisbon, PT", "Tokyo, JP", "", "Quito, EC", "Oslo, NO"};
  const std::vector<std::string> seats = {"shared", "dedicated"};
  const std::vector<std::string> pods = {"", "", "", "", "p1", "p2", "p3"};
  const std::vector<int64_t> mems = {8, 16, 24, 64, 192};
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    auto pick = [&rng](const auto& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
    auto chance = [&rng](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
    world::Population p;
    Reference ref;
    std::map<std::string, std::pair<std::string, int64_t>> placed;  // id -> region, slot last seen
    int next_id = 0;
    auto fresh = [&](std::string id) {
      return machine(std::move(id), pick(chips), pick(mems), pick(regions), pick(seats), pick(pods), chance(0.8),
                     std::uniform_int_distribution<int64_t>(0, 20)(rng));
    };
    const int start = 200 + static_cast<int>(seed) * 150;
    for (int step = 0; step < 12; ++step) {
      const int changes = step == 0 ? start : 60;
      for (int c = 0; c < changes; ++c) {
        const double what = std::uniform_real_distribution<double>(0, 1)(rng);
        if (step == 0 || ref.machines.empty() || what < 0.3) {
          world::Machine m = fresh("m" + std::to_string(next_id++));
          m.online_since = m.online ? 1'700'000'000'000 + std::uniform_int_distribution<int64_t>(0, 5)(rng) * 1000 : 0;
          ref.machines[m.id] = m;
          p.put(m);
          continue;
        }
        auto it = ref.machines.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, ref.machines.size() - 1)(rng));
        world::Machine& m = it->second;
        if (what < 0.45) {
          p.remove(m.id);
          ref.machines.erase(it);
        } else if (what < 0.7) {
          const double speed = std::uniform_int_distribution<int>(1, 4)(rng) * 2.5;
          p.job_served(m.id, speed);
          m.jobs_served += 1;
          m.tok_s = speed;
        } else {
          // describe: something about it changes (often only online), jobs and speed kept
          world::Machine next = m;
          next.online = chance(0.7);
          next.online_since = next.online ? 1'700'000'000'000 + std::uniform_int_distribution<int64_t>(0, 5)(rng) * 1000 : 0;
          if (chance(0.2)) next.region = pick(regions);
          if (chance(0.2)) next.chip = pick(chips);
          if (chance(0.2)) next.memory_bytes = pick(mems) * GiB;
          if (chance(0.1)) next.pod = pick(pods);
          if (chance(0.1)) next.seat = pick(seats);
          world::Machine sent = next;
          sent.jobs_served = 999;  // describe keeps what the population counted
          p.describe(sent);
          m = next;
        }
      }
      p.commit();
      ASSERT_EQ(p.size(), ref.machines.size());

      // Slots: one machine per slot of a region; a machine that stayed in its region stayed put.
      std::map<std::pair<std::string, int64_t>, std::string> taken;
      std::map<std::string, std::pair<std::string, int64_t>> now;
      for (const auto& [id, m] : ref.machines) {
        const int64_t slot = p.slot(id);
        ASSERT_GE(slot, 0) << id;
        ASSERT_TRUE(taken.emplace(std::make_pair(m.region, slot), id).second) << id << " shares slot " << slot;
        now[id] = {m.region, slot};
        auto was = placed.find(id);
        if (was != placed.end() && was->second.first == m.region) {
          ASSERT_EQ(was->second.second, slot) << id << " moved";
        }
      }
      placed = now;

      for (int k = 0; k < 40; ++k) {
        std::multimap<std::string, std::string> params;
        if (chance(0.2)) params.emplace("chip", chance(0.9) ? pick(chips) : "M9");
        if (chance(0.2)) params.emplace("class", pick(std::vector<std::string>{"base", "pro", "max", "ultra"}));
        if (chance(0.2)) params.emplace("min_memory", std::to_string(pick(mems) * GiB));
        if (chance(0.3)) params.emplace("region", chance(0.9) ? pick(regions) : "Nowhere");
        if (chance(0.2)) params.emplace("seat", pick(seats));
        if (chance(0.1)) params.emplace("pod", pick(pods));
        if (chance(0.5)) params.emplace("online", pick(std::vector<std::string>{"true", "false", "any"}));
        params.emplace("sort", pick(std::vector<std::string>{"memory", "chip", "region", "seat", "pod", "jobs", "tok_s", "uptime", "id"}));
        if (chance(0.5)) params.emplace("order", chance(0.5) ? "asc" : "desc");
        params.emplace("offset", std::to_string(chance(0.5) ? 0 : std::uniform_int_distribution<int>(0, 400)(rng)));
        params.emplace("limit", std::to_string(std::uniform_int_distribution<int>(1, 80)(rng)));
        const auto q = world::MachineQuery::parse(params);
        json got = p.machines(q), want = ref.page(q);
        std::string where;
        for (const auto& [k2, v] : params) where += k2 + "=" + v + " ";
        ASSERT_EQ(got["matched"], want["matched"]) << where;
        ASSERT_EQ(json(ids(got)), want["ids"]) << where;
      }

      for (int k = 0; k < 30; ++k) {
        std::multimap<std::string, std::string> params;
        const int views = std::uniform_int_distribution<int>(1, 3)(rng);
        for (int v = 0; v < views; ++v) {
          std::uniform_real_distribution<double> at(-30, 30), span(0.5, 40);
          const double x0 = at(rng), y0 = at(rng);
          params.emplace("v", fmt::format("{}|{}|{}|{}|{}", pick(regions), x0, y0, x0 + span(rng), y0 + span(rng)));
        }
        params.emplace("cell", fmt::format("{}", std::uniform_real_distribution<double>(0.5, 20)(rng)));
        params.emplace("budget", std::to_string(std::uniform_int_distribution<int>(1, 300)(rng)));
        if (chance(0.2)) params.emplace("clusters", "1");
        const auto q = world::MapQuery::parse(params);
        json got = p.marks(q), want = ref.map(q, p);
        std::string where;
        for (const auto& [k2, v] : params) where += k2 + "=" + v + " ";
        ASSERT_EQ(got["mode"], want["mode"]) << where;
        ASSERT_EQ(got["in_view"], want["in_view"]) << where;
        json flat = json::array();
        for (const auto& r : got["regions"])
          for (const auto& m : r.contains("machines") ? r["machines"] : r["clusters"]) {
            json mark = m;
            mark.insert(mark.begin(), r["region"]);
            flat.push_back(mark);
          }
        if (got["mode"] == "machines") {
          json simple = json::array();
          for (const auto& m : flat) simple.push_back({m[0], m[1], m[2], m[3]});
          ASSERT_EQ(simple, want["marks"]) << where;
          continue;
        }
        ASSERT_EQ(got["cell"], want["cell"]) << where;
        ASSERT_EQ(got["marks"], want["marks"].size()) << where;
        ASSERT_EQ(flat.size(), want["marks"].size()) << where;
        for (size_t i = 0; i < flat.size(); ++i) {
          const json &g = flat[i], &w = want["marks"][i];
          ASSERT_EQ(g[0], w[0]) << where;
          ASSERT_NEAR(g[1].get<double>(), w[7].get<double>(), 0.051 + 1e-9) << where;
          ASSERT_NEAR(g[2].get<double>(), w[8].get<double>(), 0.051 + 1e-9) << where;
          ASSERT_EQ(g[3], w[3]) << where;
          ASSERT_EQ(g[4], w[4]) << where;
          ASSERT_EQ(g[5], w[5]) << where;
          ASSERT_EQ(g[6], w[6]) << where;
        }
      }
    }
  }
}

TEST(WorldFeed, CompletesTotalsWithTheSourcesFigures) {
  json totals = {{"nodes", 3}, {"online", 2}, {"memory_bytes", 80 * GiB}, {"jobs_served", 7}, {"pods", 0}};
  world::WorldFeed::complete_totals(totals, {{"queue", 7}, {"tok_s", 99.0}, {"pods", 2}, {"simulation", {{"a", 1}}}}, 1.5);
  EXPECT_EQ(totals["online"], 2);
  EXPECT_EQ(totals["tok_s"], 99.0);
  EXPECT_EQ(totals["queue"], 7);
  EXPECT_EQ(totals["pods"], 2);  // the source's figure wins
  EXPECT_EQ(totals["jobs_per_min"], 1.5);
  EXPECT_TRUE(totals["credits_by_seat"].is_object());
  EXPECT_FALSE(totals.contains("simulation"));
  // Without the source's output figure there is none: machines' tok_s are their last jobs' speeds.
  json bare = json::object();
  world::WorldFeed::complete_totals(bare, nullptr, 0);
  EXPECT_TRUE(bare["tok_s"].is_null());
  EXPECT_EQ(bare["online"], 0);
}

TEST(WorldFeed, DeltasCarryOnlyWhatChangedAndHistoryAverages) {
  auto p = seven();
  world::WorldFeed feed(p);
  const int64_t t0 = 1'700'000'000'000;  // a multiple of 10 s
  feed.publish({{"tok_s", 10.0}}, t0);
  EXPECT_EQ(feed.version(), 1u);
  auto first = feed.since(0);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].name, "summary");
  json summary = json::parse(first[0].json);
  EXPECT_EQ(summary["totals"]["online"], 6);
  EXPECT_EQ(summary["totals"]["tok_s"], 10.0);
  EXPECT_EQ(summary["regions"].size(), 3u);
  feed.publish({{"tok_s", 10.0}}, t0 + 1000);  // nothing new: no version
  EXPECT_EQ(feed.version(), 1u);
  EXPECT_TRUE(feed.since(1).empty());

  p->describe(machine("f", "M4", 16, "Tokyo, JP", "dedicated", "", false, 0));
  feed.publish({{"tok_s", 40.0}}, t0 + 2000);
  EXPECT_EQ(feed.version(), 2u);
  auto next = feed.since(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].name, "delta");
  json delta = json::parse(next[0].json);
  EXPECT_EQ(delta["version"], 2);
  ASSERT_EQ(delta["regions"].size(), 1u);  // Tokyo alone
  EXPECT_EQ(delta["regions"][0]["name"], "Tokyo, JP");
  EXPECT_EQ(delta["regions"][0]["online"], 1);
  EXPECT_EQ(delta["totals"]["online"], 5);
  EXPECT_EQ(delta["machines"]["changed"], 1);
  EXPECT_EQ(delta["machines"]["ids"], json({"f"}));
  // f as the page held it and as it is now, on the same slot, changed by the second commit; the
  // delta spans the population's versions from the previous one (the first commit) to it.
  auto [fx, fy] = world::spiral_slot(p->slot("f"));
  const json place = {std::round(fx * 10) / 10, std::round(fy * 10) / 10};
  const json was = {"M4", 16 * GiB, "Tokyo, JP", "dedicated", "", true, 1, 1.5, 1'700'000'000'000, place[0], place[1]};
  const json now = {"M4", 16 * GiB, "Tokyo, JP", "dedicated", "", false, 1, 1.5, 0, place[0], place[1]};
  EXPECT_EQ(delta["machines"]["records"], json::array({json::array({"f", was, now, 2, 2})}));
  EXPECT_EQ(delta["span"], json({1, 2}));
  EXPECT_FALSE(delta.contains("chips"));
  EXPECT_EQ(feed.since(0)[0].name, "summary");  // a new stream starts from the whole summary

  feed.publish({{"tok_s", 40.0}}, t0 + 10'000);  // the next step
  auto h = feed.history();
  EXPECT_EQ(h["step_s"], 10);
  ASSERT_EQ(h["points"].size(), 2u);
  EXPECT_EQ(h["points"][0][0], t0);
  EXPECT_DOUBLE_EQ(h["points"][0][1].get<double>(), 20.0);  // mean of 10, 10, 40
  EXPECT_DOUBLE_EQ(h["points"][1][1].get<double>(), 40.0);
  feed.publish({{"tok_s", 40.0}}, t0 + 3600'000 + 10'000);  // an hour later the old points are gone
  EXPECT_EQ(feed.history()["points"].size(), 1u);
}

TEST(WorldFeed, JobsPerMinuteCountsJobsServedNotNewcomers) {
  auto p = seven();
  world::WorldFeed feed(p);
  const int64_t t0 = 1'700'000'000'000;
  feed.publish(json::object(), t0);
  // h joins with 500 jobs behind it: not growth. a serves 6 in 30 s: 12 per minute.
  p->put(machine("h", "M4", 16, "Tokyo, JP", "shared", "", true, 500));
  for (int i = 0; i < 6; ++i) p->job_served("a", 20);
  feed.publish(json::object(), t0 + 30'000);
  json s = json::parse(feed.since(0)[0].json);
  EXPECT_DOUBLE_EQ(s["totals"]["jobs_per_min"].get<double>(), 12.0);
  EXPECT_EQ(s["totals"]["jobs_served"], 28 + 500 + 6);
}

TEST(WorldFeed, StreamCapAndShutdown) {
  world::FeedOptions options;
  options.max_streams = 2;
  world::WorldFeed feed(nullptr, options);
  EXPECT_TRUE(feed.acquire_stream());
  EXPECT_TRUE(feed.acquire_stream());
  EXPECT_FALSE(feed.acquire_stream());
  feed.release_stream();
  EXPECT_TRUE(feed.acquire_stream());

  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    feed.wait_past(0, 10s);
    woke = true;
  });
  std::this_thread::sleep_for(50ms);
  feed.shutdown();
  waiter.join();
  EXPECT_TRUE(woke);
  EXPECT_FALSE(feed.acquire_stream());
}

TEST(WorldRoutes, ServesThePageTheQueriesAndStreamsWithoutBlockingTheServer) {
  ASSERT_FALSE(world::world_assets().empty());
  httplib::Server server;
  world::WorldRoutesOptions options;
  options.feed.tick = 200ms;
  options.feed.max_streams = 1;
  std::atomic<int> calls{0};
  auto population = seven();
  auto sampler = world::mount_world_routes(
      server, population,
      [&] {
        ++calls;
        return json{{"queue", 4}};
      },
      options);
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&] { server.listen_after_bind(); });

  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  auto page = client.Get("/world");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Cache-Control"), "no-cache");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  auto again = client.Get("/world", {{"If-None-Match", page->get_header_value("ETag")}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  auto missing = client.Get("/world/assets/none.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  // A machine put just now shows at once: queries commit first.
  population->put(machine("z", "M4 Max", 128, "Tokyo, JP", "shared", "", true, 0));
  auto summary = client.Get("/v1/world");
  ASSERT_TRUE(summary);
  json s = json::parse(summary->body);
  EXPECT_EQ(s["totals"]["online"], 7);
  EXPECT_EQ(s["totals"]["queue"], 4);
  EXPECT_FALSE(s.contains("nodes"));
  auto page2 = client.Get("/v1/world/machines?class=max&sort=memory&limit=2");
  ASSERT_TRUE(page2);
  EXPECT_EQ(ids(json::parse(page2->body)), (std::vector<std::string>{"z", "c"}));
  auto bad = client.Get("/v1/world/machines?sort=nope");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("[world] sort='nope'"), std::string::npos);
  auto one = client.Get("/v1/world/machines/a");
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one->body)["chip"], "M2 Ultra");
  auto none = client.Get("/v1/world/machines/nobody");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  auto map = client.Get("/v1/world/map?v=Lisbon,%20PT|-2|-2|2|2&budget=5");
  ASSERT_TRUE(map);
  EXPECT_EQ(json::parse(map->body)["in_view"], 3);

  // Answers of a kilobyte or more go out compressed in what the client accepts (by us, at a fast
  // setting) and decode to the identity answer.
  auto plain = client.Get("/v1/world/machines?limit=50", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(plain);
  ASSERT_GE(plain->body.size(), 1024u);
  EXPECT_EQ(plain->get_header_value("Content-Encoding"), "");
  for (const char* accept : {"br", "gzip"}) {
    client.set_decompress(false);
    auto packed = client.Get("/v1/world/machines?limit=50", {{"Accept-Encoding", accept}});
    ASSERT_TRUE(packed);
    EXPECT_EQ(packed->get_header_value("Content-Encoding"), accept);
    EXPECT_LT(packed->body.size(), plain->body.size());
    client.set_decompress(true);
    auto decoded = client.Get("/v1/world/machines?limit=50", {{"Accept-Encoding", accept}});
    ASSERT_TRUE(decoded);
    EXPECT_EQ(json::parse(decoded->body), json::parse(plain->body)) << accept;
  }

  // A stream: the history and the summary arrive; the client hangs up after the summary, and
  // its slot comes back within a tick or two.
  std::string got;
  httplib::Client streamer("127.0.0.1", port);
  auto res = streamer.Get("/v1/world/events", [&](const char* data, size_t n) {
    got.append(data, n);
    return got.find("event: summary") == std::string::npos;  // false: hang up
  });
  EXPECT_NE(got.find("event: history"), std::string::npos);
  EXPECT_NE(got.find("event: summary"), std::string::npos);
  bool reacquired = false;  // the only slot is free again once the server noticed the hang-up
  for (int i = 0; i < 30 && !reacquired; ++i) {
    httplib::Client c2("127.0.0.1", port);
    std::string head;
    auto r = c2.Get("/v1/world/events", [&](const char* data, size_t n) {
      head.append(data, n);
      return false;
    });
    reacquired = head.rfind("retry:", 0) == 0;  // a 503 answers with its error instead
    if (!reacquired) std::this_thread::sleep_for(100ms);  // 503 meanwhile
  }
  EXPECT_TRUE(reacquired);

  // An open stream gets a delta when a machine leaves, and does not keep the server from stopping.
  std::atomic<bool> stream_ended{false}, saw_delta{false}, connected{false};
  std::thread holder([&] {
    httplib::Client c3("127.0.0.1", port);
    c3.set_read_timeout(10, 0);
    std::string text;
    // The only slot may still be held by the stream above until the server notices its hang-up.
    for (int i = 0; i < 50 && text.empty(); ++i) {
      c3.Get("/v1/world/events", [&](const char* data, size_t n) {
        text.append(data, n);
        connected = text.rfind("retry:", 0) == 0;  // else a 503's error
        if (text.find("event: delta") != std::string::npos && text.find("\"ids\":[\"z\"]") != std::string::npos) saw_delta = true;
        return true;
      });
      if (!connected) {
        text.clear();
        std::this_thread::sleep_for(100ms);
      }
    }
    stream_ended = true;
    if (!saw_delta) ADD_FAILURE() << "the stream said: " << text.substr(0, 3000);
  });
  for (int i = 0; i < 60 && !connected; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(connected);
  std::this_thread::sleep_for(300ms);  // its summary, then the change
  population->describe(machine("z", "M4 Max", 128, "Tokyo, JP", "shared", "", false, 0));
  for (int i = 0; i < 30 && !saw_delta; ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(saw_delta);
  const auto t0 = std::chrono::steady_clock::now();
  sampler.reset();  // the feed shuts down: the stream ends within a tick
  server.stop();
  listener.join();
  holder.join();
  EXPECT_TRUE(stream_ended);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_GT(calls.load(), 0);
}

// Sizes and times at 1,000 / 20,000 / 100,000 machines in 168-ish regions: what a page asks for
// stays bounded (the summary by the regions, a table page by its limit, a map view by its budget).
TEST(WorldScale, AnswersStaySmallAsThePopulationGrows) {
  const char* chips[] = {"M1", "M2 Pro", "M3 Max", "M2 Ultra", "M4", "M4 Pro"};
  const int64_t mems[] = {8, 16, 24, 36, 64, 128, 192};
  for (int64_t n : {1000, 20000, 100000}) {
    world::Population p;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) {
      // Hex like a public key's: differing from the first digit.
      char id[65];
      uint64_t h[4];
      for (uint64_t k = 0; k < 4; ++k) {
        uint64_t z = static_cast<uint64_t>(i) * 4 + k + 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h[k] = z ^ (z >> 31);
      }
      std::snprintf(id, sizeof id, "%016llx%016llx%016llx%016llx", static_cast<unsigned long long>(h[0]),
                    static_cast<unsigned long long>(h[1]), static_cast<unsigned long long>(h[2]),
                    static_cast<unsigned long long>(h[3]));
      p.put({id, chips[i % 6], "Region " + std::to_string((i * 7919) % 168 % (1 + i % 23)), i % 10 ? "shared" : "dedicated",
             i % 50 == 0 ? "pod" + std::to_string(i / 100) : "", mems[i % 7] * GiB, i % 5 != 0, i % 17, 10.0, 1'700'000'000'000});
    }
    p.commit();
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto timed = [](auto&& f, double& ms) {
      const auto s = std::chrono::steady_clock::now();
      auto out = f();
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
      return out;
    };
    double summary_ms, page_ms, filtered_ms, map_ms, world_map_ms;
    const std::string summary = timed([&] { return p.summary().dump(); }, summary_ms);
    const std::string page = timed([&] { return query(p, {{"sort", "memory"}, {"limit", "50"}}).dump(); }, page_ms);
    const std::string filtered =
        timed([&] { return query(p, {{"class", "ultra"}, {"region", "Region 0"}, {"sort", "jobs"}, {"offset", "100"}}).dump(); },
              filtered_ms);
    // The biggest region, whole, then its centre at a zoom that shows machines one by one.
    const std::string whole = timed([&] {
      return p.marks(world::MapQuery::parse({{"v", "Region 0|-1000|-1000|1000|1000"}, {"cell", "8"}})).dump();
    }, map_ms);
    const std::string close = timed([&] {
      return p.marks(world::MapQuery::parse({{"v", "Region 0|-20|-12|20|12"}, {"cell", "4"}})).dump();
    }, world_map_ms);
    json w = json::parse(whole), c = json::parse(close);
    std::printf("[world] %6lld machines: load %.0f ms; summary %.1f KB in %.2f ms; table page %.1f KB in %.2f ms, "
                "filtered %.2f ms; map of the biggest region %s %lld marks %.1f KB in %.2f ms, close up %s %lld marks "
                "%.1f KB in %.2f ms\n",
                static_cast<long long>(n), load_ms, summary.size() / 1024.0, summary_ms, page.size() / 1024.0, page_ms,
                filtered_ms, w["mode"].get<std::string>().c_str(), static_cast<long long>(w["marks"].get<int64_t>()),
                whole.size() / 1024.0, map_ms, c["mode"].get<std::string>().c_str(),
                static_cast<long long>(c["marks"].get<int64_t>()), close.size() / 1024.0, world_map_ms);
    EXPECT_LT(summary.size(), 64u << 10);
    EXPECT_LT(page.size(), 32u << 10);
    EXPECT_LE(w["marks"].get<int64_t>(), 2000);
    EXPECT_LE(c["marks"].get<int64_t>(), 2000);
    EXPECT_LT(whole.size(), 1u << 20);
    EXPECT_LT(close.size(), 1u << 20);
    EXPECT_EQ(json::parse(page)["machines"].size(), 50u);
  }
}
