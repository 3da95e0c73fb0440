#include "network/http_api.h"

#include <httplib.h>

#include <atomic>
#include <fmt/format.h>
#include <limits>
#include <mutex>
#include <thread>

#include "network/identity.h"
#include "network/world/world_routes.h"
#include "serve/http_guard.h"
#include "serve/openai/schema.h"

namespace orchard::network {

using nlohmann::json;

namespace {

// Long-polls and streams hold a server thread each: enough threads for many nodes and clients.
constexpr size_t kServerThreads = 128;
// Nodes behind one NAT share an address: each holds a long poll and sends heartbeats.
constexpr size_t kConnectionsPerAddress = 256;
constexpr int64_t kMaxPollMs = 30000;
constexpr auto kStreamStep = std::chrono::seconds(15);  // an SSE comment keeps idle streams alive
constexpr auto kChatDeadline = std::chrono::minutes(10);
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr int64_t kLeaderReadMs = 1000;

void send_json(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  // The OpenAI error shape `orchard serve` answers with, so OpenAI clients show the message.
  res.status = status;
  res.set_content(serve::openai::error_body(serve::openai::api_error(status, message)), "application/json");
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded()) throw ApiError(400, "[network] the body is not JSON");
  if (!j.is_object()) throw ApiError(400, fmt::format("[network] the body must be a JSON object, not {}", j.type_name()));
  return j;
}

ApiError bad_field(const char* name, const char* expected) {
  return ApiError(400, fmt::format("[network] the body needs \"{}\" as {}", name, expected));
}

std::string string_field(const json& body, const char* name) {
  if (!body.contains(name) || !body[name].is_string()) throw bad_field(name, "a string");
  return body[name].get<std::string>();
}

int64_t integer_field(const json& body, const char* name, int64_t lo, int64_t hi) {
  if (!body.contains(name) || !body[name].is_number_integer() ||
      (body[name].is_number_unsigned() && body[name].get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      body[name].get<int64_t>() < lo || body[name].get<int64_t>() > hi)
    throw bad_field(name, fmt::format("an integer in [{}, {}]", lo, hi).c_str());
  return body[name].get<int64_t>();
}

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

}  // namespace

struct HttpApi::Impl {
  Coordinator& coordinator;
  RequestGuard guard;
  serve::http::GuardedServer server;
  std::atomic<bool> stopping{false};
  std::atomic<bool> listening{false};  // serve() is running (see stop())
  // The World page's live feed: ticks once a second over the population the coordinator writes into.
  std::unique_ptr<world::WorldSampler> world_feed;

  // Followers send nodes to the leader: its address, read from the store at most this often.
  std::mutex leader_mu;
  std::string leader_url;
  int64_t leader_read_at = 0;
  std::atomic<int64_t> nonces_forgotten_at{0};

  Impl(Coordinator& c, int64_t window_ms, serve::http::GuardOptions connections)
      : coordinator(c), guard(window_ms, wall_clock_ms()), server(connections) {
    // On PostgreSQL several coordinators may share the database and a node may reach any of
    // them (after a leader changes): a replay is refused whichever one saw the request first.
    if (c.store().backend() == "postgres")
      guard.share([this](const std::string& id, int64_t ts) {
        Store& store = coordinator.store();
        const int64_t now = wall_clock_ms(), window = guard.window_ms();
        int64_t last = nonces_forgotten_at;
        if (now - last > window && nonces_forgotten_at.compare_exchange_strong(last, now))
          store.forget_nonces(now - 2 * window);
        return store.remember_nonce(id, ts);
      });
  }

  std::string current_leader() {
    std::lock_guard lock(leader_mu);
    const int64_t now = wall_clock_ms();
    if (leader_url.empty() || now - leader_read_at > kLeaderReadMs) {
      leader_url = coordinator.store().leader_url();
      leader_read_at = now;
    }
    return leader_url;
  }

  // A follower answers what is the leader's (nodes, the ledger they read, the World's live
  // state) with a redirect there, before any signature or nonce is checked: the leader checks
  // them once.
  bool leader_only(const std::string& path) {
    return path.starts_with("/v1/nodes/") || path == "/v1/ledger" || path.starts_with("/v1/world") ||
           path == "/world" || path.starts_with("/world/");
  }

  // Wraps a handler: ApiError and Error become JSON error responses.
  template <typename F>
  httplib::Server::Handler wrap(F f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e.status(), e.what());
      } catch (const json::exception& e) {
        // A value of the wrong type reached a handler: the request's fault, whatever field it was.
        send_error(res, 400, fmt::format("[network] bad request: {}", e.what()));
      } catch (const std::exception& e) {
        send_error(res, 500, e.what());
      }
    };
  }

  KeyRecord client(const httplib::Request& req) {
    std::string auth = req.get_header_value("Authorization");
    if (!auth.starts_with("Bearer ")) throw ApiError(401, "[network] missing API key (Authorization: Bearer KEY)");
    return coordinator.authenticate(auth.substr(7));
  }

  std::string node(const httplib::Request& req) {
    SignedHeaders h{req.get_header_value(kNodeHeader), req.get_header_value(kTimestampHeader),
                    req.get_header_value(kNonceHeader), req.get_header_value(kSignatureHeader)};
    std::string why = guard.check(h, req.method, req.path, req.body, wall_clock_ms());
    if (!why.empty()) throw ApiError(401, "[network] node request refused: " + why);
    return h.node;
  }

  // Streams a job's output as server-sent events; `frame` turns (text, done, finish) into events.
  void stream(httplib::Response& res, const KeyRecord& key, const std::string& id,
              std::function<std::string(const Output&)> frame) {
    auto offset = std::make_shared<size_t>(0);
    auto finished = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, key, id, offset, finished, frame](size_t, httplib::DataSink& sink) {
          if (*finished || stopping) {
            sink.done();
            return true;
          }
          Output out = coordinator.wait_output(key, id, *offset, std::chrono::steady_clock::now() + kStreamStep);
          *offset += out.text.size();
          std::string data = out.text.empty() && !out.done ? std::string(": waiting\n\n") : frame(out);
          if (!sink.write(data.data(), data.size())) return false;  // the client went away
          if (out.done) *finished = true;
          return true;
        });
  }

  void routes() {
    // A response goes out as headers then body: with Nagle's algorithm the body waits for the
    // client's delayed ACK (40 ms on Linux) on every keep-alive request.
    server.set_tcp_nodelay(true);
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (coordinator.leading() || !leader_only(req.path)) return httplib::Server::HandlerResponse::Unhandled;
      std::string leader;
      try {
        leader = current_leader();
      } catch (const std::exception& e) {
        send_error(res, 503, fmt::format("[network] cannot read which coordinator leads: {}", e.what()));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (leader.empty()) {
        send_error(res, 503, "[network] no coordinator leads yet; try again in a second");
        return httplib::Server::HandlerResponse::Handled;
      }
      // 307 keeps the method and the body (a node's POST and its signature stay valid).
      res.status = 307;
      res.set_header("Location", leader + req.target);
      return httplib::Server::HandlerResponse::Handled;
    });
    // Unknown routes and bodies over the limit get the same error shape as everything else.
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      send_error(res, res.status,
                 res.status == 404   ? fmt::format("[network] no route {} {}", req.method, req.path)
                 : res.status == 413 ? std::string("[network] the request body is too large")
                                     : fmt::format("[network] HTTP status {}", res.status));
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, {{"ok", true}}); });
    // The World: the coordinator queues each machine's changes into the population as they happen.
    auto population = std::make_shared<world::Population>();
    coordinator.attach_world(population);
    world_feed = world::mount_world_routes(server, population, [this] { return coordinator.world_totals(); });
    server.Get("/v1/models", wrap([this](const httplib::Request& req, httplib::Response& res) {
                 client(req);
                 send_json(res, coordinator.models());
               }));
    serve::http::post(server, "/v1/jobs", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  send_json(res, coordinator.submit(client(req), Submission::from_json(parse_body(req))), 201);
                }));
    server.Get(R"(/v1/jobs/([A-Za-z0-9-]+))", wrap([this](const httplib::Request& req, httplib::Response& res) {
                 send_json(res, coordinator.job_json(client(req), req.matches[1]));
               }));
    server.Delete(R"(/v1/jobs/([A-Za-z0-9-]+))", wrap([this](const httplib::Request& req, httplib::Response& res) {
                    send_json(res, coordinator.cancel(client(req), req.matches[1]));
                  }));
    server.Get(R"(/v1/jobs/([A-Za-z0-9-]+)/stream)", wrap([this](const httplib::Request& req, httplib::Response& res) {
                 KeyRecord key = client(req);
                 std::string id = req.matches[1];
                 coordinator.job_json(key, id);  // 404 before the stream starts
                 stream(res, key, id, [](const Output& o) {
                   std::string s = o.text.empty() ? "" : sse({{"text", o.text}});
                   if (o.done) s += sse({{"done", true}, {"state", o.state}, {"finish_reason", o.finish_reason}});
                   return s;
                 });
               }));
    serve::http::post(server, "/v1/chat/completions", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  chat(req, res);
                }));
    // Nodes
    serve::http::post(server, "/v1/nodes/register", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  coordinator.register_node(id, parse_body(req));
                  send_json(res, {{"ok", true}, {"id", id}});
                }));
    serve::http::post(server, "/v1/nodes/heartbeat", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  send_json(res, coordinator.heartbeat(id, parse_body(req)));
                }));
    serve::http::post(server, "/v1/nodes/poll", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  json b = parse_body(req);
                  int64_t wait = b.contains("wait_ms") ? integer_field(b, "wait_ms", 0, kMaxPollMs) : 20000;
                  json job = coordinator.poll(id, std::chrono::steady_clock::now() + std::chrono::milliseconds(wait));
                  send_json(res, {{"job", job}});
                }));
    serve::http::post(server, "/v1/nodes/progress", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  json b = parse_body(req);
                  coordinator.progress(id, string_field(b, "job"), integer_field(b, "attempt", 1, kMaxInt),
                                       b.contains("offset") ? integer_field(b, "offset", 0, kMaxInt) : 0,
                                       b.contains("text") ? string_field(b, "text") : "");
                  send_json(res, {{"ok", true}});
                }));
    serve::http::post(server, "/v1/nodes/complete", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  json b = parse_body(req);
                  if (!b.contains("result") || !b["result"].is_object()) throw bad_field("result", "an object");
                  send_json(res, coordinator.complete(id, string_field(b, "job"), integer_field(b, "attempt", 1, kMaxInt),
                                                      b["result"]));
                }));
    serve::http::post(server, "/v1/nodes/hand-back", wrap([this](const httplib::Request& req, httplib::Response& res) {
                  std::string id = node(req);
                  json b = parse_body(req);
                  coordinator.hand_back(id, string_field(b, "job"), integer_field(b, "attempt", 1, kMaxInt),
                                        b.contains("reason") ? string_field(b, "reason").substr(0, 200) : "");
                  send_json(res, {{"ok", true}});
                }));
    server.Get("/v1/ledger", wrap([this](const httplib::Request& req, httplib::Response& res) {
                 send_json(res, coordinator.node_status(node(req)));
               }));
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    KeyRecord key = client(req);
    json body = parse_body(req);
    if (!body.contains("messages")) throw ApiError(400, "[network] chat completions need \"messages\"");
    Submission submission = Submission::from_json(body);
    const std::string model = submission.model;
    json job = coordinator.submit(key, std::move(submission));
    std::string id = job["id"];
    std::string cid = "chatcmpl-" + id;
    int64_t created = wall_clock_ms() / 1000;
    if (body.value("stream", false)) {
      auto first = std::make_shared<bool>(true);
      stream(res, key, id, [=](const Output& o) {
        auto chunk = [&](json delta, json finish) {
          return sse({{"id", cid},
                      {"object", "chat.completion.chunk"},
                      {"created", created},
                      {"model", model},
                      {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}});
        };
        std::string s;
        if (*first) {
          s += chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
          *first = false;
        }
        if (!o.text.empty()) s += chunk({{"content", o.text}}, nullptr);
        if (o.done) {
          s += chunk(json::object(), o.finish_reason == "length" ? "length" : "stop");
          s += "data: [DONE]\n\n";
        }
        return s;
      });
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + kChatDeadline;
    Output out;
    do {
      out = coordinator.wait_output(key, id, 0, std::min(deadline, std::chrono::steady_clock::now() + kStreamStep));
    } while (!out.done && std::chrono::steady_clock::now() < deadline && !stopping);
    if (!out.done) throw ApiError(504, "[network] the job did not finish in time; poll /v1/jobs/" + id);
    json done = coordinator.job_json(key, id);
    if (done["state"] != "completed") throw ApiError(502, "[network] job " + id + " ended " + done["state"].get<std::string>());
    send_json(res, {{"id", cid},
                    {"object", "chat.completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", json::array({{{"index", 0},
                                              {"message", {{"role", "assistant"}, {"content", done["text"]}}},
                                              {"finish_reason", done.value("finish_reason", "stop")}}})},
                    {"usage", done["usage"]}});
  }
};

HttpApi::HttpApi(Coordinator& coordinator, int64_t window_ms, serve::http::GuardOptions connections)
    : impl_(std::make_unique<Impl>(coordinator, window_ms, connections)) {
  impl_->routes();
}

serve::http::GuardOptions HttpApi::default_connections() {
  serve::http::GuardOptions o;
  o.threads = kServerThreads;
  o.max_per_address = kConnectionsPerAddress;
  return o;
}

HttpApi::~HttpApi() {
  stop();
  impl_->coordinator.attach_world(nullptr);  // it outlives the population's feed
}

int HttpApi::bind(const std::string& host, int port) {
  int bound = port == 0 ? impl_->server.bind_to_any_port(host) : (impl_->server.bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw Error(error_message("network", "cannot listen on {}:{} (in use, or not an address of this machine?)", host, port));
  return bound;
}

void HttpApi::serve() {
  impl_->listening = true;
  if (!impl_->stopping) impl_->server.listen_after_bind();
  impl_->listening = false;
}

void HttpApi::stop() {
  impl_->stopping = true;
  impl_->coordinator.end_waits();  // the handlers in long waits return, so the server can stop
  // httplib's stop() does nothing before its listen loop has started: wait for the loop if
  // serve() is entering it, so a stop that comes early is not lost (serve() then sees stopping).
  while (impl_->listening && !impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->server.stop();
}

}  // namespace orchard::network
