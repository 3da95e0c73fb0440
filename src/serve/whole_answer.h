#pragma once
// A non-streamed answer of either API (OpenAI's, Ollama's): one JSON body once the job has
// finished. Until then a space goes out each probe interval (JSON allows whitespace before a
// value), so a client that left is noticed and its job cancelled.
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "serve/scheduler.h"

namespace orchard::serve {

// body(update, text): the JSON to send for the finished job's last update and its whole text
// (an error body when the update says so).
inline void send_whole_answer(httplib::Response& res, const char* content_type, std::shared_ptr<Job> job,
                              std::chrono::steady_clock::duration probe,
                              std::function<std::string(const JobUpdate&, std::string& text)> body) {
  using Clock = std::chrono::steady_clock;
  res.set_chunked_content_provider(
      content_type,
      [job, probe, body = std::move(body), text = std::string(), last_write = Clock::now()](
          size_t, httplib::DataSink& sink) mutable {
        const JobUpdate u = job->wait(std::chrono::duration_cast<std::chrono::milliseconds>(probe));
        text += u.text;
        if (!u.finished) {
          if (Clock::now() - last_write < probe) return true;
          last_write = Clock::now();
          return sink.write(" ", 1);
        }
        if (u.finish_reason == FinishReason::Cancelled) return false;
        const std::string out = body(u, text);
        if (!sink.write(out.data(), out.size())) return false;
        sink.done();
        return true;
      },
      [job](bool) { job->cancel(); });
}

}  // namespace orchard::serve
