#include "serve/http_guard.h"

#include "serve/openai/schema.h"

namespace orchard::serve::http {

void post(httplib::Server& server, const std::string& pattern, httplib::Server::Handler handler) {
  server.Post(pattern, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                      const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {
      res.status = 415;
      res.set_content(openai::error_body(openai::api_error(415, "send the request as JSON, not multipart form data")),
                      "application/json");
      return;
    }
    httplib::Request full = req;  // its path matches still point into req, which outlives the call
    if (!read([&](const char* data, size_t size) {
          full.body.append(data, size);
          return true;
        }))
      return;  // httplib set the status (413 over the payload limit); the error handler writes the body
    handler(full, res);
  });
}

}  // namespace orchard::serve::http
