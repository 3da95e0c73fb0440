#include "serve/openai/routes.h"

#include <thread>

#include <httplib.h>

#include <fmt/format.h>

#include "serve/chat_page.h"
#include "serve/cluster_page_routes.h"
#include "serve/http_guard.h"
#include "serve/whole_answer.h"
#include "serve/ollama/routes.h"
#include "serve/ollama/schema.h"

namespace orchard::serve::openai {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";

// Errors of Ollama's routes take Ollama's shape ({"error": "message"}), all others OpenAI's.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(ollama::is_ollama_path(req.path) ? ollama::error_body(e.message()) : error_body(e), kJson);
}

// The error an answer reports when the engine failed after the response had started.
ApiError engine_error(const JobUpdate& u) { return ApiError(500, "server_error", "generation failed: " + u.error); }

// Streams the job's text as server-sent events.
void stream_answer(std::shared_ptr<Started> s, httplib::Response& res, Clock::duration probe) {
  auto writer = std::make_shared<StreamWriter>(s->request.endpoint, s->meta, s->request.include_usage);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [s, writer, probe, last_write = Clock::now()](size_t, httplib::DataSink& sink) mutable {
        const JobUpdate u = s->job->wait(std::chrono::duration_cast<std::chrono::milliseconds>(probe));
        if (u.finished && u.finish_reason == FinishReason::Cancelled) return false;  // the server is stopping
        std::string out;
        // With a reply parser, text that may be a call is held until it is known to be one, and
        // reasoning is told apart from content.
        if (s->tool_parser)
          out += writer->delta(s->tool_parser->push(u.text));
        else if (!u.text.empty())
          out += writer->text(u.text);
        if (u.finished && u.finish_reason == FinishReason::Error) {
          out += writer->error(engine_error(u));
        } else if (u.finished) {
          bool called = false;
          if (s->tool_parser) {
            structured::ToolCallParser::Finished rest = s->tool_parser->finish();
            out += writer->delta(rest.last);
            called = !rest.calls.empty();
          }
          out += writer->end(u.finish_reason, u.usage, called);
        } else if (out.empty() && Clock::now() - last_write >= probe) {
          out = StreamWriter::keep_alive();
        }
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          last_write = Clock::now();
        }
        if (u.finished) sink.done();
        return true;
      },
      [s](bool) { s->job->cancel(); });
}

// Sends the whole answer as one JSON body once the job has finished.
void whole_answer(std::shared_ptr<Started> s, httplib::Response& res, Clock::duration probe) {
  std::shared_ptr<Job> job = s->job;
  send_whole_answer(res, kJson, std::move(job), probe, [s](const JobUpdate& u, std::string& text) {
    // The status line has gone out already; the body still says what happened.
    std::vector<ChatToolCall> calls;
    std::string reasoning;
    if (s->tool_parser && u.finish_reason != FinishReason::Error) {
      structured::ToolCallParser::Result split = s->tool_parser->whole(text);
      text = std::move(split.content);
      reasoning = std::move(split.reasoning);
      calls = std::move(split.calls);
    }
    return u.finish_reason == FinishReason::Error
               ? error_body(engine_error(u))
               : completion_body(s->request.endpoint, s->meta, text, u.finish_reason, u.usage, calls, reasoning);
  });
}

// Whether the request carries one of the keys. Every key is compared in full, so the time taken
// does not tell how much of a guess was right.
bool authorized(const httplib::Request& req, const std::vector<std::string>& keys) {
  const std::string auth = req.get_header_value("Authorization");
  if (!auth.starts_with("Bearer ")) return false;
  const std::string_view given = std::string_view(auth).substr(7);
  bool match = false;
  for (const std::string& key : keys) {
    unsigned char diff = given.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(key[i] ^ (i < given.size() ? given[i] : 0));
    match = match || diff == 0;
  }
  return match;
}

void answer(Service& service, Endpoint endpoint, const httplib::Request& req, httplib::Response& res, Clock::duration probe) {
  try {
    auto started = std::make_shared<Started>(service.start(endpoint, req.body));
    if (started->request.stream)
      stream_answer(std::move(started), res, probe);
    else
      whole_answer(std::move(started), res, probe);
  } catch (const ApiError& e) {
    send_error(req, res, e);
  }
}

}  // namespace

namespace {

http::GuardOptions with_threads(http::GuardOptions o, int threads) {
  o.threads = static_cast<size_t>(std::max(threads, 1));
  return o;
}

}  // namespace

HttpServer::HttpServer(Service& service, Metrics& metrics, const HttpOptions& options)
    : server_(std::make_unique<http::GuardedServer>(with_threads(options.connections, options.threads))) {
  httplib::Server& svr = *server_;
  svr.set_payload_max_length(options.max_body_bytes);
  // Headers and body are separate writes: without NODELAY the body of each keep-alive answer
  // (and each SSE event) can wait for the client's delayed ACK.
  svr.set_tcp_nodelay(true);
  const Clock::duration probe = options.probe_interval;

  if (!options.api_keys.empty()) {
    svr.set_pre_routing_handler([keys = options.api_keys, cluster_page = bool(options.cluster_topology)](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || is_chat_page_path(req.path) || (cluster_page && is_cluster_page_path(req.path)) ||
          authorized(req, keys))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(req, res, api_error(401, "this server wants an API key: Authorization: Bearer KEY", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  http::post(svr, "/v1/chat/completions", [&service, probe](const httplib::Request& req, httplib::Response& res) {
    answer(service, Endpoint::ChatCompletions, req, res, probe);
  });
  http::post(svr, "/v1/completions", [&service, probe](const httplib::Request& req, httplib::Response& res) {
    answer(service, Endpoint::Completions, req, res, probe);
  });
  mount_chat_page(svr);
  if (options.cluster_topology) mount_cluster_page(svr, options.cluster_topology);
  ollama::mount_routes(svr, service, std::chrono::duration_cast<std::chrono::milliseconds>(probe));
  svr.Get("/v1/models", [&service](const httplib::Request&, httplib::Response& res) { res.set_content(service.models_body(), kJson); });
  svr.Get("/health", [&service](const httplib::Request&, httplib::Response& res) { res.set_content(service.health_body(), kJson); });
  svr.Get("/metrics", [&service](const httplib::Request&, httplib::Response& res) {
    res.set_content(service.metrics_text(), "text/plain; version=0.0.4");
  });

  // Every other failure gets an OpenAI-style body too: unknown routes (404), bodies over the
  // limit (413), and anything a handler threw (500: a bug, never bad input).
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(req, res, ApiError(500, "server_error", "internal error: " + what));
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 404   ? fmt::format("no route {} {}", req.method, req.path)
                                : res.status == 413 ? std::string("the request body is too large")
                                                    : fmt::format("HTTP status {}", res.status);
    const std::string type = res.status >= 500 ? "server_error" : "invalid_request_error";
    send_error(req, res, ApiError(res.status, type, message));
  });
  svr.set_logger([&metrics](const httplib::Request&, const httplib::Response& res) { metrics.count_request(res.status); });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) throw Error(error_message("serve", "cannot listen on {}:{} (in use, or not an address of this machine?)", host, port));
  return bound;
}

void HttpServer::listen() {
  listening_ = true;
  if (!stop_requested_) server_->listen_after_bind();
  listening_ = false;
}

void HttpServer::stop() {
  stop_requested_ = true;
  // Either listen() sees the request and returns, or it is (about to be) in httplib's loop,
  // which stop() ends once it runs.
  while (listening_ && !server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
}

}  // namespace orchard::serve::openai
