#pragma once
// How the HTTP servers (serve::http::GuardedServer) treat connections: threads, timeouts, caps.
// Apart from http_guard.h so that their users need not see cpp-httplib.
#include <chrono>
#include <cstddef>

namespace orchard::serve::http {

struct GuardOptions {
  size_t threads = 16;  // requests handled at once (a streamed answer holds one for its length)
  // A connection without a request in flight is closed after idle_timeout; a request's head must
  // arrive within head_timeout of the connection's wait starting; its body, read before a handler
  // thread is taken, must keep coming at min_body_rate bytes a second on average after a grace of
  // body_timeout from the head (a 1 MiB body has body_timeout + 128 s at the default rate, while a
  // socket trickling a byte a second is dropped at body_timeout). More gets 408.
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds body_timeout{10000};
  size_t min_body_rate = 8192;
  std::chrono::milliseconds write_timeout{5000};  // each write to a client that reads nothing
  size_t max_head_bytes = size_t{64} << 10;      // request line and headers; more gets 431
  size_t max_per_address = 128;                  // open connections from one address; more are refused (503)
  size_t max_connections = 4096;
  // Request bytes the server holds for all its connections together while they arrive (heads as
  // received, a body as its declared length once its head is in), so that many connections each
  // sending a large body cannot take all memory: a request that would take it past gets 503.
  size_t max_buffered_bytes = size_t{256} << 20;
  size_t requests_per_connection = 100;          // keep-alive requests before the server closes it
};

}  // namespace orchard::serve::http
