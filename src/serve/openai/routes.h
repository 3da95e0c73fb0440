#pragma once
// The HTTP layer, thin: routes of the OpenAI API onto the Service, server-sent events for
// streamed answers, and noticing clients that go away (their job is cancelled, freeing its slot).
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics
// and Ollama's API beside them (ollama/routes.h), on the same port.
// Bodies are judged by their content (JSON) whatever their Content-Type says.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/topology.h"
#include "serve/http_options.h"
#include "serve/metrics.h"
#include "serve/openai/service.h"

namespace httplib {
class Server;
}

namespace orchard::serve::openai {

struct HttpOptions {
  int threads = 16;                          // requests handled at once (connections waiting for one take none)
  size_t max_body_bytes = size_t{8} << 20;   // larger bodies get 413
  // How often an answer in progress writes to its client even when there is nothing new (an SSE
  // comment, or whitespace before a JSON body): a write is how a closed connection shows.
  std::chrono::milliseconds probe_interval{500};
  // When not empty, every route but /health wants `Authorization: Bearer KEY` with one of these
  // (401 otherwise), as OpenAI's API does.
  std::vector<std::string> api_keys;
  http::GuardOptions connections;  // timeouts and caps (its threads: `threads`)
  // Set: the cluster page at /cluster.html and its JSON at /cluster (cluster_page_routes.h),
  // this function giving the cluster they show.
  std::function<cluster::Topology()> cluster_topology;
};

class HttpServer {
 public:
  // service and metrics must outlive the server.
  HttpServer(Service& service, Metrics& metrics, const HttpOptions& options);
  ~HttpServer();

  // Binds host:port (port 0: any free port) and returns the port; throws Error when it can't.
  int bind(const std::string& host, int port);
  // Serves until stop(); needs bind() first.
  void listen();
  // From any thread, also before listen() has started: listen() returns soon after, or at once.
  void stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  // httplib's stop() does nothing to a server whose listen loop has not started yet, so a stop
  // that came first would be lost and listen() would serve forever.
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> listening_{false};
};

}  // namespace orchard::serve::openai
