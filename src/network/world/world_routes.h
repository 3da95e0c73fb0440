#pragma once
// The World page's HTTP routes, mounted on the coordinator's server (or a simulation's):
//   GET /world, /world/          the page (index.html; Cache-Control: no-cache, ETag)
//   GET /world/assets/<file>     bundled scripts and styles, content-hashed names
//                                (Cache-Control: public, max-age=31536000, immutable)
//   GET /v1/world                the summary: totals, one entry per region, chips, seats
//   GET /v1/world/machines       a page of machines, filtered and sorted (MachineQuery)
//   GET /v1/world/machines/<id>  one machine
//   GET /v1/world/map            the marks of a map view, at most a budget (MapQuery)
//   GET /v1/world/events         server-sent events: the summary, then deltas (docs/world.md)
//   GET /v1/world/history        the throughput history alone, for clients that poll
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
};

// Mounts the routes over `population` and starts ticking the feed with `totals` (see
// WorldSampler). Keep the returned sampler for as long as the server serves, and destroy it before
// whatever `totals` reads: afterwards the routes answer from the population and the last figures,
// and the event streams end. Call notify() on it for an update without waiting for the next tick.
[[nodiscard]] std::unique_ptr<WorldSampler> mount_world_routes(httplib::Server& server,
                                                               std::shared_ptr<Population> population,
                                                               TotalsFn totals, const WorldRoutesOptions& options = {});

// The same routes over a feed its owner ticks by hand (tests). `totals` answers GET /v1/world.
void mount_world_routes(httplib::Server& server, std::shared_ptr<WorldFeed> feed, TotalsFn totals);

}  // namespace orchard::network::world
