#include "network/world/world_feed.h"

#include <algorithm>
#include <unordered_set>

namespace orchard::network::world {

using nlohmann::json;

namespace {

double number_or(const json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

WorldFeed::WorldFeed(std::shared_ptr<Population> population, FeedOptions options)
    : population_(std::move(population)), options_(options) {
  if (!population_) population_ = std::make_shared<Population>();
  if (options_.tick.count() <= 0) options_.tick = std::chrono::milliseconds(1000);
  if (options_.history_step.count() <= 0) options_.history_step = std::chrono::seconds(10);
  if (options_.max_deltas == 0) options_.max_deltas = 1;
}

void WorldFeed::shutdown() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
}

bool WorldFeed::stopped() const {
  std::lock_guard lock(mu_);
  return stop_;
}

uint64_t WorldFeed::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

void WorldFeed::wait_past(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return stop_ || version_ > seen; });
}

std::vector<WorldFeed::Event> WorldFeed::since(uint64_t seen) const {
  std::lock_guard lock(mu_);
  std::vector<Event> out;
  if (version_ == 0 || seen >= version_) return out;
  if (seen == 0 || deltas_.empty() || deltas_.front().first > seen + 1) {
    out.push_back({version_, "summary", summary_json_});
    return out;
  }
  for (const auto& [v, delta] : deltas_)
    if (v > seen) out.push_back({v, "delta", delta});
  return out;
}

json WorldFeed::history() const {
  std::lock_guard lock(mu_);
  auto points = json::array();
  for (const auto& p : history_) points.push_back({p.t_ms, p.tok_s, p.jobs_per_min});
  return {{"step_s", options_.history_step.count()}, {"points", std::move(points)}};
}

bool WorldFeed::acquire_stream() {
  std::lock_guard lock(mu_);
  if (stop_ || streams_ >= options_.max_streams) return false;
  ++streams_;
  return true;
}

void WorldFeed::release_stream() {
  std::lock_guard lock(mu_);
  if (streams_ > 0) --streams_;
}

void WorldFeed::complete_totals(json& totals, const json& source, double jobs_per_min) {
  if (!totals.is_object()) totals = json::object();
  if (source.is_object())
    for (const auto& [key, value] : source.items())
      if (key != "simulation" && !value.is_null()) totals[key] = value;
  auto fill = [&](const char* key, const json& value) {
    if (!totals.contains(key) || totals[key].is_null()) totals[key] = value;
  };
  for (const char* key : {"nodes", "online", "memory_bytes", "jobs_served", "pods"}) fill(key, 0);
  fill("jobs_per_min", jobs_per_min);
  // Only the source knows what the network generates now: a machine's tok_s is its last job's
  // speed, and summing those would report output from machines that are idle.
  fill("tok_s", nullptr);
  fill("queue", 0);
  fill("credits_by_seat", json::object());
}

json WorldFeed::summary_locked(const json& summary, const json& source) const {
  json out = summary;
  out["version"] = version_;
  complete_totals(out["totals"], source, derived_jpm_);
  if (source.is_object() && source.contains("simulation")) out["simulation"] = source["simulation"];
  return out;
}

json WorldFeed::summary_now(json source) {
  population_->commit();
  json summary = population_->summary();
  std::lock_guard lock(mu_);
  return summary_locked(summary, source.is_object() ? source : last_source_);
}

void WorldFeed::publish(json source, int64_t t_ms) {
  population_->commit();
  Changes changes = population_->take_changes();
  json summary = population_->summary();
  const int64_t jobs = population_->served_events();

  std::unique_lock lock(mu_);
  if (stop_) return;
  if (!source.is_object()) source = last_source_;  // the source could not answer this tick
  last_source_ = source;
  // Jobs per minute from the growth of jobs served over the last minute; over less than a minute
  // of samples (a fresh start) what was seen is scaled up, from 10 s on.
  jobs_window_.emplace_back(t_ms, jobs);
  while (jobs_window_.size() > 1 && jobs_window_.front().first < t_ms - 60'000) jobs_window_.pop_front();
  const auto [t0, j0] = jobs_window_.front();
  derived_jpm_ = static_cast<double>(std::max<int64_t>(0, jobs - j0)) * 60'000.0 /
                 static_cast<double>(std::max<int64_t>(t_ms - t0, 10'000));

  json full = summary_locked(summary, source);
  const json& totals = full["totals"];
  const double tok_s = number_or(totals, "tok_s", 0), jpm = number_or(totals, "jobs_per_min", 0);
  const int64_t step = options_.history_step.count() * 1000;
  const int64_t bucket = t_ms - t_ms % step;
  if (history_.empty() || history_.back().t_ms < bucket) {
    history_.push_back({bucket, tok_s, jpm, 1});
  } else {  // a running mean within the step
    auto& p = history_.back();
    ++p.n;
    p.tok_s += (tok_s - p.tok_s) / p.n;
    p.jobs_per_min += (jpm - p.jobs_per_min) / p.n;
  }
  const int64_t span = options_.history_span.count() * 1000;
  while (!history_.empty() && history_.front().t_ms <= bucket - span) history_.pop_front();

  std::string totals_text = totals.dump();
  if (full.contains("simulation")) totals_text += full["simulation"].dump();
  if (version_ != 0 && !changes.any && totals_text == last_totals_) return;  // a tick with nothing new
  last_totals_ = std::move(totals_text);
  ++version_;
  const json sample = {t_ms, tok_s, jpm};
  full["version"] = version_;
  full["sample"] = sample;

  // The delta: what a page holding the previous version needs to hold this one.
  json delta = {{"version", version_}, {"totals", totals}, {"sample", sample}};
  std::unordered_set<std::string> wanted(changes.regions.begin(), changes.regions.end());
  json regions = json::array();
  for (const json& r : full["regions"])
    if (wanted.erase(r["name"].get<std::string>())) regions.push_back(r);
  for (const std::string& gone : wanted) regions.push_back(population_->region_json(gone));  // emptied: zeros
  delta["regions"] = std::move(regions);
  if (changes.chips) delta["chips"] = full["chips"];
  delta["seats"] = full["seats"];
  delta["machines"] = {{"changed", changes.machines_changed}, {"ids", changes.machines}, {"records", std::move(changes.records)}};
  // The population's versions this delta's machines changed between: a view fetched at a version
  // in [from, to) misses some of them, one at `to` or after has them all.
  delta["span"] = {through_, changes.through};
  through_ = changes.through;
  if (full.contains("simulation")) delta["simulation"] = full["simulation"];

  summary_json_ = full.dump();
  deltas_.emplace_back(version_, delta.dump());
  while (deltas_.size() > options_.max_deltas) deltas_.pop_front();
  lock.unlock();
  changed_.notify_all();
}

WorldSampler::WorldSampler(std::shared_ptr<WorldFeed> feed, TotalsFn source)
    : feed_(std::move(feed)), source_(std::move(source)) {
  thread_ = std::thread([this] { run(); });
}

WorldSampler::~WorldSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  feed_->shutdown();
}

void WorldSampler::notify() {
  {
    std::lock_guard lock(mu_);
    poke_ = true;
  }
  wake_.notify_all();
}

void WorldSampler::run() {
  const auto tick = feed_->options().tick;
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    json source;
    try {
      source = source_ ? source_() : json::object();
    } catch (...) {
      // The source could not answer this tick (a busy database): its last figures stand.
    }
    feed_->publish(std::move(source), unix_ms());
    lock.lock();
    wake_.wait_for(lock, tick, [&] { return stop_ || poke_; });
    poke_ = false;
  }
}

}  // namespace orchard::network::world
