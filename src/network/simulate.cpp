#include "network/simulate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <fmt/format.h>
#include <queue>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "network/job_book.h"
#include "network/ledger.h"
#include "network/placement.h"
#include "network/settlement.h"
#include "network/world/population.h"

namespace orchard::network {
namespace {

constexpr double kGB = 1e9;
// macOS keeps part of unified memory for itself: an owner can lend about this much.
constexpr double kLendableMemory = 0.75;
constexpr int kContextTokens = 4096;
constexpr double kPrefillSpeedup = 8;     // prompt tokens per second relative to decode
constexpr double kDownloadBytesPerS = 100e6;
constexpr double kMeanOfflineHours = 2;

struct SimModel {
  const char* name;
  double bytes;
  double kv_bytes_per_token;
  double share;  // of arrivals
};

// The job mix: quantized (Q4_K_M) models as people run them locally, most jobs on small models
// (an assumption, stated in docs/network.md: 3-8B models are what most people run, 14-32B are
// the step up, 70B is for those with the memory, 405B rare), with their F16 KV cache per token
// (layers × KV heads × head size × 2 × 2 bytes).
constexpr SimModel kModels[] = {
    {"llama-3.2-1b-q4_k_m", 0.8 * kGB, 32768, 0.05},    {"llama-3.2-3b-q4_k_m", 2.0 * kGB, 114688, 0.25},
    {"llama-3.1-8b-q4_k_m", 4.9 * kGB, 131072, 0.40},   {"qwen2.5-14b-q4_k_m", 9.0 * kGB, 196608, 0.12},
    {"qwen2.5-32b-q4_k_m", 19.9 * kGB, 262144, 0.10},   {"llama-3.3-70b-q4_k_m", 42.5 * kGB, 327680, 0.075},
    {"llama-3.1-405b-q4_k_m", 243 * kGB, 516096, 0.005},
};

// Log-scale histogram: percentiles of tens of millions of samples in a few KB.
class Histogram {
 public:
  void add(double v) {
    ++count_;
    max_ = std::max(max_, v);
    int b = v <= kMin ? 0 : std::min(kBins - 1, 1 + static_cast<int>(std::log(v / kMin) / std::log(kGrowth)));
    bins_[b]++;
  }
  double percentile(double p) const {
    if (count_ == 0) return 0;
    int64_t want = static_cast<int64_t>(std::ceil(p * count_)), seen = 0;
    for (int b = 0; b < kBins; ++b) {
      seen += bins_[b];
      if (seen >= want) return std::min(max_, b == 0 ? kMin : kMin * std::pow(kGrowth, b));
    }
    return max_;
  }
  double max() const { return max_; }

 private:
  static constexpr double kMin = 1e-3, kGrowth = 1.02;
  static constexpr int kBins = 2000;
  int64_t bins_[kBins] = {};
  int64_t count_ = 0;
  double max_ = 0;
};

enum class EvType { Arrival, Finish, Leave, Return, LeaseExpire };
struct Event {
  double t;
  EvType type;
  int64_t id;
  int64_t attempt;
  bool operator>(const Event& o) const { return t > o.t; }
};

struct SimNode {
  int chip;
  int mem_gb = 0;
  ledger::Seat seat;
  bool online = true;
  double online_since = 0;
  int64_t job = -1;  // running job
  int pod = -1;
  std::string cls;
  bool cheats = false;       // its outputs fail their checks
  bool no_download = false;  // it hands back a job whose model it lacks
  bool banned = false;
  int64_t mismatches = 0;
};

struct SimJob {
  double arrival;
  int model;
  int prompt, output;
  int64_t attempt = 0;       // its current lease's, as the book numbers them
  int64_t elapsed_ms = 0;    // of its current run, from pickup
  std::vector<int> nodes;    // running it, holder first
  double tok_s = 0;          // its unit's expected decode speed
  // A spot check: the job it checks (else -1), that job's producer and the pay held for it.
  int64_t checks = -1;
  int producer = -1;
  int64_t escrow = 0;
};

// The population, the arrivals and the machines' comings and goings are simulated here; the
// queue, the leases and the pay are the coordinator's own JobBook and Settlement, on a clock of
// virtual milliseconds.
class Simulator {
 public:
  Simulator(const SimulationOptions& o, const HardwareCatalog& catalog)
      : o_(o),
        catalog_(catalog),
        rng_(o.seed),
        placement_(1),
        book_(
            placement_, [this] { return std::llround(now_ * 1000); }, std::llround(o.lease_timeout_s * 1000),
            [this](const BookJob& j) {
              const SimModel& m = kModels[model_index_.at(j.model)];
              Demand d{m.name, static_cast<int64_t>(m.bytes), need_bytes(m), {}};
              // As the coordinator: machines that handed back a job of this model for lacking it.
              if (auto lacking = lacks_.find(j.model); lacking != lacks_.end()) d.exclude = lacking->second;
              return std::optional<Demand>(std::move(d));
            },
            // A returned job waits while any unit could ever hold it; placement passes over the
            // machines that refused it, and its attempts are bounded.
            [this](const BookJob& j, const std::unordered_set<std::string>&) {
              return placement_.could_fit(need_bytes(kModels[model_index_.at(j.model)]));
            }),
        settlement_(o.verify_fraction, o.seed) {
    if (catalog_.chips().empty()) throw Error(error_message("network", "simulate: the hardware catalog is empty"));
    for (int m = 0; m < static_cast<int>(std::size(kModels)); ++m) model_index_[kModels[m].name] = m;
  }

  SimulationReport run() {
    auto wall = std::chrono::steady_clock::now();
    populate();
    end_ = o_.hours * 3600;
    push({exp(o_.jobs_per_s), EvType::Arrival, 0, 0});
    double next_tick = 1;
    while (!events_.empty() && events_.top().t <= end_) {
      Event e = events_.top();
      for (; o_.pace && next_tick <= e.t && next_tick <= end_; next_tick += 1) pace(next_tick);
      events_.pop();
      now_ = e.t;
      handle(e);
    }
    now_ = end_;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      SeatEarnings& e = report_.earnings[nodes_[i].cls];
      if (nodes_[i].online) e.machine_hours += (end_ - nodes_[i].online_since) / 3600;
      e.credits += static_cast<double>(book_ledger_.balance(ledger::node_account(node_id(i)))) / 1e6;
    }
    double online_hours = 0;
    for (auto& [cls, e] : report_.earnings) online_hours += e.machine_hours;
    report_.utilization = online_hours > 0 ? busy_seconds_ / 3600 / online_hours : 0;
    report_.queued_by_model = book_.queued_by_model();
    int64_t checks_leased = 0;
    for (const auto& [id, j] : jobs_)
      if (j.checks >= 0) {
        report_.checks_pending++;
        checks_leased += book_.leased(std::to_string(id));
      }
    report_.jobs_queued = static_cast<int64_t>(book_.queued()) - (report_.checks_pending - checks_leased);
    report_.jobs_in_flight = static_cast<int64_t>(book_.leases()) - checks_leased;
    report_.jobs_lost = report_.jobs_submitted - report_.jobs_refused - report_.jobs_failed - report_.jobs_completed -
                        report_.jobs_in_flight - report_.jobs_queued;
    report_.queue_delay_p50_s = delay_.percentile(0.5);
    report_.queue_delay_p99_s = delay_.percentile(0.99);
    report_.placement_p50_us = placement_us_.percentile(0.5);
    report_.placement_p99_us = placement_us_.percentile(0.99);
    report_.placement_max_us = placement_us_.max();
    report_.ledger_sum = book_ledger_.sum();
    report_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    return report_;
  }

 private:
  static int64_t need_bytes(const SimModel& m) { return static_cast<int64_t>(m.bytes + m.kv_bytes_per_token * kContextTokens); }
  double exp(double rate) { return std::exponential_distribution<double>(rate)(rng_); }
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  void push(Event e) { events_.push(e); }

  // The live view (SimulationOptions::world): machine i as it is now.
  void show(size_t i) {
    if (!o_.world) return;
    const SimNode& n = nodes_[i];
    const auto& regions = o_.world_regions;
    world::Machine m;
    m.id = node_id(i);
    m.chip = catalog_.chips()[n.chip].name;
    m.memory_bytes = static_cast<int64_t>(n.mem_gb) << 30;
    m.seat = ledger::seat_name(n.seat);
    m.pod = n.pod >= 0 ? fmt::format("p{}", n.pod) : "";
    m.online = n.online;
    m.online_since = n.online ? o_.world_epoch_ms + static_cast<int64_t>(n.online_since * 1000) : 0;
    if (!regions.empty()) {
      // Some places have many more machines than others: weights 1/(rank + 3), picked by a hash
      // of the index (not the run's generator), a pod's members in one place.
      // The weights go to the places in an order of their own (a hash of the name), so the
      // biggest are spread over the world rather than the first of the list.
      std::vector<double>& cumulative = region_weights_;
      if (cumulative.size() != regions.size()) {
        region_order_.resize(regions.size());
        for (size_t r = 0; r < regions.size(); ++r) region_order_[r] = r;
        auto scramble = [](const std::string& s) {
          uint64_t h = 1469598103934665603ull;  // FNV-1a
          for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
          return h;
        };
        std::sort(region_order_.begin(), region_order_.end(),
                  [&](size_t a, size_t b) { return scramble(regions[a]) < scramble(regions[b]); });
        cumulative.clear();
        double acc = 0;
        for (size_t r = 0; r < regions.size(); ++r) cumulative.push_back(acc += 1.0 / static_cast<double>(r + 3));
      }
      uint64_t h = (n.pod >= 0 ? static_cast<uint64_t>(n.pod) + (1ull << 40) : i) + 0x9E3779B97F4A7C15ull;
      h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
      h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
      h ^= h >> 31;
      const double u = static_cast<double>(h >> 11) / 9007199254740992.0 * cumulative.back();
      const auto at = static_cast<size_t>(std::lower_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
      m.region = regions[region_order_[std::min(at, regions.size() - 1)]];
    }
    o_.world->put(std::move(m));
  }

  void pace(double virtual_s) {
    SimulationTick t;
    t.jobs_completed = report_.jobs_completed;
    t.tokens_generated = tokens_generated_;
    t.queued = static_cast<int64_t>(book_.queued());
    t.running = static_cast<int64_t>(jobs_.size()) - t.queued;
    for (const auto& [seat, micro] : credits_by_seat_) t.credits_by_seat[seat] = static_cast<double>(micro) / 1e6;
    o_.pace(virtual_s, t);
  }
  static std::string node_id(size_t i) { return fmt::format("n{}", i); }

  void populate() {
    const auto& chips = catalog_.chips();
    // Tiers as they are sold: many base machines, few Ultras.
    auto usable = [&](const ChipInfo& c, bool big) {
      return c.memory_bandwidth_gbs > 0 && !c.memory_options_gb.empty() && (!big || c.tier >= ledger::Tier::Max);
    };
    for (bool big : {false, true}) {
      if ((big ? o_.pods : o_.nodes) > 0 &&
          std::none_of(chips.begin(), chips.end(), [&](const ChipInfo& c) { return usable(c, big); }))
        throw Error(error_message("network", "simulate: the hardware catalog has no chip with bandwidth and memory options{}",
                                  big ? " of the Max or Ultra tier for pods (use --pods 0)" : ""));
    }
    auto pick_chip = [&](bool big) {
      for (;;) {
        int c = static_cast<int>(rng_() % chips.size());
        double keep = big ? 1.0 : std::array<double, 4>{1.0, 0.6, 0.35, 0.12}[static_cast<int>(chips[c].tier)];
        if (usable(chips[c], big) && uniform() < keep) return c;
      }
    };
    auto add = [&](int chip, int mem_gb) {
      size_t i = nodes_.size();
      SimNode n;
      n.chip = chip;
      n.mem_gb = mem_gb;
      // Dedicated seats are what Ultra owners buy into most: they earn most there.
      double dedicated = o_.dedicated_fraction * (chips[chip].tier == ledger::Tier::Ultra ? 3 : 1);
      n.seat = uniform() < dedicated ? ledger::Seat::Dedicated : ledger::Seat::Shared;
      n.cls = fmt::format("{}/{}", ledger::seat_name(n.seat), ledger::tier_name(chips[chip].tier));
      // Drawn only when asked for, so that runs without them draw the same population as before.
      n.cheats = o_.cheat_fraction > 0 && uniform() < o_.cheat_fraction;
      n.no_download = o_.no_download_fraction > 0 && uniform() < o_.no_download_fraction;
      NodeSpec spec{node_id(i), static_cast<int64_t>(mem_gb * kGB * kLendableMemory), chips[chip].memory_bandwidth_gbs,
                    {}, 1.0};
      for (const SimModel& m : kModels)
        if (m.bytes < spec.memory_bytes && uniform() < 0.4) spec.models.push_back(m.name);
      placement_.add_node(spec);
      nodes_.push_back(n);
      return i;
    };
    int64_t pooled = 0;
    for (int64_t p = 0; p < o_.pods && pooled + 4 <= o_.nodes; ++p) {
      int chip = pick_chip(true);
      const auto& opts = chips[chip].memory_options_gb;
      int mem = opts[rng_() % opts.size()];
      int size = 2 + static_cast<int>(rng_() % 3);
      PodSpec pod{fmt::format("p{}", p), {}, 10};
      for (int k = 0; k < size; ++k) {
        size_t i = add(chip, mem);
        nodes_[i].pod = static_cast<int>(p);
        pod.members.push_back(node_id(i));
      }
      placement_.add_pod(pod);
      pooled += size;
    }
    while (static_cast<int64_t>(nodes_.size()) < o_.nodes) {
      int chip = pick_chip(false);
      const auto& opts = chips[chip].memory_options_gb;
      add(chip, opts[rng_() % opts.size()]);
    }
    // Shared seats start in their steady state: online a fraction leave/(leave+return) of the time.
    double p_online = o_.churn > 0 ? (1 / o_.churn) / (1 / o_.churn + kMeanOfflineHours) : 1;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      SimNode& n = nodes_[i];
      if (n.seat == ledger::Seat::Shared && o_.churn > 0) {
        n.online = uniform() < p_online;
        if (n.online) push({exp(o_.churn / 3600), EvType::Leave, static_cast<int64_t>(i), 0});
        else push({exp(1 / (kMeanOfflineHours * 3600)), EvType::Return, static_cast<int64_t>(i), 0});
      }
      placement_.set_available(node_id(i), n.online);
      show(i);
    }
  }

  void handle(const Event& e) {
    switch (e.type) {
      case EvType::Arrival: {
        push({now_ + exp(o_.jobs_per_s), EvType::Arrival, 0, 0});
        double r = uniform(), acc = 0;
        int m = 0;
        for (; m < static_cast<int>(std::size(kModels)) - 1; ++m)
          if ((acc += kModels[m].share) >= r) break;
        report_.jobs_submitted++;
        // A job that no unit of the network could ever hold is refused at once, as the
        // coordinator refuses it, rather than waiting for a machine that does not exist.
        if (!placement_.could_fit(need_bytes(kModels[m]))) {
          report_.jobs_refused++;
          report_.refused_by_model[kModels[m].name]++;
          break;
        }
        int64_t id = next_job_++;
        jobs_.emplace(id, SimJob{now_, m, 100 + static_cast<int>(rng_() % 900), 50 + static_cast<int>(rng_() % 450), 0, 0, {}});
        book_.add({std::to_string(id), "generate", kModels[m].name, "", 0, ""});
        dispatch();
        break;
      }
      case EvType::Finish: {
        auto it = jobs_.find(e.id);
        if (it == jobs_.end() || it->second.attempt != e.attempt) break;  // lease was lost before
        finish(e.id, it->second);
        dispatch();
        break;
      }
      case EvType::Leave: {
        SimNode& n = nodes_[e.id];
        n.online = false;
        report_.earnings[n.cls].machine_hours += (now_ - n.online_since) / 3600;
        placement_.set_available(node_id(e.id), false);
        show(static_cast<size_t>(e.id));
        // Its job's holder reports for the last time now; the lease runs out lease_timeout_s later
        // (a pod's job stops when any member leaves).
        if (n.job >= 0) {
          const SimJob& j = jobs_.at(n.job);
          book_.renew(std::to_string(n.job), node_id(j.nodes.front()), j.attempt);
          push({now_ + o_.lease_timeout_s + kClockTick, EvType::LeaseExpire, n.job, j.attempt});
        }
        push({now_ + exp(1 / (kMeanOfflineHours * 3600)), EvType::Return, e.id, 0});
        break;
      }
      case EvType::Return: {
        SimNode& n = nodes_[e.id];
        n.online = true;
        n.online_since = now_;
        placement_.set_available(node_id(e.id), !n.banned);
        show(static_cast<size_t>(e.id));
        push({now_ + exp(o_.churn / 3600), EvType::Leave, e.id, 0});
        dispatch();
        break;
      }
      case EvType::LeaseExpire: {
        auto it = jobs_.find(e.id);
        if (it == jobs_.end() || it->second.attempt != e.attempt) break;
        const auto lease = book_.expired(std::to_string(e.id));
        if (!lease) break;  // renewed since: a later event ends it
        SimJob& j = it->second;
        release(e.id, j);
        const int holder = j.nodes.front();
        double r = next_reliability(reliability_[holder], Outcome::LostLease);
        reliability_[holder] = r;
        placement_.set_reliability(node_id(holder), r);
        report_.requeued++;
        const auto returned = book_.give_back(lease->job.id, lease->holder, lease->job.attempt, JobBook::Return::LeaseLost);
        if (!returned.failure.empty()) {
          report_.jobs_failed++;
          jobs_.erase(it);
        }
        dispatch();
        break;
      }
    }
  }

  static Seller seller_of(const SimNode& n, const ChipInfo& chip) { return {n.seat, chip.tier, chip.memory_bandwidth_gbs}; }

  // The holder lacks the job's model and cannot fetch it: it hands the job back as a node agent
  // does, and the book and placement pass it over for that model from then on.
  void hand_back(const Lease& lease) {
    const int holder = std::stoi(lease.holder.substr(1));
    report_.hand_backs++;
    lacks_[lease.job.model].insert(lease.holder);
    double r = next_reliability(reliability_[holder], Outcome::HandedBack);
    reliability_[holder] = r;
    placement_.set_reliability(lease.holder, r);
    const auto returned = book_.give_back(lease.job.id, lease.holder, lease.job.attempt, JobBook::Return::Refused,
                                          kModelMissing);
    if (!returned.failure.empty()) {
      report_.jobs_failed++;
      jobs_.erase(std::stoll(lease.job.id));
    }
    handed_back_ = true;
  }

  // A spot check ended: the checker is paid from the trust fund; the job's escrow goes to its
  // producer, or back to the client with the producer fined, and banned after
  // ban_after_mismatches, as the coordinator settles a check.
  void finish_check(int64_t id, SimJob& c) {
    const int verifier = c.nodes.front();
    SimNode& producer = nodes_[c.producer];
    const bool ok = !producer.cheats;
    const SimModel& m = kModels[c.model];
    const SimNode& v = nodes_[verifier];
    const int64_t pay = Settlement::verifier_pay(c.prompt + c.output, static_cast<int64_t>(m.bytes),
                                                 seller_of(v, catalog_.chips()[v.chip]));
    const std::string check_id = std::to_string(id), original = std::to_string(c.checks);
    book_ledger_.post(ledger::pay_verifier(check_id, node_id(verifier), pay));
    credits_by_seat_[ledger::seat_name(v.seat)] += pay;
    report_.checks++;
    if (ok) {
      book_ledger_.post(ledger::release_escrow(original, node_id(c.producer), c.escrow));
      credits_by_seat_[ledger::seat_name(producer.seat)] += c.escrow;
    } else {
      const int64_t fine = ledger::kFineMultiple * c.escrow;
      book_ledger_.post(ledger::refund_escrow(original, "sim", c.escrow));
      book_ledger_.post(ledger::fine_node(original, node_id(c.producer), fine));
      credits_by_seat_[ledger::seat_name(producer.seat)] -= fine;
      report_.checks_caught++;
      report_.fines += fine;
      const double r = next_reliability(reliability_[c.producer], Outcome::FailedCheck);
      reliability_[c.producer] = r;
      placement_.set_reliability(node_id(c.producer), r);
      if (++producer.mismatches >= o_.ban_after_mismatches && !producer.banned) {
        producer.banned = true;
        report_.banned++;
        placement_.set_available(node_id(c.producer), false);
      }
    }
    book_.finish(check_id);
    jobs_.erase(id);
  }

  void release(int64_t id, SimJob& j) {
    for (int ni : j.nodes)
      if (nodes_[ni].job == id) nodes_[ni].job = -1;
  }

  // Paid as the coordinator pays: whole, to the holder (a pod's leader), by the Settlement.
  void finish(int64_t id, SimJob& j) {
    release(id, j);
    if (j.checks >= 0) return finish_check(id, j);
    const SimModel& m = kModels[j.model];
    const int holder = j.nodes.front();
    const SimNode& n = nodes_[holder];
    const ChipInfo& chip = catalog_.chips()[n.chip];
    // Simulated engines report their token ids: any job may be drawn for a check.
    const CountedJob counted{j.prompt, j.output, static_cast<int64_t>(m.bytes), static_cast<int64_t>(m.bytes),
                             j.elapsed_ms, true};
    const Price price = settlement_.price(node_id(holder), seller_of(n, chip), counted);
    book_ledger_.post(ledger::settle_job(std::to_string(id), "sim", node_id(holder), price.amount, price.check));
    settlement_.settled(node_id(holder), counted);
    book_.finish(std::to_string(id));
    report_.earnings[n.cls].jobs++;
    tokens_generated_ += j.output;
    if (price.check) {
      // Re-run on another machine (never the producer) before the pay is released.
      const int64_t check = next_job_++;
      SimJob c{now_, j.model, j.prompt, j.output, 0, 0, {}};
      c.checks = id;
      c.producer = holder;
      c.escrow = price.amount;
      jobs_.emplace(check, std::move(c));
      book_.add({std::to_string(check), "verify", m.name, "", 0, node_id(holder), 0});
    } else {
      credits_by_seat_[ledger::seat_name(n.seat)] += price.amount;
    }
    if (o_.world) o_.world->job_served(node_id(holder), j.tok_s);
    if (o_.keep_settlements) {
      SettledJob s{std::to_string(id), {}, chip.name, n.seat, kModels[j.model].name, static_cast<int64_t>(m.bytes),
                   j.prompt, j.output, j.elapsed_ms, price.multiplier, price.amount};
      for (int ni : j.nodes) s.nodes.push_back(node_id(ni));
      report_.settlements.push_back(std::move(s));
    }
    double r = next_reliability(reliability_[holder], Outcome::Served);
    if (r != reliability_[holder]) {
      reliability_[holder] = r;
      placement_.set_reliability(node_id(holder), r);
    }
    report_.jobs_completed++;
    jobs_.erase(id);
  }

  // The book places what waits (the coordinator's dispatch); each lease is picked up at once.
  // A job handed back goes to another machine in the next pass.
  void dispatch() {
    do {
      handed_back_ = false;
      holders_.clear();
      auto t0 = std::chrono::steady_clock::now();
      book_.dispatch([&](const BookJob&, const std::string& holder, int64_t attempt) {
        holders_.push_back(holder);
        return std::optional<int64_t>(attempt);
      });
      placement_us_.add(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      report_.placements++;
      for (const std::string& holder : holders_)
        if (auto lease = book_.take(holder)) start(*lease);
    } while (handed_back_);
  }

  void start(const Lease& lease) {
    const int64_t id = std::stoll(lease.job.id);
    SimJob& j = jobs_.at(id);
    const SimModel& m = kModels[j.model];
    if (!lease.on_disk && nodes_[std::stoi(lease.holder.substr(1))].no_download) return hand_back(lease);
    j.attempt = lease.job.attempt;
    j.nodes.clear();
    for (const std::string& n : lease.nodes) {
      int ni = std::stoi(n.substr(1));
      j.nodes.push_back(ni);
      nodes_[ni].job = id;
    }
    j.tok_s = lease.expected_tok_s;
    // A check reads the prompt and the output it was given in one pass, at prompt speed.
    double seconds = j.checks >= 0 ? (j.prompt + j.output) / (lease.expected_tok_s * kPrefillSpeedup)
                                   : j.prompt / (lease.expected_tok_s * kPrefillSpeedup) + j.output / lease.expected_tok_s;
    if (j.checks < 0) {
      if (lease.nodes.size() > 1) report_.pod_jobs++;
      delay_.add(now_ - j.arrival);
    }
    if (!lease.on_disk) {
      seconds += m.bytes / kDownloadBytesPerS;
      for (const std::string& n : lease.nodes) placement_.add_model(n, m.name);
    }
    // Whole virtual milliseconds, as the coordinator's clock counts them.
    j.elapsed_ms = std::max<int64_t>(1, std::llround(seconds * 1000));
    // Busy time counts within the simulated span (a 405B job may outlast it).
    const double busy = std::min(seconds, end_ - now_);
    busy_seconds_ += busy * static_cast<double>(lease.nodes.size());
    for (int ni : j.nodes) report_.earnings[nodes_[ni].cls].busy_hours += busy / 3600;
    push({now_ + static_cast<double>(j.elapsed_ms) / 1000, EvType::Finish, id, j.attempt});
  }

  // An expiry event comes this long after the deadline, so rounding to the book's milliseconds
  // never lands it just before.
  static constexpr double kClockTick = 1e-3;
  const SimulationOptions& o_;
  const HardwareCatalog& catalog_;
  std::mt19937_64 rng_;
  Placement placement_;
  double now_ = 0, end_ = 0, busy_seconds_ = 0;
  JobBook book_;
  Settlement settlement_;
  ledger::Book book_ledger_;
  std::unordered_map<std::string, int> model_index_;
  std::vector<SimNode> nodes_;
  struct Reliability {
    std::unordered_map<int, double> r;
    double& operator[](int i) { return r.try_emplace(i, 1.0).first->second; }
  } reliability_;
  std::unordered_map<int64_t, SimJob> jobs_;
  std::vector<std::string> holders_;
  bool handed_back_ = false;
  std::unordered_map<std::string, std::unordered_set<std::string>> lacks_;  // model -> machines without it
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t next_job_ = 0;
  int64_t tokens_generated_ = 0;
  std::map<std::string, int64_t> credits_by_seat_;  // micro-credits paid, for pace()
  std::vector<double> region_weights_;  // cumulative, for show()
  std::vector<size_t> region_order_;     // the places, heaviest first
  Histogram delay_, placement_us_;
  SimulationReport report_;
};

}  // namespace

SimulationReport simulate(const SimulationOptions& options, const HardwareCatalog& catalog) {
  return Simulator(options, catalog).run();
}

std::string SimulationReport::to_text() const {
  std::string s = "job mix:";
  for (const SimModel& m : kModels) s += fmt::format(" {} {:g}%", m.name, m.share * 100);
  s += "\n";
  s += fmt::format(
      "jobs: {} submitted, {} refused (no unit can hold them), {} failed (after {} leases), {} completed, {} running, {} "
      "queued, {} lost; {} leases lost to churn; {} ran on pods\n"
      "utilization: {:.1f}% of online machine-time\n"
      "queueing delay of started jobs: p50 {:.3f} s, p99 {:.3f} s\n"
      "dispatch pass (placing what waits): p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us over {} passes\n"
      "spot checks: {} done, {} caught a wrong output ({:.2f} credits fined), {} pending; {} machines banned; {} "
      "jobs handed back by machines without their model\n"
      "ledger: sum of all balances {} (must be 0)\n",
      jobs_submitted, jobs_refused, jobs_failed, kMaxAttempts, jobs_completed, jobs_in_flight, jobs_queued, jobs_lost, requeued, pod_jobs, utilization * 100,
      queue_delay_p50_s, queue_delay_p99_s, placement_p50_us, placement_p99_us, placement_max_us, placements, checks,
      checks_caught, static_cast<double>(fines) / 1e6, checks_pending, banned, hand_backs, ledger_sum);
  if (!queued_by_model.empty()) {
    s += "still queued:";
    for (const auto& [model, n] : queued_by_model) s += fmt::format(" {} {}", model, n);
    s += "\n";
  }
  if (!refused_by_model.empty()) {
    s += "refused:";
    for (const auto& [model, n] : refused_by_model) s += fmt::format(" {} {}", model, n);
    s += "\n";
  }
  s += "earnings per seat class (credits per online machine-hour; busy: time on jobs per online time):\n";
  std::vector<std::pair<std::string, SeatEarnings>> rows(earnings.begin(), earnings.end());
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.per_machine_hour() > b.second.per_machine_hour(); });
  for (auto& [cls, e] : rows)
    s += fmt::format("  {:<16} {:>10.3f}  ({} jobs, {:.0f} machine-hours, busy {:.1f}%)\n", cls, e.per_machine_hour(),
                     e.jobs, e.machine_hours, e.machine_hours > 0 ? 100 * e.busy_hours / e.machine_hours : 0.0);
  s += fmt::format("simulated in {:.1f} s of wall time\n", wall_seconds);
  return s;
}

}  // namespace orchard::network
