#include "serve/ollama/routes.h"

#include <httplib.h>

#include "serve/http_guard.h"
#include "serve/whole_answer.h"
#include "serve/ollama/schema.h"

namespace orchard::serve::ollama {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json; charset=utf-8";
constexpr const char* kNdjson = "application/x-ndjson";

void send_error(httplib::Response& res, const openai::ApiError& e) {
  res.status = e.status();
  res.set_content(error_body(e.message()), kJson);
}

struct Call {
  openai::Started started;
  Answer answer;
  Clock::time_point start;

  int64_t elapsed_ns() const { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(); }
};

// The error line of an answer whose engine failed after the status line went out.
std::string failure_line(const JobUpdate& u) { return error_body("generation failed: " + u.error) + "\n"; }

// One NDJSON line per piece of text, then the last line with the counts. Until there is text it
// writes a space each probe interval (it joins the next line as leading whitespace) to notice a
// client that left.
void stream_answer(std::shared_ptr<Call> c, httplib::Response& res, Clock::duration probe) {
  res.set_chunked_content_provider(
      kNdjson,
      [c, probe, last_write = Clock::now()](size_t, httplib::DataSink& sink) mutable {
        const JobUpdate u = c->started.job->wait(std::chrono::duration_cast<std::chrono::milliseconds>(probe));
        if (u.finished && u.finish_reason == FinishReason::Cancelled) return false;  // the server is stopping
        const std::shared_ptr<structured::ToolCallParser>& tools = c->started.tool_parser;
        const bool thinking = c->started.request.thinking;
        std::string out;
        // With a reply parser, text that may be a call is held until it is known to be one
        // (calls go out whole at the end) and reasoning is "thinking", unless think is false.
        structured::ReplyDelta d;
        if (tools) d = tools->push(u.text);
        else d.content = u.text;
        if (!thinking) d.reasoning.clear();
        if (!d.content.empty() || !d.reasoning.empty()) out += chunk_line(c->answer, d.content, {}, d.reasoning);
        if (u.finished && u.finish_reason == FinishReason::Error) {
          out += failure_line(u);
        } else if (u.finished) {
          if (tools) {
            // Ollama streams the calls as one message of their own before the last line.
            structured::ToolCallParser::Finished rest = tools->finish();
            if (!thinking) rest.last.reasoning.clear();
            if (!rest.last.content.empty() || !rest.calls.empty() || !rest.last.reasoning.empty())
              out += chunk_line(c->answer, rest.last.content, rest.calls, rest.last.reasoning);
          }
          out += final_line(c->answer, "", u.finish_reason, u.usage, c->elapsed_ns());
        } else if (out.empty() && Clock::now() - last_write >= probe)
          out.push_back(' ');  // (assigning " " trips GCC 12's -Wrestrict false positive)
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          last_write = Clock::now();
        }
        if (u.finished) sink.done();
        return true;
      },
      [c](bool) { c->started.job->cancel(); });
}

// The whole answer as one JSON object once the job has finished, spaces before it meanwhile.
void whole_answer(std::shared_ptr<Call> c, httplib::Response& res, Clock::duration probe) {
  std::shared_ptr<Job> job = c->started.job;
  send_whole_answer(res, kJson, std::move(job), probe, [c](const JobUpdate& u, std::string& text) {
    if (u.finish_reason == FinishReason::Error) return failure_line(u);
    std::vector<ChatToolCall> calls;
    std::string thinking;
    if (const auto& tools = c->started.tool_parser) {
      structured::ToolCallParser::Result split = tools->whole(text);
      text = std::move(split.content);
      calls = std::move(split.calls);
      if (c->started.request.thinking) thinking = std::move(split.reasoning);
    }
    return final_line(c->answer, text, u.finish_reason, u.usage, c->elapsed_ns(), calls, thinking);
  });
}

void answer(openai::Service& service, Route route, const httplib::Request& req, httplib::Response& res, Clock::duration probe) {
  const Clock::time_point start = Clock::now();
  try {
    Request r = parse_request(route, req.body);
    const Answer answer{route, model_name(service.info())};
    if (r.load_only) {
      service.check_model(r.generation.model);
      res.set_content(load_line(answer), kJson);
      return;
    }
    const bool stream = r.generation.stream;
    auto call = std::make_shared<Call>(Call{service.start(std::move(r.generation)), answer, start});
    if (stream)
      stream_answer(std::move(call), res, probe);
    else
      whole_answer(std::move(call), res, probe);
  } catch (const openai::ApiError& e) {
    send_error(res, e);
  }
}

}  // namespace

bool is_ollama_path(std::string_view path) { return path.starts_with("/api/"); }

void mount_routes(httplib::Server& svr, openai::Service& service, std::chrono::milliseconds probe) {
  svr.Get("/api/version", [](const httplib::Request&, httplib::Response& res) { res.set_content(version_body(), kJson); });
  svr.Get("/api/tags", [&service](const httplib::Request&, httplib::Response& res) { res.set_content(tags_body(service.info()), kJson); });
  svr.Get("/api/ps", [&service](const httplib::Request&, httplib::Response& res) { res.set_content(ps_body(service.info()), kJson); });
  http::post(svr, "/api/show", [&service](const httplib::Request& req, httplib::Response& res) {
    try {
      service.check_model(parse_show_request(req.body));
      res.set_content(show_body(service.info(), service.chat_family(), service.n_ctx()), kJson);
    } catch (const openai::ApiError& e) {
      send_error(res, e);
    }
  });
  http::post(svr, "/api/chat", [&service, probe](const httplib::Request& req, httplib::Response& res) {
    answer(service, Route::Chat, req, res, probe);
  });
  http::post(svr, "/api/generate", [&service, probe](const httplib::Request& req, httplib::Response& res) {
    answer(service, Route::Generate, req, res, probe);
  });
}

}  // namespace orchard::serve::ollama
