#pragma once
// A file of a web page built at build time and embedded into the binary (cmake/web_page.cmake
// writes the tables: the World page's, the chat page's).
#include <string_view>

namespace orchard::core {

struct EmbeddedFile {
  std::string_view path;          // relative to the bundle: "index.html", "assets/world-3FJ2K.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view etag;          // quoted content hash, for If-None-Match
  std::string_view bytes;
};

}  // namespace orchard::core
