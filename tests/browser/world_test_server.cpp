// A stand-in coordinator for the World page's browser test: serves mount_world_routes (with
// GET /v1/world) over a scripted node list that the test changes through a control API:
//   POST   /test/nodes        body: a node object (see world_feed.h); added or replaced, online
//   DELETE /test/nodes/<id>   the node goes offline (it stays registered)
//   POST   /test/totals       body: an object merged into "totals" (tok_s, queue, credits_by_seat...)
//   POST   /test/quit         stops the server
// Usage: world_test_server [--port N] [--history-demo]
//   --port 0 (default): any free port; prints "listening on <port>" first.
//   --history-demo: an hour of made-up throughput in the history, so the chart has a shape.
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "network/world/world_routes.h"

using nlohmann::json;

int main(int argc, char** argv) {
  int port = 0;
  bool history_demo = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--history-demo") == 0) history_demo = true;
  }

  std::mutex mu;
  json nodes = json::array();
  json totals = json::object();

  httplib::Server server;
  namespace world = orchard::network::world;
  world::WorldRoutesOptions options;
  options.serve_snapshot = true;
  // The feed-by-hand overload plus a sampler of our own, so the demo history goes in first.
  auto feed = std::make_shared<world::WorldFeed>(options.feed);
  if (history_demo) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    for (int i = 360; i > 0; --i) {
      const double x = i / 360.0;
      const double tok_s = 90 + 45 * std::sin(x * 9) + 25 * std::sin(x * 23 + 1) + 20 * (1 - x);
      feed->publish(json{{"nodes", json::array()}, {"totals", {{"tok_s", tok_s}, {"jobs_per_min", tok_s / 12}}}},
                    now - i * 10'000LL);
    }
  }
  world::mount_world_routes(server, feed, options);
  auto sampler = std::make_unique<world::WorldSampler>(feed, [&] {
    std::lock_guard lock(mu);
    return json{{"nodes", nodes}, {"totals", totals}};
  });

  auto bad = [](httplib::Response& res, const std::string& what) {
    res.status = 400;
    res.set_content(json{{"error", what}}.dump(), "application/json");
  };
  server.Post("/test/nodes", [&](const httplib::Request& req, httplib::Response& res) {
    json n = json::parse(req.body, nullptr, false);
    if (!n.is_object() || !n.contains("id")) return bad(res, "a node object with an id");
    if (!n.contains("online")) n["online"] = true;
    {
      std::lock_guard lock(mu);
      bool replaced = false;
      for (auto& m : nodes)
        if (m["id"] == n["id"]) m = n, replaced = true;
      if (!replaced) nodes.push_back(n);
    }
    sampler->notify();
    res.set_content("{}", "application/json");
  });
  server.Delete(R"(/test/nodes/([^/]+))", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard lock(mu);
      for (auto& m : nodes)
        if (m["id"] == req.matches[1].str()) m["online"] = false;
    }
    sampler->notify();
    res.set_content("{}", "application/json");
  });
  server.Post("/test/totals", [&](const httplib::Request& req, httplib::Response& res) {
    json t = json::parse(req.body, nullptr, false);
    if (!t.is_object()) return bad(res, "an object");
    {
      std::lock_guard lock(mu);
      totals.update(t);
    }
    sampler->notify();
    res.set_content("{}", "application/json");
  });
  server.Post("/test/quit", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
    server.stop();
  });

  const int bound = port ? (server.bind_to_port("127.0.0.1", port) ? port : -1) : server.bind_to_any_port("127.0.0.1");
  if (bound <= 0) {
    std::fprintf(stderr, "[world_test_server] cannot bind 127.0.0.1:%d\n", port);
    return 1;
  }
  std::printf("listening on %d\n", bound);
  std::fflush(stdout);
  server.listen_after_bind();
  sampler.reset();  // before `nodes` goes: the snapshot callback reads it
  return 0;
}
