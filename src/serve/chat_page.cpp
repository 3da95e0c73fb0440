#include "serve/chat_page.h"

#include <httplib.h>

#include "serve/web_files.h"

namespace orchard::serve {

void mount_chat_page(httplib::Server& server) {
  // httplib answers HEAD with a GET route's headers.
  auto page = [](const httplib::Request& req, httplib::Response& res) {
    web::send_file(req, res, *web::find_file(chat_page_files(), "index.html"));
  };
  server.Get("/", page);
  server.Get("/chat", page);
  server.Get(R"(/chat/(assets/[A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const core::EmbeddedFile* file = web::find_file(chat_page_files(), req.matches[1].str());
    if (file == nullptr) {
      res.status = 404;
      return;
    }
    web::send_file(req, res, *file);
  });
}

bool is_chat_page_path(std::string_view path) { return path == "/" || path == "/chat" || path.starts_with("/chat/assets/"); }

}  // namespace orchard::serve
