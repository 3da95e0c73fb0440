#pragma once
// The cluster at a glance, on the agent's TCP port: `GET /cluster` answers JSON with the
// machines this agent knows (chip, memory, free memory, measured bandwidth and compute), the
// links measured between them (round trip, throughput, transport), and with `?model=PRESET`
// (e.g. llama-70b:q4_k_m, see ModelFacts::from_preset) the planner's split of that model over
// them. Plain HTTP, no secret: it says what the signed announcements already tell anyone on the
// LAN, and changes nothing.
#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "cluster/topology.h"

namespace orchard::cluster {

// The JSON of /cluster, with the model presets the planner knows ("presets": shapes and types, for
// the page's picker); `model` empty: no plan. A model the planner cannot place (unknown,
// too large) gives "plan": {"error": why} rather than failing the whole answer.
nlohmann::json cluster_status(const Topology& t, const std::string& model);

// The answer to `GET /cluster[?model=PRESET]` given its query ("" or "model=PRESET"): 200 and
// cluster_status(), or 400 and {"error"} for any other query. The agent's port and `orchard
// serve`'s (serve/cluster_page_routes.h) answer with it.
std::pair<int, nlohmann::json> cluster_status_answer(const std::string& query, const std::function<Topology()>& topology);

// Whether a new connection starts with an HTTP GET (the agent's binary hello does not): looks
// at its first bytes without taking them, waiting at most `timeout` for them.
bool starts_with_http_get(int fd, std::chrono::milliseconds timeout);

// Answers one HTTP request on fd: /cluster (200, JSON), / and /assets/<file> (the cluster page,
// cluster_page.h), anything else 404, a malformed or oversized head 400; errors are JSON and
// every answer closes the connection. Throws Error / TimeoutError
// naming `from` when the client does not send a head within `timeout`.
void serve_status_request(int fd, const std::string& from, const std::function<Topology()>& topology,
                          std::chrono::milliseconds timeout);

}  // namespace orchard::cluster
