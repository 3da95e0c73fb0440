#pragma once
// The coordinator over HTTP (cpp-httplib, serve::http::GuardedServer: no slow client starves the
// rest): a thin mapping of routes onto Coordinator calls.
//   clients (Authorization: Bearer KEY): POST /v1/chat/completions, GET /v1/models,
//     POST /v1/jobs, GET /v1/jobs/{id}, GET /v1/jobs/{id}/stream (SSE), DELETE /v1/jobs/{id}
//   public: GET /v1/world, GET /health
//   nodes (Ed25519-signed, see identity.h): POST /v1/nodes/{register,heartbeat,poll,progress,
//     complete,hand-back}, GET /v1/ledger
#include <memory>
#include <string>

#include "network/coordinator.h"
#include "serve/http_options.h"

namespace orchard::network {

class HttpApi {
 public:
  // window_ms: how far a signed request's timestamp may be from now. connections: timeouts and
  // caps of client connections (its default threads: enough for long polls of many nodes).
  HttpApi(Coordinator& coordinator, int64_t window_ms = 60000, serve::http::GuardOptions connections = default_connections());
  static serve::http::GuardOptions default_connections();
  ~HttpApi();
  // Binds (port 0: any free port) and returns the port; serve() then blocks until stop().
  int bind(const std::string& host, int port);
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchard::network
