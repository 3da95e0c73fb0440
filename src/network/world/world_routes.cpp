#include "network/world/world_routes.h"

#include <httplib.h>

#include <atomic>
#include <string>
#include <string_view>

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

void mount_world_routes(httplib::Server& server, std::shared_ptr<WorldFeed> feed, const WorldRoutesOptions& options) {
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

  server.Get("/v1/world/history", [feed](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(feed->history().dump(), "application/json");
  });

  if (options.serve_snapshot) {
    server.Get("/v1/world", [feed](const httplib::Request&, httplib::Response& res) {
      auto event = feed->latest();
      if (event.version == 0) {
        nlohmann::json empty = nlohmann::json::object();
        WorldFeed::complete_totals(empty, 0);
        event.json = empty.dump();
      }
      res.set_header("Cache-Control", "no-store");
      res.set_content(event.json, "application/json");
    });
  }

  // Server-sent events. Each open stream holds one of the server's worker threads, so their number
  // is capped (FeedOptions::max_streams); past the cap the answer is 503 and the page polls
  // /v1/world instead. A stream never waits longer than one tick between writes, so a client that
  // went away is noticed by the next write (at most a tick later) and a server stop ends it.
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
          if (!state->started) {
            state->started = true;
            // retry: how long the browser waits before reconnecting after a drop.
            std::string head = "retry: 2000\n\n" + sse_event("history", 0, feed->history().dump());
            auto event = feed->latest();
            if (event.version) {
              head += sse_event("world", event.version, event.json);
              state->seen = event.version;
            }
            return sink.write(head.data(), head.size());
          }
          auto event = feed->wait_past(state->seen, feed->options().tick);
          std::string chunk;
          if (event.version > state->seen) {
            chunk = sse_event("world", event.version, event.json);
            state->seen = event.version;
          } else {
            chunk = ": tick\n\n";  // a comment: keeps proxies open and finds dead clients
          }
          return sink.write(chunk.data(), chunk.size());
        },
        [feed, state](bool) {
          if (!state->released.exchange(true)) feed->release_stream();
        });
  });
}

std::unique_ptr<WorldSampler> mount_world_routes(httplib::Server& server, SnapshotFn snapshot,
                                                 const WorldRoutesOptions& options) {
  auto feed = std::make_shared<WorldFeed>(options.feed);
  mount_world_routes(server, feed, options);
  return std::make_unique<WorldSampler>(std::move(feed), std::move(snapshot));
}

}  // namespace orchard::network::world
