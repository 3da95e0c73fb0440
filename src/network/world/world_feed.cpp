#include "network/world/world_feed.h"

#include <algorithm>

namespace orchard::network::world {

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace

WorldFeed::WorldFeed(FeedOptions options) : options_(options) {
  if (options_.tick.count() <= 0) options_.tick = std::chrono::milliseconds(1000);
  if (options_.history_step.count() <= 0) options_.history_step = std::chrono::seconds(10);
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

WorldFeed::Event WorldFeed::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

WorldFeed::Event WorldFeed::wait_past(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return stop_ || latest_.version > seen; });
  return latest_;
}

nlohmann::json WorldFeed::history() const {
  std::lock_guard lock(mu_);
  auto points = nlohmann::json::array();
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

void WorldFeed::complete_totals(nlohmann::json& doc, double jobs_per_min) {
  if (!doc.is_object()) doc = nlohmann::json::object();
  if (!doc.contains("nodes") || !doc["nodes"].is_array()) doc["nodes"] = nlohmann::json::array();
  if (!doc.contains("totals") || !doc["totals"].is_object()) doc["totals"] = nlohmann::json::object();
  auto& totals = doc["totals"];
  int64_t online = 0, memory = 0, jobs = 0;
  for (const auto& n : doc["nodes"]) {
    jobs += static_cast<int64_t>(number_or(n, "jobs_served", 0));
    if (!n.is_object() || !n.value("online", false)) continue;
    ++online;
    memory += static_cast<int64_t>(number_or(n, "memory_bytes", 0));
  }
  auto fill = [&](const char* key, const nlohmann::json& value) {
    if (!totals.contains(key) || totals[key].is_null()) totals[key] = value;
  };
  fill("nodes", doc["nodes"].size());
  fill("online", online);
  fill("memory_bytes", memory);
  fill("jobs_served", jobs);
  fill("jobs_per_min", jobs_per_min);
  fill("queue", 0);
  fill("credits_by_seat", nlohmann::json::object());
}

void WorldFeed::publish(nlohmann::json doc, int64_t t_ms) {
  std::unique_lock lock(mu_);
  if (stop_) return;
  // Jobs per minute from the growth of each node's jobs_served over the last minute; over less
  // than a minute of samples (a fresh start) what was seen is scaled up, from 10 s on.
  if (doc.is_object() && doc.contains("nodes") && doc["nodes"].is_array()) {
    for (const auto& n : doc["nodes"]) {
      if (!n.is_object() || !n.contains("id")) continue;
      const std::string id = n["id"].is_string() ? n["id"].get<std::string>() : n["id"].dump();
      const double jobs = number_or(n, "jobs_served", 0);
      auto [it, fresh] = jobs_seen_.try_emplace(id, jobs);
      if (!fresh) {
        jobs_growth_ += std::max(0.0, jobs - it->second);
        it->second = jobs;
      }
    }
  }
  jobs_window_.emplace_back(t_ms, jobs_growth_);
  while (jobs_window_.size() > 1 && jobs_window_.front().first < t_ms - 60'000) jobs_window_.pop_front();
  const auto [t0, g0] = jobs_window_.front();
  const double span_ms = static_cast<double>(std::max<int64_t>(t_ms - t0, 10'000));
  const double derived_jpm = (jobs_growth_ - g0) * 60'000.0 / span_ms;
  lock.unlock();

  complete_totals(doc, derived_jpm);
  const double tok_s = number_or(doc["totals"], "tok_s", 0);
  const double jpm = number_or(doc["totals"], "jobs_per_min", 0);
  std::string body = doc["nodes"].dump() + doc["totals"].dump();
  doc["sample"] = {t_ms, tok_s, jpm};
  std::string json = doc.dump();

  lock.lock();
  if (stop_) return;
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
  if (latest_.version != 0 && body == last_body_) return;  // a tick with nothing new
  last_body_ = std::move(body);
  latest_.json = std::move(json);
  ++latest_.version;
  lock.unlock();
  changed_.notify_all();
}

WorldSampler::WorldSampler(std::shared_ptr<WorldFeed> feed, SnapshotFn snapshot)
    : feed_(std::move(feed)), snapshot_(std::move(snapshot)) {
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
    try {
      feed_->publish(snapshot_(), now_ms());
    } catch (...) {
      // The coordinator could not answer this tick (a busy database); the last document stands.
    }
    lock.lock();
    wake_.wait_for(lock, tick, [&] { return stop_ || poke_; });
    poke_ = false;
  }
}

}  // namespace orchard::network::world
