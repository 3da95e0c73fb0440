#pragma once
// The live data behind the World page, with no HTTP in it (world_routes.h is the thin layer).
//
// WorldFeed holds the latest /v1/world document (totals completed), an hour of throughput
// history, and wakes the event streams when the document changes. WorldSampler owns one thread
// that asks the coordinator for the document once per tick (or at once after notify()) and
// publishes it: a hundred open pages cost one snapshot per second, and no request thread ever
// calls the coordinator.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace orchard::network::world {

// Returns the /v1/world document:
//   {"nodes": [{"id", "chip", "memory_bytes", "region", "seat", "pod", "online", "jobs_served",
//               "tok_s", "uptime_s"? or "online_since"? (Unix ms)}],
//    "totals": {"tok_s"?, "jobs_per_min"?, "queue"?, "credits_by_seat"? {seat: credits}, ...}}
// Called from the sampler's thread only, once per tick; must be safe against the coordinator's own
// threads. May throw: the feed keeps the last good document.
using SnapshotFn = std::function<nlohmann::json()>;

struct FeedOptions {
  std::chrono::milliseconds tick{1000};     // sampling period, and the event streams' keep-alive
  std::chrono::seconds history_step{10};    // one history point per step (the mean of its samples)
  std::chrono::seconds history_span{3600};  // how far back the history goes
  int max_streams = 4;                      // concurrent event streams (each holds a server thread)
};

// Totals the page needs that the coordinator may leave out are derived (see docs/world.md):
//   nodes, online, memory_bytes (online machines), jobs_served: from "nodes";
//   jobs_per_min: growth of the sum of jobs_served over the last minute;
//   queue: 0; credits_by_seat: {}. tok_s (output over the last minute) only the coordinator
//   knows: a node's tok_s is the speed of its last job, and summing those would report output
//   from machines that are idle.
// The coordinator's own figures always win. Thread-safe.
class WorldFeed {
 public:
  explicit WorldFeed(FeedOptions options = {});

  // Takes a document sampled at `t_ms` (Unix ms): completes its totals, adds it to the history,
  // and wakes the streams when nodes or totals changed.
  void publish(nlohmann::json doc, int64_t t_ms);
  // Ends every event stream (within one tick); later publish() calls are ignored. Idempotent.
  void shutdown();
  bool stopped() const;

  struct Event {
    uint64_t version = 0;  // +1 each time nodes or totals change; 0: nothing published yet
    std::string json;      // {"nodes", "totals", "sample": [t_ms, tok_s, jobs_per_min]}
  };
  Event latest() const;
  // Blocks until the version is past `seen`, `timeout` passes, or shutdown; returns latest().
  Event wait_past(uint64_t seen, std::chrono::milliseconds timeout) const;
  // {"step_s": 10, "points": [[t_ms, tok_s, jobs_per_min], ...]}, oldest first, at most the span.
  nlohmann::json history() const;

  // Event-stream slots: false when max_streams are open or the feed is stopped.
  bool acquire_stream();
  void release_stream();
  const FeedOptions& options() const { return options_; }

  // Fills in missing totals; `jobs_per_min` is used when the document has none. Pure.
  static void complete_totals(nlohmann::json& doc, double jobs_per_min);

 private:
  FeedOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  bool stop_ = false;
  int streams_ = 0;
  Event latest_;
  std::string last_body_;  // nodes + totals, to tell a change from a tick
  struct Point {
    int64_t t_ms = 0;
    double tok_s = 0, jobs_per_min = 0;
    int n = 0;  // samples averaged into this point
  };
  std::deque<Point> history_;
  // Jobs per minute when the coordinator does not say: jobs_served growth summed over the nodes
  // seen before (a node that joins with a count adds nothing), as (t_ms, cumulative growth).
  std::unordered_map<std::string, double> jobs_seen_;
  double jobs_growth_ = 0;
  std::deque<std::pair<int64_t, double>> jobs_window_;
};

// Samples `snapshot` into `feed` every tick on its own thread. The destructor stops and joins the
// thread (after it returns, `snapshot` is never called again) and then shuts the feed down, so
// destroy the sampler before whatever `snapshot` reads.
class WorldSampler {
 public:
  WorldSampler(std::shared_ptr<WorldFeed> feed, SnapshotFn snapshot);
  ~WorldSampler();
  WorldSampler(const WorldSampler&) = delete;
  WorldSampler& operator=(const WorldSampler&) = delete;

  // A machine joined or left, a job finished: sample now rather than at the next tick.
  void notify();
  WorldFeed& feed() { return *feed_; }
  const std::shared_ptr<WorldFeed>& feed_ptr() const { return feed_; }

 private:
  void run();

  std::shared_ptr<WorldFeed> feed_;
  SnapshotFn snapshot_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool poke_ = false;
  std::thread thread_;
};

}  // namespace orchard::network::world
