#pragma once
// The live data behind the World page, with no HTTP in it (world_routes.h is the thin layer).
//
// The machines are a Population (population.h) that the source (the coordinator, a simulation)
// writes changes into as they happen. WorldFeed adds what only the source knows (tokens per second,
// the queue, credits), an hour of throughput history, and the event stream's updates: once per
// tick it commits the population and, when something changed, publishes a delta (totals, the
// regions that changed, which machines did), so an open page costs the same at 100,000 machines
// as at ten. WorldSampler owns the thread that does this; no request thread waits on the source.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "network/world/population.h"

namespace orchard::network::world {

// The source's own totals, all optional: {"tok_s", "jobs_per_min", "queue", "credits_by_seat"
// {seat: credits}, "models", "pods", "simulation" {...}}. Cheap (no machine list); called from the
// sampler's thread once a tick and by GET /v1/world; must be safe against the source's threads.
// May throw: the feed keeps the last good figures.
using TotalsFn = std::function<nlohmann::json()>;

struct FeedOptions {
  std::chrono::milliseconds tick{1000};     // sampling period, and the event streams' keep-alive
  std::chrono::seconds history_step{10};    // one history point per step (the mean of its samples)
  std::chrono::seconds history_span{3600};  // how far back the history goes
  int max_streams = 4;                      // concurrent event streams (each holds a server thread)
  size_t max_deltas = 32;                   // deltas kept for a stream that fell behind
};

class WorldFeed {
 public:
  explicit WorldFeed(std::shared_ptr<Population> population, FeedOptions options = {});

  Population& population() { return *population_; }
  const std::shared_ptr<Population>& population_ptr() const { return population_; }

  // One tick at `t_ms` (Unix ms): commits the population, completes the totals with `source`'s,
  // adds the sample to the history, and when machines or totals changed publishes a delta.
  void publish(nlohmann::json source, int64_t t_ms);
  // GET /v1/world: the summary as of now (the population committed first, `source` fresh), with
  // totals completed: {"version", "totals", "regions", "chips", "seats", "simulation"?}.
  nlohmann::json summary_now(nlohmann::json source);
  // Ends every event stream (within one tick); later publish() calls are ignored. Idempotent.
  void shutdown();
  bool stopped() const;

  struct Event {
    uint64_t version = 0;  // +1 per delta; 0: nothing published yet
    std::string name;      // "summary" or "delta"
    std::string json;
  };
  // What a stream that has seen `seen` sends next: the deltas after it, or (when it is further
  // behind than the kept deltas, or new) one "summary" event. Empty when it is up to date.
  std::vector<Event> since(uint64_t seen) const;
  // Blocks until the version is past `seen`, `timeout` passes, or shutdown.
  void wait_past(uint64_t seen, std::chrono::milliseconds timeout) const;
  uint64_t version() const;
  // {"step_s": 10, "points": [[t_ms, tok_s, jobs_per_min], ...]}, oldest first, at most the span.
  nlohmann::json history() const;

  // Event-stream slots: false when max_streams are open or the feed is stopped.
  bool acquire_stream();
  void release_stream();
  const FeedOptions& options() const { return options_; }

  // Completes `totals` (the population's) with `source`'s figures, which win, and fills what
  // neither has: jobs_per_min (`jobs_per_min`), tok_s null, queue 0, credits_by_seat {}. Pure.
  static void complete_totals(nlohmann::json& totals, const nlohmann::json& source, double jobs_per_min);

 private:
  nlohmann::json summary_locked(const nlohmann::json& summary, const nlohmann::json& source) const;

  std::shared_ptr<Population> population_;
  FeedOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  bool stop_ = false;
  int streams_ = 0;
  uint64_t version_ = 0;
  uint64_t through_ = 0;  // the population's version the last delta reached
  std::string summary_json_;                        // the latest full summary, with its sample
  std::deque<std::pair<uint64_t, std::string>> deltas_;  // (version, delta), oldest first
  std::string last_totals_;                         // to tell a change from a tick
  nlohmann::json last_source_ = nlohmann::json::object();
  struct Point {
    int64_t t_ms = 0;
    double tok_s = 0, jobs_per_min = 0;
    int n = 0;  // samples averaged into this point
  };
  std::deque<Point> history_;
  // Jobs per minute when the source does not say: growth of the jobs served over the last minute.
  std::deque<std::pair<int64_t, int64_t>> jobs_window_;  // (t_ms, jobs served)
  double derived_jpm_ = 0;
};

// Ticks `feed` on its own thread with `source`'s totals. The destructor stops and joins the
// thread (after it returns, `source` is never called again) and then shuts the feed down, so
// destroy the sampler before whatever `source` reads.
class WorldSampler {
 public:
  WorldSampler(std::shared_ptr<WorldFeed> feed, TotalsFn source);
  ~WorldSampler();
  WorldSampler(const WorldSampler&) = delete;
  WorldSampler& operator=(const WorldSampler&) = delete;

  // Something changed that open pages should see now rather than at the next tick.
  void notify();
  WorldFeed& feed() { return *feed_; }
  const std::shared_ptr<WorldFeed>& feed_ptr() const { return feed_; }

 private:
  void run();

  std::shared_ptr<WorldFeed> feed_;
  TotalsFn source_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool poke_ = false;
  std::thread thread_;
};

int64_t unix_ms();

}  // namespace orchard::network::world
