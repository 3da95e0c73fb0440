#include "network/world/population.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <tuple>
#include <unordered_map>

#include "core/error.h"

namespace orchard::network::world {

using nlohmann::json;

namespace {

bool has_word(const std::string& lower, std::string_view word) {
  for (size_t at = lower.find(word); at != std::string::npos; at = lower.find(word, at + 1)) {
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(lower[at - 1]));
    const size_t end = at + word.size();
    const bool right = end == lower.size() || !std::isalnum(static_cast<unsigned char>(lower[end]));
    if (left && right) return true;
  }
  return false;
}

const std::string* param(const std::multimap<std::string, std::string>& params, const char* name) {
  auto it = params.find(name);
  return it == params.end() ? nullptr : &it->second;
}

int64_t integer_param(const std::multimap<std::string, std::string>& params, const char* name, int64_t fallback,
                      int64_t lo, int64_t hi) {
  const std::string* s = param(params, name);
  if (!s) return fallback;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(*s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size() || v < lo || v > hi)
    throw FormatError(error_message("world", "{}='{}' is not an integer in [{}, {}]", name, *s, lo, hi));
  return v;
}

double number(const std::string& s, const char* what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v))
    throw FormatError(error_message("world", "{} '{}' is not a number", what, s));
  return v;
}

double round1(double v) { return std::round(v * 10) / 10; }

// A grid cell's key: its column and row, each offset into 32 bits.
uint64_t cell_key(int64_t cx, int64_t cy) {
  return (static_cast<uint64_t>(cx + (int64_t{1} << 31)) << 32) | static_cast<uint64_t>(cy + (int64_t{1} << 31));
}

int64_t grid_coord(double v, int level) { return static_cast<int64_t>(std::floor(std::ldexp(v + kGridShift, -level))); }

int64_t fixed(double v) { return std::llround(v * 1024); }

// FNV-1a, then a finalizer (splitmix64): the same on every platform, unlike std::hash.
uint64_t stable_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

// -1, 0 or 1 as x's key for the sort is below, equal to or above y's; ties are left to the id.
int compare_key(MachineQuery::Sort sort, const Machine& x, const Machine& y) {
  auto cmp = [](const auto& u, const auto& v) { return u < v ? -1 : v < u ? 1 : 0; };
  switch (sort) {
    case MachineQuery::Sort::Memory: return cmp(x.memory_bytes, y.memory_bytes);
    case MachineQuery::Sort::Chip: return cmp(x.chip, y.chip);
    case MachineQuery::Sort::Region: return cmp(x.region, y.region);
    case MachineQuery::Sort::Seat: return cmp(x.seat, y.seat);
    case MachineQuery::Sort::Pod: return cmp(x.pod, y.pod);
    case MachineQuery::Sort::Jobs: return cmp(x.jobs_served, y.jobs_served);
    case MachineQuery::Sort::TokS: return cmp(x.tok_s, y.tok_s);
    // Longest up first when descending: the earliest online_since (offline machines last).
    case MachineQuery::Sort::Uptime:
      return cmp(x.online ? -x.online_since : INT64_MIN, y.online ? -y.online_since : INT64_MIN);
    case MachineQuery::Sort::Id: return cmp(x.id, y.id);
  }
  return 0;
}

}  // namespace

ChipClass chip_class(std::string_view chip) {
  std::string s(chip);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (has_word(s, "ultra")) return ChipClass::Ultra;
  if (has_word(s, "max")) return ChipClass::Max;
  if (has_word(s, "pro")) return ChipClass::Pro;
  return ChipClass::Base;
}

const char* chip_class_name(ChipClass c) {
  static const char* const kNames[] = {"base", "pro", "max", "ultra"};
  return kNames[static_cast<int>(c)];
}

int64_t spiral_ring(int64_t i) {
  if (i <= 0) return 0;
  // Ring k (k >= 1) starts at slot 1 + 3k(k - 1).
  auto k = static_cast<int64_t>((1 + std::sqrt(1 + 4.0 * static_cast<double>(i - 1) / 3)) / 2);
  while (1 + 3 * k * (k - 1) > i) --k;
  while (1 + 3 * (k + 1) * k <= i) ++k;
  return k;
}

std::pair<double, double> spiral_slot(int64_t i) {
  if (i <= 0) return {0, 0};
  const int64_t k = spiral_ring(i);
  const int64_t j = i - (1 + 3 * k * (k - 1));  // place on the ring, [0, 6k)
  const int64_t side = j / k, step = j % k;
  constexpr double kSixth = 3.14159265358979323846 / 3;
  const double ax = std::cos(kSixth * static_cast<double>(side)), ay = std::sin(kSixth * static_cast<double>(side));
  const double bx = std::cos(kSixth * static_cast<double>(side + 1)), by = std::sin(kSixth * static_cast<double>(side + 1));
  const double f = static_cast<double>(step) / static_cast<double>(k), r = static_cast<double>(k);
  return {r * (ax + (bx - ax) * f), r * (ay + (by - ay) * f)};
}

MachineQuery MachineQuery::parse(const std::multimap<std::string, std::string>& params) {
  MachineQuery q;
  if (auto s = param(params, "chip"); s && !s->empty()) q.chip = *s;
  if (auto s = param(params, "class"); s && !s->empty()) {
    bool found = false;
    for (int c = 0; c < kChipClasses; ++c)
      if (*s == chip_class_name(static_cast<ChipClass>(c))) q.chip_class = static_cast<ChipClass>(c), found = true;
    if (!found) throw FormatError(error_message("world", "class='{}' is not one of base, pro, max, ultra", *s));
  }
  q.min_memory = integer_param(params, "min_memory", 0, 0, INT64_MAX);
  if (auto s = param(params, "region")) q.region = *s;  // present and empty: not shared
  if (auto s = param(params, "seat"); s && !s->empty()) q.seat = *s;
  if (auto s = param(params, "pod"); s && !s->empty()) q.pod = *s;
  if (auto s = param(params, "online")) {
    if (*s == "true" || *s == "1") q.online = Online::Yes;
    else if (*s == "false" || *s == "0") q.online = Online::No;
    else if (*s == "any" || s->empty()) q.online = Online::Any;
    else throw FormatError(error_message("world", "online='{}' is not true, false or any", *s));
  }
  if (auto s = param(params, "sort")) {
    static const std::pair<const char*, Sort> kSorts[] = {
        {"memory", Sort::Memory}, {"chip", Sort::Chip}, {"region", Sort::Region}, {"seat", Sort::Seat},
        {"pod", Sort::Pod},       {"jobs", Sort::Jobs}, {"tok_s", Sort::TokS},    {"uptime", Sort::Uptime},
        {"id", Sort::Id}};
    bool found = false;
    for (const auto& [name, sort] : kSorts)
      if (*s == name) q.sort = sort, found = true;
    if (!found)
      throw FormatError(error_message(
          "world", "sort='{}' is not one of memory, chip, region, seat, pod, jobs, tok_s, uptime, id", *s));
    // Numbers read best largest first, names in alphabetical order.
    q.descending = q.sort == Sort::Memory || q.sort == Sort::Jobs || q.sort == Sort::TokS || q.sort == Sort::Uptime;
  }
  if (auto s = param(params, "order")) {
    if (*s == "asc") q.descending = false;
    else if (*s == "desc") q.descending = true;
    else throw FormatError(error_message("world", "order='{}' is not asc or desc", *s));
  }
  q.offset = integer_param(params, "offset", 0, 0, INT64_MAX);
  q.limit = integer_param(params, "limit", 50, 1, kMaxLimit);
  return q;
}

MapQuery MapQuery::parse(const std::multimap<std::string, std::string>& params) {
  MapQuery q;
  auto [first, last] = params.equal_range("v");
  for (auto it = first; it != last; ++it) {
    const std::string& v = it->second;
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
      size_t bar = v.find('|', at);
      parts.push_back(v.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
      if (bar == std::string::npos) break;
      at = bar + 1;
    }
    if (parts.size() != 5)
      throw FormatError(error_message("world", "v='{}' is not REGION|x0|y0|x1|y1", v));
    View view{parts[0], number(parts[1], "x0"), number(parts[2], "y0"), number(parts[3], "x1"), number(parts[4], "y1")};
    if (view.x1 < view.x0 || view.y1 < view.y0)
      throw FormatError(error_message("world", "v='{}': x1 and y1 must not be below x0 and y0", v));
    q.views.push_back(std::move(view));
    if (q.views.size() > kMaxViews) throw FormatError(error_message("world", "more than {} views in one request", kMaxViews));
  }
  if (auto s = param(params, "cell")) {
    q.cell = number(*s, "cell");
    if (!(q.cell >= 0.5 && q.cell <= 1e6)) throw FormatError(error_message("world", "cell={} is not in [0.5, 1e6]", *s));
  }
  q.budget = integer_param(params, "budget", kMaxBudget, 1, kMaxBudget);
  q.clusters = integer_param(params, "clusters", 0, 0, 1) == 1;
  return q;
}

Population::Population() {
  sorted_.reserve(kSorts);
  for (int s = 0; s < kSorts; ++s) sorted_.emplace_back(SortOrder{this, static_cast<MachineQuery::Sort>(s)});
}

bool Population::SortOrder::operator()(uint32_t a, uint32_t b) const {
  const Row &x = p->rows_[a], &y = p->rows_[b];
  const int c = compare_key(sort, x.m, y.m);
  if (c != 0) return c < 0;
  return x.id_head != y.id_head ? x.id_head < y.id_head : x.m.id < y.m.id;
}
bool Population::SortOrder::operator()(KeyOf a, uint32_t b) const {
  return compare_key(sort, p->rows_[a.row].m, p->rows_[b].m) < 0;
}
bool Population::SortOrder::operator()(uint32_t a, KeyOf b) const {
  return compare_key(sort, p->rows_[a].m, p->rows_[b.row].m) < 0;
}

void Population::put(Machine m) {
  std::lock_guard lock(pending_mu_);
  pending_.push_back({Op::Put, std::move(m)});
}

void Population::describe(Machine m) {
  std::lock_guard lock(pending_mu_);
  pending_.push_back({Op::Describe, std::move(m)});
}

void Population::job_served(const std::string& id, double tok_s) {
  Machine m;
  m.id = id;
  m.tok_s = tok_s;
  std::lock_guard lock(pending_mu_);
  pending_.push_back({Op::Served, std::move(m)});
}

void Population::remove(const std::string& id) {
  Machine m;
  m.id = id;
  std::lock_guard lock(pending_mu_);
  pending_.push_back({Op::Remove, std::move(m)});
}

void Population::add_locked(const Row& r, int sign) {
  const Machine& m = r.m;
  Region& g = regions_[m.region];
  g.machines += sign;
  g.jobs += sign * m.jobs_served;
  jobs_ += sign * m.jobs_served;
  chips_[m.chip] += sign;
  if (chips_[m.chip] == 0) chips_.erase(m.chip);
  if (!m.online) return;
  g.online += sign;
  g.memory += sign * m.memory_bytes;
  g.classes[static_cast<int>(r.cls)] += sign;
  if ((g.seats[m.seat] += sign) == 0) g.seats.erase(m.seat);
  online_ += sign;
  memory_ += sign * m.memory_bytes;
  if (!m.pod.empty()) {
    if ((g.pods[m.pod] += sign) == 0) g.pods.erase(m.pod);
    if ((pods_[m.pod] += sign) == 0) pods_.erase(m.pod);
  }
}

void Population::kinds_locked(uint32_t at, int sign) {
  Row& r = rows_[at];
  KindKey key{r.m.chip, r.m.memory_bytes, r.m.seat, r.m.online};
  for (bool in_region : {false, true}) {
    Kinds& kinds = in_region ? regions_[r.m.region].kinds : kinds_;
    uint32_t Row::*place = in_region ? &Row::at_region_kind : &Row::at_kind;
    if (sign > 0) {
      auto& list = kinds[key];
      r.*place = static_cast<uint32_t>(list.size());
      list.push_back(at);
      continue;
    }
    auto it = kinds.find(key);
    auto& list = it->second;
    const uint32_t last = list.back();
    list[r.*place] = last;
    rows_[last].*place = r.*place;
    list.pop_back();
    if (list.empty()) kinds.erase(it);
  }
}

void Population::grid_locked(Region& g, const Row& r, int sign) {
  auto [x, y] = spiral_slot(r.slot);
  const int64_t fx = fixed(x), fy = fixed(y);
  for (int level = 0; level < kLevels; ++level) {
    auto& cells = g.grid[static_cast<size_t>(level)];
    const uint64_t key = cell_key(grid_coord(x, level), grid_coord(y, level));
    Cell& c = cells[key];
    c.count += sign;
    c.memory += sign * r.m.memory_bytes;
    c.sx += sign * fx;
    c.sy += sign * fy;
    c.classes[static_cast<int>(r.cls)] += sign;
    if (!r.m.pod.empty() && (c.pods[r.m.pod] += sign) == 0) c.pods.erase(r.m.pod);
    if (level == 0) {
      if (sign > 0) c.slots.push_back(r.slot);
      else c.slots.erase(std::find(c.slots.begin(), c.slots.end(), r.slot));
    }
    if (c.count == 0) cells.erase(key);
  }
}

void Population::place_locked(Region& g, uint32_t at) {
  Row& r = rows_[at];
  // A disc half as big again as the region's machines need: room for newcomers to land on a
  // free slot near where their hash points, so that nobody else has to move.
  const int64_t want = (g.machines + 1) * 3 / 2 + 1;
  const int64_t ring = spiral_ring(want - 1);
  const int64_t area = 1 + 3 * ring * (ring + 1);
  const std::string key = r.m.pod.empty() ? "id:" + r.m.id : "pod:" + r.m.pod;
  const auto wanted = static_cast<int64_t>(stable_hash(key) % static_cast<uint64_t>(area));
  // The first free slot from there on (a pod's members one after another).
  auto it = g.free_slots.lower_bound(wanted);
  const int64_t slot =
      it != g.free_slots.end() ? *it : std::max(wanted, static_cast<int64_t>(g.slot_rows.size()));
  take_slot_locked(g, slot, at);
  r.slot = slot;
}

void Population::take_slot_locked(Region& g, int64_t slot, uint32_t at) {
  const auto size = static_cast<int64_t>(g.slot_rows.size());
  if (slot < size) {
    g.free_slots.erase(slot);
  } else {
    for (int64_t s = size; s < slot; ++s) g.free_slots.insert(g.free_slots.end(), s);
    g.slot_rows.resize(static_cast<size_t>(slot) + 1, kNone);
  }
  g.slot_rows[static_cast<size_t>(slot)] = at;
}

void Population::unplace_locked(Region& g, const Row& r) {
  g.slot_rows[static_cast<size_t>(r.slot)] = kNone;
  g.free_slots.insert(r.slot);
  while (!g.slot_rows.empty() && g.slot_rows.back() == kNone) {
    g.free_slots.erase(static_cast<int64_t>(g.slot_rows.size()) - 1);
    g.slot_rows.pop_back();
  }
}

void Population::link_locked(uint32_t at, int sign, bool orders) {
  Row& r = rows_[at];
  Region& g = regions_[r.m.region];
  if (sign > 0) {
    if (r.slot < 0) place_locked(g, at);
    add_locked(r, +1);
    if (orders)
      for (auto& order : sorted_) order.insert(at);
    kinds_locked(at, +1);
    if (!r.m.pod.empty()) pod_rows_[r.m.pod].push_back(at);
    if (r.m.online) grid_locked(g, r, +1);
    return;
  }
  if (r.m.online) grid_locked(g, r, -1);
  if (!r.m.pod.empty()) {
    auto it = pod_rows_.find(r.m.pod);
    auto& members = it->second;
    members.erase(std::find(members.begin(), members.end(), at));
    if (members.empty()) pod_rows_.erase(it);
  }
  kinds_locked(at, -1);
  if (orders)
    for (auto& order : sorted_) order.erase(at);
  add_locked(r, -1);
  unplace_locked(g, r);
}

void Population::update_locked(uint32_t at, Machine next) {
  Row& row = rows_[at];
  // Only the orders whose key changed are touched (a machine going offline moves in the uptime
  // order alone).
  std::array<bool, kSorts> resort{};
  for (int s = 0; s < kSorts; ++s) {
    resort[static_cast<size_t>(s)] = compare_key(static_cast<MachineQuery::Sort>(s), row.m, next) != 0;
    if (resort[static_cast<size_t>(s)]) sorted_[static_cast<size_t>(s)].erase(at);
  }
  const Machine& was = row.m;
  if (was.region != next.region || was.pod != next.pod || was.chip != next.chip || was.memory_bytes != next.memory_bytes ||
      was.seat != next.seat || was.online != next.online) {
    // A new region, pod, kind or share of the map's grid: out of those indexes and back in, on
    // the slot it had while it stays in its region.
    const int64_t slot = was.region == next.region ? row.slot : -1;
    link_locked(at, -1, false);
    row.m = std::move(next);
    row.cls = chip_class(row.m.chip);
    row.slot = slot;
    if (slot >= 0) take_slot_locked(regions_[row.m.region], slot, at);
    link_locked(at, +1, false);
  } else {
    add_locked(row, -1);
    row.m = std::move(next);
    add_locked(row, +1);
  }
  for (int s = 0; s < kSorts; ++s)
    if (resort[static_cast<size_t>(s)]) sorted_[static_cast<size_t>(s)].insert(at);
}

void Population::touched_locked(const Machine& m) {
  changes_.any = true;
  changed_regions_.insert(m.region);
  const uint64_t commit = version_ + 1;  // the one being applied
  if (auto it = changed_ids_.find(m.id); it != changed_ids_.end()) {
    it->second.last = commit;
  } else if (changed_ids_.size() < Changes::kMaxIds) {
    changed_ids_.emplace(m.id, Touched{record_locked(m.id), commit, commit});  // before the change
    ++changes_.machines_changed;
  } else {
    ++changes_.machines_changed;  // past the list's cap: counted (a repeat may count twice)
  }
}

void Population::apply_locked(Pending& p) {
  Changes& c = changes_;
  // A speed that is no number would break the tok_s order.
  if (!std::isfinite(p.m.tok_s)) p.m.tok_s = 0;
  auto it = index_.find(p.m.id);
  if (p.op == Op::Remove || p.op == Op::Served) {
    if (it == index_.end()) return;  // never put: nothing to count it on
    const uint32_t at = it->second;
    touched_locked(rows_[at].m);
    if (p.op == Op::Served) {
      ++served_events_;
      Machine next = rows_[at].m;
      next.jobs_served += 1;
      next.tok_s = p.m.tok_s;
      update_locked(at, std::move(next));
      return;
    }
    link_locked(at, -1);
    index_.erase(it);
    rows_[at] = Row{};
    free_rows_.push_back(at);
    c.chips = true;
    return;
  }
  Machine next = std::move(p.m);
  if (!next.online) next.online_since = 0;
  touched_locked(next);
  if (it == index_.end()) {
    uint32_t at = 0;
    if (!free_rows_.empty()) {
      at = free_rows_.back();
      free_rows_.pop_back();
    } else {
      at = static_cast<uint32_t>(rows_.size());
      rows_.emplace_back();
    }
    rows_[at].m = std::move(next);
    rows_[at].cls = chip_class(rows_[at].m.chip);
    // Zero-padded, so that the order of heads agrees with the ids' where they differ.
    uint64_t head = 0;
    for (size_t k = 0; k < 8; ++k)
      head = head << 8 | (k < rows_[at].m.id.size() ? static_cast<unsigned char>(rows_[at].m.id[k]) : 0u);
    rows_[at].id_head = head;
    index_.emplace(rows_[at].m.id, at);
    link_locked(at, +1);
    c.chips = true;
    return;
  }
  const Machine& was = rows_[it->second].m;
  if (p.op == Op::Describe) {
    next.jobs_served = was.jobs_served;
    next.tok_s = was.tok_s;
  }
  if (was.region != next.region) changed_regions_.insert(was.region);
  c.chips = c.chips || was.chip != next.chip;
  update_locked(it->second, std::move(next));
}

bool Population::commit() {
  std::vector<Pending> batch;
  {
    std::lock_guard lock(pending_mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return false;
  std::unique_lock lock(mu_);
  for (Pending& p : batch) apply_locked(p);
  // Regions left with nobody go: the summary lists the places machines are.
  for (auto it = regions_.begin(); it != regions_.end();)
    it = it->second.machines == 0 ? regions_.erase(it) : std::next(it);
  ++version_;
  return true;
}

Changes Population::take_changes() {
  std::unique_lock lock(mu_);
  Changes c = std::exchange(changes_, {});
  c.regions.assign(changed_regions_.begin(), changed_regions_.end());
  std::sort(c.regions.begin(), c.regions.end());
  for (const auto& [id, was] : changed_ids_) c.machines.push_back(id);
  std::sort(c.machines.begin(), c.machines.end());
  for (const std::string& id : c.machines) {
    const Touched& t = changed_ids_[id];
    c.records.push_back({id, t.was, record_locked(id), t.first, t.last});
  }
  changed_regions_.clear();
  changed_ids_.clear();
  c.through = version_;
  return c;
}

json Population::record_locked(const std::string& id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  const Row& r = rows_[it->second];
  auto [x, y] = spiral_slot(r.slot);
  return {r.m.chip, r.m.memory_bytes, r.m.region, r.m.seat,         r.m.pod,   r.m.online,
          r.m.jobs_served, r.m.tok_s, r.m.online_since, round1(x), round1(y)};
}

uint64_t Population::version() const {
  std::shared_lock lock(mu_);
  return version_;
}

int64_t Population::served_events() const {
  std::shared_lock lock(mu_);
  return served_events_;
}

size_t Population::size() const {
  std::shared_lock lock(mu_);
  return index_.size();
}

json Population::machine_json(const Machine& m) {
  json j = {{"id", m.id},       {"chip", m.chip},   {"memory_bytes", m.memory_bytes}, {"region", m.region},
            {"seat", m.seat},   {"pod", m.pod},     {"online", m.online},             {"jobs_served", m.jobs_served},
            {"tok_s", m.tok_s}};
  // A time rather than an age, so the document only changes when something happens.
  if (m.online) j["online_since"] = m.online_since;
  return j;
}

json Population::machine(const std::string& id) const {
  std::shared_lock lock(mu_);
  auto it = index_.find(id);
  return it == index_.end() ? json(nullptr) : machine_json(rows_[it->second].m);
}

int64_t Population::slot(const std::string& id) const {
  std::shared_lock lock(mu_);
  auto it = index_.find(id);
  return it == index_.end() ? -1 : rows_[it->second].slot;
}

json Population::region_json(const std::string& name) const {
  std::shared_lock lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end())
    return {{"name", name}, {"machines", 0}, {"online", 0}, {"memory_bytes", 0}, {"classes", {0, 0, 0, 0}},
            {"pods", 0}, {"seats", json::object()}, {"jobs_served", 0}, {"slots", 0}};
  return it->second.to_json(name);
}

json Population::Region::to_json(const std::string& name) const {
  return {{"name", name},   {"machines", machines}, {"online", online},   {"memory_bytes", memory}, {"classes", classes},
          {"pods", pods.size()}, {"seats", seats},  {"jobs_served", jobs}, {"slots", slot_rows.size()}};
}

json Population::summary() const {
  std::shared_lock lock(mu_);
  json regions = json::array();
  for (const auto& [name, g] : regions_) regions.push_back(g.to_json(name));
  // The filter's choices: the most common chips (nodes may send any name; the list stays short).
  constexpr size_t kMaxChips = 64;
  std::vector<std::pair<std::string, int64_t>> chips(chips_.begin(), chips_.end());
  std::sort(chips.begin(), chips.end(), [](auto& a, auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  if (chips.size() > kMaxChips) chips.resize(kMaxChips);
  json chip_list = json::array();
  for (const auto& [chip, n] : chips) chip_list.push_back({{"chip", chip}, {"class", chip_class_name(chip_class(chip))}, {"machines", n}});
  std::map<std::string, int64_t> seats;
  for (const auto& [name, g] : regions_)
    for (const auto& [seat, n] : g.seats) seats[seat] += n;
  return {{"version", version_},
          {"totals",
           {{"nodes", index_.size()}, {"online", online_}, {"memory_bytes", memory_}, {"jobs_served", jobs_},
            {"pods", pods_.size()}}},
          {"regions", std::move(regions)},
          {"chips", std::move(chip_list)},
          {"seats", seats}};
}

json Population::machines(const MachineQuery& q) const {
  std::shared_lock lock(mu_);
  auto online_ok = [&q](bool online) {
    return q.online == MachineQuery::Online::Any || (q.online == MachineQuery::Online::Yes) == online;
  };
  auto kind_ok = [&](const KindKey& k) {
    return online_ok(k.online) && (!q.chip || k.chip == *q.chip) && (!q.chip_class || chip_class(k.chip) == *q.chip_class) &&
           k.memory >= q.min_memory && (!q.seat || k.seat == *q.seat);
  };
  auto row_ok = [&](const Row& r) {
    const Machine& m = r.m;
    return online_ok(m.online) && (!q.chip || m.chip == *q.chip) && (!q.chip_class || r.cls == *q.chip_class) &&
           m.memory_bytes >= q.min_memory && (!q.seat || m.seat == *q.seat) && (!q.region || m.region == *q.region) &&
           (!q.pod || m.pod == *q.pod);
  };
  // The rows that may match, and how many do: a pod's members, or the kinds that match (the
  // region's when one is asked for), whose sizes add up to `matched`.
  std::vector<const std::vector<uint32_t>*> lists;
  int64_t matched = 0;
  bool exact = true;  // every row of `lists` matches
  if (q.pod) {
    auto it = pod_rows_.find(*q.pod);
    if (it != pod_rows_.end()) {
      lists.push_back(&it->second);
      for (uint32_t at : it->second) matched += row_ok(rows_[at]);
    }
    exact = false;
  } else {
    const Kinds* kinds = &kinds_;
    if (q.region) {
      auto it = regions_.find(*q.region);
      kinds = it == regions_.end() ? nullptr : &it->second.kinds;
    }
    if (kinds)
      for (const auto& [key, rows] : *kinds)
        if (kind_ok(key)) {
          lists.push_back(&rows);
          matched += static_cast<int64_t>(rows.size());
        }
  }
  const int64_t from = std::min(q.offset, matched), to = std::min(matched, q.offset + q.limit);
  std::vector<uint32_t> page;
  // Gathering costs the matches (and a partial sort); walking an order costs the rows passed on
  // the way to `to` matches, about to * all / matched, each a step through a tree and a filter:
  // counted as four.
  const auto all = static_cast<double>(index_.size());
  if (to > 0 && static_cast<double>(matched) <= 4 * static_cast<double>(to) * all / static_cast<double>(matched)) {
    std::vector<uint32_t> hits;
    hits.reserve(static_cast<size_t>(matched));
    for (const auto* list : lists)
      for (uint32_t at : *list)
        if (exact || row_ok(rows_[at])) hits.push_back(at);
    // Ties go by id, so pages never overlap or skip.
    auto before = [&](uint32_t a, uint32_t b) {
      const int c = compare_key(q.sort, rows_[a].m, rows_[b].m);
      if (c != 0) return q.descending ? c > 0 : c < 0;
      return rows_[a].m.id < rows_[b].m.id;
    };
    std::partial_sort(hits.begin(), hits.begin() + to, hits.end(), before);
    page.assign(hits.begin() + from, hits.begin() + to);
  } else if (to > 0) {
    int64_t seen = 0;
    auto visit = [&](uint32_t at) {
      if (!row_ok(rows_[at])) return;
      if (seen++ >= from) page.push_back(at);
    };
    const auto& rows = sorted_[static_cast<size_t>(q.sort)];
    if (!q.descending) {
      for (auto it = rows.begin(); it != rows.end() && seen < to; ++it) visit(*it);
    } else {
      // Downwards by key, each run of equal keys still upwards by id.
      for (auto hi = rows.end(); hi != rows.begin() && seen < to;) {
        auto lo = rows.lower_bound(KeyOf{*std::prev(hi)});
        for (auto it = lo; it != hi && seen < to; ++it) visit(*it);
        hi = lo;
      }
    }
  }
  json out_rows = json::array();
  for (uint32_t at : page) out_rows.push_back(machine_json(rows_[at].m));
  static const char* const kSortNames[] = {"memory", "chip", "region", "seat", "pod", "jobs", "tok_s", "uptime", "id"};
  return {{"total", index_.size()},
          {"matched", matched},
          {"offset", q.offset},
          {"limit", q.limit},
          {"sort", kSortNames[static_cast<int>(q.sort)]},
          {"order", q.descending ? "desc" : "asc"},
          {"at", version_},
          {"machines", std::move(out_rows)}};
}

struct Population::Agg {
  int64_t count = 0, memory = 0, sx = 0, sy = 0;
  std::array<int64_t, kChipClasses> classes{};
  std::unordered_set<std::string_view> pods;
  void add(const Cell& c) {
    count += c.count;
    memory += c.memory;
    sx += c.sx;
    sy += c.sy;
    for (int k = 0; k < kChipClasses; ++k) classes[static_cast<size_t>(k)] += c.classes[static_cast<size_t>(k)];
    for (const auto& [pod, n] : c.pods) pods.insert(pod);
  }
};

int64_t Population::gather_locked(const Region& g, int level, int64_t cx, int64_t cy, const MapQuery::View& v, Agg* agg,
                                  std::vector<int64_t>* slots) const {
  const auto& cells = g.grid[static_cast<size_t>(level)];
  auto it = cells.find(cell_key(cx, cy));
  if (it == cells.end()) return 0;
  const Cell& c = it->second;
  // The cell spans [cx, cx + 1) * size on each axis.
  const double size = std::ldexp(1.0, level);
  const double x0 = static_cast<double>(cx) * size - kGridShift, y0 = static_cast<double>(cy) * size - kGridShift;
  if (x0 > v.x1 || x0 + size <= v.x0 || y0 > v.y1 || y0 + size <= v.y0) return 0;
  const bool inside = x0 >= v.x0 && x0 + size <= v.x1 && y0 >= v.y0 && y0 + size <= v.y1;
  if (inside && !slots) {
    if (agg) agg->add(c);
    return c.count;
  }
  if (level == 0) {
    int64_t n = 0;
    for (int64_t s : c.slots) {
      auto [x, y] = spiral_slot(s);
      if (x < v.x0 || x > v.x1 || y < v.y0 || y > v.y1) continue;
      ++n;
      if (slots) slots->push_back(s);
      if (agg) {
        const Row& r = rows_[g.slot_rows[static_cast<size_t>(s)]];
        agg->count++;
        agg->memory += r.m.memory_bytes;
        agg->sx += fixed(x);
        agg->sy += fixed(y);
        agg->classes[static_cast<size_t>(r.cls)]++;
        if (!r.m.pod.empty()) agg->pods.insert(r.m.pod);
      }
    }
    return n;
  }
  int64_t n = 0;
  for (int64_t dx = 0; dx < 2; ++dx)
    for (int64_t dy = 0; dy < 2; ++dy) n += gather_locked(g, level - 1, 2 * cx + dx, 2 * cy + dy, v, agg, slots);
  return n;
}

json Population::marks(const MapQuery& q) const {
  std::shared_lock lock(mu_);
  constexpr int kTop = kLevels - 1;
  // Every cell of the top level that meets a view (a region's spiral stays within a few).
  struct Part {
    size_t view;
    const Region* g;
    int64_t cx, cy;
  };
  std::vector<Part> tops;
  for (size_t v = 0; v < q.views.size(); ++v) {
    const MapQuery::View& view = q.views[v];
    auto it = regions_.find(view.region);
    if (it == regions_.end()) continue;
    const double reach = static_cast<double>(spiral_ring(static_cast<int64_t>(it->second.slot_rows.size())) + 1);
    const double x0 = std::max(view.x0, -reach), x1 = std::min(view.x1, reach);
    const double y0 = std::max(view.y0, -reach), y1 = std::min(view.y1, reach);
    if (x0 > x1 || y0 > y1) continue;
    for (int64_t cx = grid_coord(x0, kTop); cx <= grid_coord(x1, kTop); ++cx)
      for (int64_t cy = grid_coord(y0, kTop); cy <= grid_coord(y1, kTop); ++cy) tops.push_back({v, &it->second, cx, cy});
  }
  int64_t in_view = 0;
  for (const Part& t : tops) in_view += gather_locked(*t.g, kTop, t.cx, t.cy, q.views[t.view], nullptr, nullptr);
  json regions = json::array();
  if (in_view <= q.budget && !q.clusters) {
    std::vector<std::vector<int64_t>> per(q.views.size());
    for (const Part& t : tops) gather_locked(*t.g, kTop, t.cx, t.cy, q.views[t.view], nullptr, &per[t.view]);
    for (size_t v = 0; v < q.views.size(); ++v) {
      if (per[v].empty()) continue;
      std::sort(per[v].begin(), per[v].end());
      const Region& g = regions_.find(q.views[v].region)->second;
      json list = json::array();
      for (int64_t s : per[v]) {
        const Machine& m = rows_[g.slot_rows[static_cast<size_t>(s)]].m;
        auto [x, y] = spiral_slot(s);
        list.push_back({round1(x), round1(y), m.id, m.chip, m.memory_bytes, m.seat, m.pod, m.jobs_served, round1(m.tok_s),
                        m.online_since});
      }
      regions.push_back({{"region", q.views[v].region}, {"machines", std::move(list)}});
    }
    return {{"mode", "machines"}, {"cell", q.cell},  {"in_view", in_view},
            {"marks", in_view},   {"at", version_}, {"regions", std::move(regions)}};
  }
  // Too many to draw one by one: one mark per occupied grid cell of the view, at the finest level
  // from the cell asked for whose marks fit the budget (or the top).
  struct Mark {
    int64_t cx, cy;
    Agg agg;
  };
  int level = std::clamp(static_cast<int>(std::ceil(std::log2(q.cell))), 0, kTop);
  std::vector<std::vector<Mark>> per;
  for (;; ++level) {
    per.assign(q.views.size(), {});
    int64_t marks = 0;
    // The cells of `level` under a top cell that hold someone in view; stops past the budget.
    auto descend = [&](auto&& self, const Part& t, int at, int64_t cx, int64_t cy) -> void {
      if (marks > q.budget && level < kTop) return;
      if (!t.g->grid[static_cast<size_t>(at)].count(cell_key(cx, cy))) return;
      if (at == level) {
        Mark mark{cx, cy, {}};
        if (gather_locked(*t.g, at, cx, cy, q.views[t.view], &mark.agg, nullptr) > 0) {
          per[t.view].push_back(std::move(mark));
          ++marks;
        }
        return;
      }
      for (int64_t dx = 0; dx < 2; ++dx)
        for (int64_t dy = 0; dy < 2; ++dy) {
          const double size = std::ldexp(1.0, at - 1);
          const double x0 = static_cast<double>(2 * cx + dx) * size - kGridShift;
          const double y0 = static_cast<double>(2 * cy + dy) * size - kGridShift;
          const MapQuery::View& v = q.views[t.view];
          if (x0 > v.x1 || x0 + size <= v.x0 || y0 > v.y1 || y0 + size <= v.y0) continue;
          self(self, t, at - 1, 2 * cx + dx, 2 * cy + dy);
        }
    };
    for (const Part& t : tops) descend(descend, t, kTop, t.cx, t.cy);
    if (marks <= q.budget || level == kTop) {
      for (size_t v = 0; v < q.views.size(); ++v) {
        if (per[v].empty()) continue;
        std::sort(per[v].begin(), per[v].end(), [](const Mark& a, const Mark& b) { return std::tie(a.cx, a.cy) < std::tie(b.cx, b.cy); });
        json list = json::array();
        for (const Mark& m : per[v]) {
          const double n = static_cast<double>(m.agg.count) * 1024;
          list.push_back({round1(static_cast<double>(m.agg.sx) / n), round1(static_cast<double>(m.agg.sy) / n), m.agg.count,
                          m.agg.classes, m.agg.memory, m.agg.pods.size()});
        }
        regions.push_back({{"region", q.views[v].region}, {"clusters", std::move(list)}});
      }
      return {{"mode", "clusters"}, {"cell", std::ldexp(1.0, level)}, {"in_view", in_view}, {"marks", marks},
              {"at", version_},     {"regions", std::move(regions)}};
    }
  }
}

}  // namespace orchard::network::world
