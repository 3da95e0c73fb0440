#include "serve/web_files.h"

#include <httplib.h>

#include <string>

namespace orchard::serve::web {

const core::EmbeddedFile* find_file(std::span<const core::EmbeddedFile> files, std::string_view path) {
  return core::find_embedded_file(files, path);
}

void send_file(const httplib::Request& req, httplib::Response& res, const core::EmbeddedFile& file) {
  const bool hashed = file.path.starts_with("assets/");
  res.set_header("Cache-Control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
  res.set_header("ETag", std::string(file.etag));
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", std::string(core::kEmbeddedPageCsp));
  res.set_header("Referrer-Policy", "no-referrer");
  if (req.get_header_value("If-None-Match") == file.etag) {
    res.status = 304;
    return;
  }
  res.set_content(file.bytes.data(), file.bytes.size(), std::string(file.content_type).c_str());
}

}  // namespace orchard::serve::web
