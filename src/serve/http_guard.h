#pragma once
// What both HTTP servers on cpp-httplib (`orchard serve` and the network coordinator) need beyond
// its defaults, written once: a server no slow client can starve, and POST routes that judge a body
// by its content.
#include <httplib.h>

#include <memory>
#include <string>

#include "serve/http_options.h"

namespace orchard::serve::http {

// An httplib::Server whose connections wait for their request's head and body in one polling
// thread, so a socket that sends a byte a second costs a file descriptor, not a handler thread:
// handlers only ever see requests that have wholly arrived, and answer /health while hundreds of
// slow sockets trickle heads or bodies. Each wait is bounded by the options' timeouts and minimum
// body rate; connections per address are capped; a body declared larger than the payload limit
// (set_payload_max_length, kDefaultPayloadBytes unless set) gets 413 before it is read. It
// listens with SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, with which a second server
// on the same port starts and takes half the requests): a port in use is an error at bind.
// Set routes and handlers as on any httplib::Server; leave new_task_queue alone.
class GuardedServer : public httplib::Server {
 public:
  static constexpr size_t kDefaultPayloadBytes = size_t{8} << 20;
  explicit GuardedServer(GuardOptions options = {});
  ~GuardedServer() override;

 private:
  // httplib calls this for each accepted socket (a private virtual: overriding it is allowed).
  bool process_and_close_socket(socket_t sock) override;
  struct Gate;
  std::unique_ptr<Gate> gate_;
};

// Registers a POST route that reads its body in full (up to the server's payload limit) whatever
// Content-Type it claims, so handlers judge a body by its content (JSON): httplib by itself refuses
// a form-encoded body over 8 KiB as too large, and curl -d sends JSON as form-encoded. A multipart
// body gets 415.
void post(httplib::Server& server, const std::string& pattern, httplib::Server::Handler handler);

}  // namespace orchard::serve::http
