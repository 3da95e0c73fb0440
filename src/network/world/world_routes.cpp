#include "network/world/world_routes.h"

#include <httplib.h>

#include <atomic>
#include <string>
#include <string_view>

#include "core/error.h"
#include "network/world/world_assets.h"
#include "serve/web_files.h"

namespace orchard::network::world {

namespace {

const Asset* find_asset(std::string_view path) { return serve::web::find_file(world_assets(), path); }

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
}

std::string sse_event(const char* name, uint64_t id, const std::string& data) {
  std::string out;
  out.reserve(data.size() + 48);
  if (id) out += "id: " + std::to_string(id) + "\n";
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += data;  // JSON from dump() has no newlines, so one data line carries it
  out += "\n\n";
  return out;
}

}  // namespace

void mount_world_routes(httplib::Server& server, std::shared_ptr<WorldFeed> feed, TotalsFn totals) {
  auto page = [](const httplib::Request& req, httplib::Response& res) {
    const Asset* index = find_asset("index.html");
    if (!index) return send_error(res, 500, "[world] the page was not embedded");
    serve::web::send_file(req, res, *index);
  };
  server.Get("/world", page);
  server.Get("/world/", page);
  server.Get(R"(/world/(assets/[A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const Asset* asset = find_asset(req.matches[1].str());
    if (!asset) return send_error(res, 404, "[world] no such asset: " + req.matches[1].str());
    serve::web::send_file(req, res, *asset);
  });

  // Queries answer from the population as of now: what was queued is committed first (cheap when
  // nothing was), so a client sees its own change at once.
  auto answer = [](const httplib::Request& req, httplib::Response& res, auto&& make) {
    try {
      res.set_header("Cache-Control", "no-store");
      serve::web::send_compressed(req, res, make().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                                  "application/json");
    } catch (const FormatError& e) {
      send_error(res, 400, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    }
  };
  server.Get("/v1/world", [feed, totals, answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, [&] {
      nlohmann::json source;
      try {
        source = totals ? totals() : nlohmann::json::object();
      } catch (const std::exception&) {
        // The source is busy: the last figures it gave stand.
      }
      return feed->summary_now(std::move(source));
    });
  });
  server.Get("/v1/world/machines", [feed, answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, [&] {
      const MachineQuery q = MachineQuery::parse(req.params);
      feed->population().commit();
      return feed->population().machines(q);
    });
  });
  server.Get(R"(/v1/world/machines/([^/]+))", [feed, answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, [&] {
      feed->population().commit();
      auto m = feed->population().machine(req.matches[1].str());
      if (m.is_null()) throw FormatError("[world] no machine " + req.matches[1].str());
      return m;
    });
    if (res.status == 400) res.status = 404;
  });
  server.Get("/v1/world/map", [feed, answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, [&] {
      const MapQuery q = MapQuery::parse(req.params);
      feed->population().commit();
      return feed->population().marks(q);
    });
  });
  server.Get("/v1/world/history", [feed](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(feed->history().dump(), "application/json");
  });

  // Server-sent events: the summary on connect, then one delta per change. Each open stream holds
  // one of the server's worker threads, so their number is capped (FeedOptions::max_streams); past
  // the cap the answer is 503 and the page polls /v1/world instead. A stream never waits longer
  // than one tick between writes, so a client that went away is noticed by the next write (at
  // most a tick later) and a server stop ends it.
  server.Get("/v1/world/events", [feed](const httplib::Request&, httplib::Response& res) {
    if (!feed->acquire_stream()) {
      res.set_header("Retry-After", "10");
      return send_error(res, 503, "[world] too many live streams; poll /v1/world");
    }
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    struct State {
      bool started = false;
      uint64_t seen = 0;
      std::atomic<bool> released{false};  // Response is copyable: release the slot once
    };
    auto state = std::make_shared<State>();
    res.set_chunked_content_provider(
        "text/event-stream",
        [feed, state](size_t, httplib::DataSink& sink) {
          if (feed->stopped()) {
            sink.done();
            return true;
          }
          std::string chunk;
          if (!state->started) {
            state->started = true;
            // retry: how long the browser waits before reconnecting after a drop.
            chunk = "retry: 2000\n\n" + sse_event("history", 0, feed->history().dump());
          } else {
            feed->wait_past(state->seen, feed->options().tick);
          }
          for (const auto& event : feed->since(state->seen)) {
            chunk += sse_event(event.name.c_str(), event.version, event.json);
            state->seen = event.version;
          }
          if (chunk.empty()) chunk = ": tick\n\n";  // a comment: keeps proxies open and finds dead clients
          return sink.write(chunk.data(), chunk.size());
        },
        [feed, state](bool) {
          if (!state->released.exchange(true)) feed->release_stream();
        });
  });
}

std::unique_ptr<WorldSampler> mount_world_routes(httplib::Server& server, std::shared_ptr<Population> population,
                                                 TotalsFn totals, const WorldRoutesOptions& options) {
  auto feed = std::make_shared<WorldFeed>(std::move(population), options.feed);
  mount_world_routes(server, feed, totals);
  return std::make_unique<WorldSampler>(std::move(feed), std::move(totals));
}

}  // namespace orchard::network::world
