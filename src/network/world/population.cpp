#include "network/world/population.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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

Population::Population() = default;

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

void Population::touched_locked(const Machine& m) {
  changes_.any = true;
  changed_regions_.insert(m.region);
  if (changed_ids_.size() < Changes::kMaxIds) {
    if (changed_ids_.insert(m.id).second) ++changes_.machines_changed;
  } else if (!changed_ids_.count(m.id)) {
    ++changes_.machines_changed;  // past the list's cap: counted (a repeat may count twice)
  }
}

void Population::apply_locked(Pending& p) {
  Changes& c = changes_;
  auto it = index_.find(p.m.id);
  if (p.op == Op::Remove || p.op == Op::Served) {
    if (it == index_.end()) return;  // never put: nothing to count it on
    Row& row = rows_[it->second];
    touched_locked(row.m);
    add_locked(row, -1);
    if (p.op == Op::Served) {
      ++served_events_;
      row.m.jobs_served += 1;
      row.m.tok_s = p.m.tok_s;
      add_locked(row, +1);
      return;
    }
    regions_[row.m.region].dirty = true;
    const uint32_t at = it->second;
    index_.erase(it);
    if (at + 1 != rows_.size()) {
      rows_[at] = std::move(rows_.back());
      index_[rows_[at].m.id] = at;
      regions_[rows_[at].m.region].dirty = true;  // its row number changed
    }
    rows_.pop_back();
    c.chips = true;
    return;
  }
  Row next{std::move(p.m), ChipClass::Base};
  next.cls = chip_class(next.m.chip);
  if (!next.m.online) next.m.online_since = 0;
  touched_locked(next.m);
  if (it == index_.end()) {
    index_.emplace(next.m.id, static_cast<uint32_t>(rows_.size()));
    regions_[next.m.region].dirty = true;
    add_locked(next, +1);
    rows_.push_back(std::move(next));
    c.chips = true;
    return;
  }
  Row& row = rows_[it->second];
  if (p.op == Op::Describe) {
    next.m.jobs_served = row.m.jobs_served;
    next.m.tok_s = row.m.tok_s;
  }
  const Machine& was = row.m;
  if (was.region != next.m.region || was.chip != next.m.chip || was.memory_bytes != next.m.memory_bytes ||
      was.pod != next.m.pod) {
    regions_[was.region].dirty = true;
    regions_[next.m.region].dirty = true;
    changed_regions_.insert(was.region);
    c.chips = c.chips || was.chip != next.m.chip;
  }
  add_locked(row, -1);
  row = std::move(next);
  add_locked(row, +1);
}

void Population::layout_dirty_regions_locked() {
  std::vector<Region*> dirty;
  for (auto& [name, g] : regions_)
    if (g.dirty) {
      g.layout.clear();
      dirty.push_back(&g);
    }
  if (dirty.empty()) return;
  for (uint32_t i = 0; i < rows_.size(); ++i) {
    Region& g = regions_[rows_[i].m.region];
    if (g.dirty) g.layout.push_back(i);
  }
  // Biggest classes and machines at the centre; a pod's members (identical machines) side by side.
  auto before = [this](uint32_t a, uint32_t b) {
    const Row &x = rows_[a], &y = rows_[b];
    if (x.cls != y.cls) return x.cls > y.cls;
    if (x.m.memory_bytes != y.m.memory_bytes) return x.m.memory_bytes > y.m.memory_bytes;
    if (x.m.pod != y.m.pod) return x.m.pod > y.m.pod;  // pods before the machines in none ("")
    return x.m.id < y.m.id;
  };
  for (Region* g : dirty) {
    std::sort(g->layout.begin(), g->layout.end(), before);
    g->dirty = false;
  }
  // Regions left with nobody go: the summary lists the places machines are.
  for (auto it = regions_.begin(); it != regions_.end();)
    it = it->second.machines == 0 && it->second.layout.empty() ? regions_.erase(it) : std::next(it);
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
  layout_dirty_regions_locked();
  ++version_;
  return true;
}

Changes Population::take_changes() {
  std::unique_lock lock(mu_);
  Changes c = std::exchange(changes_, {});
  c.regions.assign(changed_regions_.begin(), changed_regions_.end());
  std::sort(c.regions.begin(), c.regions.end());
  c.machines.assign(changed_ids_.begin(), changed_ids_.end());
  std::sort(c.machines.begin(), c.machines.end());
  changed_regions_.clear();
  changed_ids_.clear();
  return c;
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
  return rows_.size();
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
          {"pods", pods.size()}, {"seats", seats},  {"jobs_served", jobs}, {"slots", layout.size()}};
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
           {{"nodes", rows_.size()}, {"online", online_}, {"memory_bytes", memory_}, {"jobs_served", jobs_},
            {"pods", pods_.size()}}},
          {"regions", std::move(regions)},
          {"chips", std::move(chip_list)},
          {"seats", seats}};
}

json Population::machines(const MachineQuery& q) const {
  std::shared_lock lock(mu_);
  std::vector<const Row*> hits;
  for (const Row& r : rows_) {
    const Machine& m = r.m;
    if (q.online == MachineQuery::Online::Yes && !m.online) continue;
    if (q.online == MachineQuery::Online::No && m.online) continue;
    if (q.chip && m.chip != *q.chip) continue;
    if (q.chip_class && r.cls != *q.chip_class) continue;
    if (m.memory_bytes < q.min_memory) continue;
    if (q.region && m.region != *q.region) continue;
    if (q.seat && m.seat != *q.seat) continue;
    if (q.pod && m.pod != *q.pod) continue;
    hits.push_back(&r);
  }
  // Ties go by id, so pages never overlap or skip.
  auto key_less = [&q](const Row* a, const Row* b) -> int {
    const Machine &x = a->m, &y = b->m;
    auto cmp = [](const auto& u, const auto& v) { return u < v ? -1 : v < u ? 1 : 0; };
    switch (q.sort) {
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
  };
  auto before = [&](const Row* a, const Row* b) {
    const int c = key_less(a, b);
    if (c != 0) return q.descending ? c > 0 : c < 0;
    return a->m.id < b->m.id;
  };
  const auto matched = static_cast<int64_t>(hits.size());
  const int64_t from = std::min(q.offset, matched), to = std::min(matched, q.offset + q.limit);
  std::partial_sort(hits.begin(), hits.begin() + to, hits.end(), before);
  json rows = json::array();
  for (int64_t i = from; i < to; ++i) rows.push_back(machine_json(hits[static_cast<size_t>(i)]->m));
  static const char* const kSortNames[] = {"memory", "chip", "region", "seat", "pod", "jobs", "tok_s", "uptime", "id"};
  return {{"total", rows_.size()},
          {"matched", matched},
          {"offset", q.offset},
          {"limit", q.limit},
          {"sort", kSortNames[static_cast<int>(q.sort)]},
          {"order", q.descending ? "desc" : "asc"},
          {"machines", std::move(rows)}};
}

json Population::marks(const MapQuery& q) const {
  std::shared_lock lock(mu_);
  struct Hit {
    size_t view;
    uint32_t row;
    double x, y;
  };
  std::vector<Hit> hits;
  for (size_t v = 0; v < q.views.size(); ++v) {
    const MapQuery::View& view = q.views[v];
    auto it = regions_.find(view.region);
    if (it == regions_.end()) continue;
    const auto& layout = it->second.layout;
    // Slots on rings beyond the rectangle's farthest corner cannot be in it.
    const double far = std::max({std::hypot(view.x0, view.y0), std::hypot(view.x1, view.y0), std::hypot(view.x0, view.y1),
                                 std::hypot(view.x1, view.y1)});
    const double near = std::hypot(std::max({view.x0, 0.0, -view.x1}), std::max({view.y0, 0.0, -view.y1}));
    // A ring k slot lies between k*sqrt(3)/2 and k from the centre.
    const int64_t first_ring = static_cast<int64_t>(std::floor(near));
    const int64_t last_ring = static_cast<int64_t>(std::ceil(far * 2 / std::sqrt(3.0))) + 1;
    const int64_t first = first_ring <= 0 ? 0 : 1 + 3 * first_ring * (first_ring - 1);
    const int64_t last = std::min<int64_t>(static_cast<int64_t>(layout.size()), 1 + 3 * (last_ring + 1) * last_ring);
    for (int64_t i = first; i < last; ++i) {
      const uint32_t row = layout[static_cast<size_t>(i)];
      if (!rows_[row].m.online) continue;
      auto [x, y] = spiral_slot(i);
      if (x < view.x0 || x > view.x1 || y < view.y0 || y > view.y1) continue;
      hits.push_back({v, row, x, y});
    }
  }
  const auto in_view = static_cast<int64_t>(hits.size());
  json regions = json::array();
  if (in_view <= q.budget && !q.clusters) {
    std::vector<json> per(q.views.size(), json::array());
    for (const Hit& h : hits) {
      const Machine& m = rows_[h.row].m;
      per[h.view].push_back({round1(h.x), round1(h.y), m.id, m.chip, m.memory_bytes, m.seat, m.pod, m.jobs_served,
                             round1(m.tok_s), m.online_since});
    }
    for (size_t v = 0; v < q.views.size(); ++v)
      if (!per[v].empty()) regions.push_back({{"region", q.views[v].region}, {"machines", std::move(per[v])}});
    return {{"mode", "machines"}, {"cell", q.cell}, {"in_view", in_view}, {"marks", in_view}, {"regions", std::move(regions)}};
  }
  // Too many to draw one by one: one mark per occupied cell, cells doubled until they fit.
  struct Cell {
    int64_t count = 0, memory = 0;
    double sx = 0, sy = 0;
    std::array<int64_t, kChipClasses> classes{};
    std::unordered_set<std::string_view> pods;
  };
  double cell = q.cell;
  for (;;) {
    std::vector<std::unordered_map<int64_t, Cell>> cells(q.views.size());
    size_t marks = 0;
    for (const Hit& h : hits) {
      const int64_t cx = static_cast<int64_t>(std::floor(h.x / cell)), cy = static_cast<int64_t>(std::floor(h.y / cell));
      auto [it, fresh] = cells[h.view].try_emplace(cx * 4'000'003 + cy);
      marks += fresh;
      Cell& c = it->second;
      const Row& r = rows_[h.row];
      c.count++;
      c.memory += r.m.memory_bytes;
      c.sx += h.x;
      c.sy += h.y;
      c.classes[static_cast<int>(r.cls)]++;
      if (!r.m.pod.empty()) c.pods.insert(r.m.pod);
    }
    if (static_cast<int64_t>(marks) > q.budget) {
      cell *= 2;
      continue;
    }
    for (size_t v = 0; v < q.views.size(); ++v) {
      if (cells[v].empty()) continue;
      std::vector<std::pair<int64_t, const Cell*>> ordered;
      for (const auto& [key, c] : cells[v]) ordered.emplace_back(key, &c);
      std::sort(ordered.begin(), ordered.end(), [](auto& a, auto& b) { return a.first < b.first; });
      json list = json::array();
      for (const auto& [key, c] : ordered) {
        const double n = static_cast<double>(c->count);
        list.push_back({round1(c->sx / n), round1(c->sy / n), c->count, c->classes, c->memory, c->pods.size()});
      }
      regions.push_back({{"region", q.views[v].region}, {"clusters", std::move(list)}});
    }
    return {{"mode", "clusters"}, {"cell", cell}, {"in_view", in_view}, {"marks", marks}, {"regions", std::move(regions)}};
  }
}

}  // namespace orchard::network::world
