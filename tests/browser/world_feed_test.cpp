// The World page's live feed and routes without a browser: totals completion, history steps,
// jobs per minute, the stream cap, and that event streams neither outlive a client nor block a
// server stop.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "network/world/world_assets.h"
#include "network/world/world_routes.h"

namespace world = orchard::network::world;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

json node(const std::string& id, bool online, int64_t gb, int64_t jobs, double tok_s = 0) {
  return {{"id", id}, {"chip", "M2 Max"}, {"memory_bytes", gb << 30}, {"region", "Lisbon, PT"}, {"seat", "shared"},
          {"pod", ""}, {"online", online}, {"jobs_served", jobs}, {"tok_s", tok_s}};
}

}  // namespace

TEST(WorldFeed, CompletesMissingTotalsAndKeepsTheCoordinators) {
  json doc = {{"nodes", {node("a", true, 64, 3, 10), node("b", false, 32, 4, 5), node("c", true, 16, 0, 2.5)}},
              {"totals", {{"queue", 7}, {"tok_s", 99.0}}}};
  world::WorldFeed::complete_totals(doc, 1.5);
  const auto& t = doc["totals"];
  EXPECT_EQ(t["online"], 2);
  EXPECT_EQ(t["nodes"], 3);
  EXPECT_EQ(t["memory_bytes"], (64LL + 16) << 30);
  EXPECT_EQ(t["jobs_served"], 7);
  EXPECT_EQ(t["tok_s"], 99.0);  // the coordinator's figure wins
  EXPECT_EQ(t["queue"], 7);
  EXPECT_EQ(t["jobs_per_min"], 1.5);
  EXPECT_TRUE(t["credits_by_seat"].is_object());

  // Without the coordinator's output figure there is none: the nodes' tok_s are the speeds of
  // their last jobs, not output now.
  json bare = {{"nodes", {node("a", true, 64, 3, 10), node("c", true, 16, 0, 2.5)}}};
  world::WorldFeed::complete_totals(bare, 0);
  EXPECT_FALSE(bare["totals"].contains("tok_s")) << bare["totals"].dump();

  json junk = "not an object";
  world::WorldFeed::complete_totals(junk, 0);
  EXPECT_TRUE(junk["nodes"].is_array());
  EXPECT_EQ(junk["totals"]["online"], 0);
}

TEST(WorldFeed, VersionsOnlyOnChangeAndAveragesHistorySteps) {
  world::WorldFeed feed;
  const int64_t t0 = 1'700'000'000'000;  // a multiple of 10 s
  json a = {{"nodes", {node("a", true, 8, 0)}}, {"totals", {{"tok_s", 10.0}}}};
  feed.publish(a, t0);
  EXPECT_EQ(feed.latest().version, 1u);
  feed.publish(a, t0 + 1000);  // same document: no new version
  EXPECT_EQ(feed.latest().version, 1u);
  a["totals"]["tok_s"] = 40.0;
  feed.publish(a, t0 + 2000);
  EXPECT_EQ(feed.latest().version, 2u);
  feed.publish(a, t0 + 10'000);  // next step
  auto h = feed.history();
  EXPECT_EQ(h["step_s"], 10);
  ASSERT_EQ(h["points"].size(), 2u);
  EXPECT_EQ(h["points"][0][0], t0);
  EXPECT_DOUBLE_EQ(h["points"][0][1].get<double>(), 20.0);  // mean of 10, 10, 40
  EXPECT_DOUBLE_EQ(h["points"][1][1].get<double>(), 40.0);
  auto latest = json::parse(feed.latest().json);
  EXPECT_EQ(latest["sample"][1], 40.0);

  // An hour later the old points are gone.
  feed.publish(a, t0 + 3600'000 + 10'000);
  EXPECT_EQ(feed.history()["points"].size(), 1u);
}

TEST(WorldFeed, JobsPerMinuteCountsGrowthNotNewcomers) {
  world::WorldFeed feed;
  const int64_t t0 = 1'700'000'000'000;
  feed.publish({{"nodes", {node("a", true, 8, 100)}}}, t0);
  // b joins with 500 jobs behind it: not growth. a serves 6 in 30 s: 12 per minute.
  feed.publish({{"nodes", {node("a", true, 8, 106), node("b", true, 8, 500)}}}, t0 + 30'000);
  auto doc = json::parse(feed.latest().json);
  EXPECT_DOUBLE_EQ(doc["totals"]["jobs_per_min"].get<double>(), 12.0);
}

TEST(WorldFeed, StreamCapAndShutdown) {
  world::FeedOptions options;
  options.max_streams = 2;
  world::WorldFeed feed(options);
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

TEST(WorldRoutes, ServesThePageAndStreamsWithoutBlockingTheServer) {
  ASSERT_FALSE(world::world_assets().empty());
  httplib::Server server;
  world::WorldRoutesOptions options;
  options.serve_snapshot = true;
  options.feed.tick = 200ms;
  options.feed.max_streams = 1;
  std::atomic<int> calls{0};
  auto sampler = world::mount_world_routes(
      server,
      [&] {
        ++calls;
        return json{{"nodes", {node("a", true, 64, 1)}}, {"totals", json::object()}};
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

  // A stream: the history and the document arrive; the client hangs up after the first world
  // event, and its slot comes back within a tick or two.
  std::string got;
  httplib::Client streamer("127.0.0.1", port);
  auto res = streamer.Get("/v1/world/events", [&](const char* data, size_t n) {
    got.append(data, n);
    return got.find("event: world") == std::string::npos;  // false: hang up
  });
  EXPECT_NE(got.find("event: history"), std::string::npos);
  EXPECT_NE(got.find("event: world"), std::string::npos);
  bool reacquired = false;  // the only slot is free again once the server noticed the hang-up
  for (int i = 0; i < 30 && !reacquired; ++i) {
    httplib::Client c2("127.0.0.1", port);
    std::string head;
    auto r = c2.Get("/v1/world/events", [&](const char* data, size_t n) {
      head.append(data, n);
      return false;
    });
    reacquired = !head.empty();
    if (!reacquired) std::this_thread::sleep_for(100ms);  // 503 meanwhile
  }
  EXPECT_TRUE(reacquired);

  // A stream left open does not keep the server from stopping.
  std::atomic<bool> stream_ended{false};
  std::thread holder([&] {
    httplib::Client c3("127.0.0.1", port);
    c3.set_read_timeout(10, 0);
    c3.Get("/v1/world/events", [&](const char*, size_t) { return true; });
    stream_ended = true;
  });
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  sampler.reset();  // the feed shuts down: the stream ends within a tick
  server.stop();
  listener.join();
  holder.join();
  EXPECT_TRUE(stream_ended);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_GT(calls.load(), 0);
}
