#pragma once
// The World page's HTTP routes, mounted on the coordinator's server:
//   GET /world, /world/          the page (index.html; Cache-Control: no-cache, ETag)
//   GET /world/assets/<file>     bundled scripts and styles, content-hashed names
//                                (Cache-Control: public, max-age=31536000, immutable)
//   GET /v1/world/events         server-sent events: the live document (see docs/world.md)
//   GET /v1/world/history        the throughput history alone, for clients that poll
//   GET /v1/world                the document, only with WorldRoutesOptions::serve_snapshot
//                                (the coordinator normally answers it itself)
// Every page response carries a Content-Security-Policy that allows the coordinator's own origin
// only, so the page cannot fetch anything from elsewhere.
#include <memory>

#include "network/world/world_feed.h"

namespace httplib {
class Server;
}

namespace orchard::network::world {

struct WorldRoutesOptions {
  FeedOptions feed;
  bool serve_snapshot = false;  // also answer GET /v1/world from the feed
};

// Mounts the routes and starts sampling `snapshot` (see WorldSampler). Keep the returned sampler
// for as long as the server serves, and destroy it before whatever `snapshot` reads: afterwards the
// routes answer from the last document and the event streams end. Call notify() on it when a
// machine joins or leaves for an update without waiting for the next tick.
[[nodiscard]] std::unique_ptr<WorldSampler> mount_world_routes(httplib::Server& server, SnapshotFn snapshot,
                                                               const WorldRoutesOptions& options = {});

// The same routes over a feed its owner publishes to by hand (simulations, tests).
void mount_world_routes(httplib::Server& server, std::shared_ptr<WorldFeed> feed,
                        const WorldRoutesOptions& options = {});

}  // namespace orchard::network::world
